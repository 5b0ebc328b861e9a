"""Download SkyPilot's hosted price catalogs (the network half of `gpuplanner catalog update`).

Standard library only (``urllib``). Each cloud's ``<base>/<cloud>/vms.csv`` is fetched within a time limit for
the whole download and a size cap. Its date is the catalog's own where it has one (for a file on
``raw.githubusercontent.com``, the date of the last commit that touched it, from GitHub's commits API), else the
date the user gives (``--as-of``), else the HTTP ``Last-Modified`` header (never a date in the future; a mirror's
copy day, so the basis says so), else the download day, and the date's basis says which. A download that ends before its announced
length is "cut short" and rejected. When the host cannot be reached at all the update stops with
:class:`Offline` and nothing changes. Called only on the user's request; planning never waits for it.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from gpuplanner import __version__
from gpuplanner.plan.catalog_update import FetchedCatalog, cloud_url

DEFAULT_TIMEOUT_S = 30.0
MAX_BYTES = 64 * 1024 * 1024  # the largest SkyPilot vms.csv (AWS) is a few MB
_CHUNK = 256 * 1024
GITHUB_API = "https://api.github.com"
_USER_AGENT = f"gpuplanner/{__version__} (catalog update)"


class Offline(Exception):
    """The catalog host cannot be reached (no network, DNS failure, connection refused, timeout)."""


class FetchError(Exception):
    """One file could not be downloaded (HTTP error, cut short, too large, not UTF-8)."""


def _read_within(response: http.client.HTTPResponse, url: str, deadline: float, timeout: float) -> bytes:
    """The body, read piece by piece until ``deadline`` (``time.monotonic()``): ``--timeout`` bounds the whole
    download, not each read, so a server that drips a byte at a time cannot hold the update for ever."""
    sock = getattr(getattr(response.fp, "raw", None), "_sock", None)  # the socket under the response
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"{url}: the download took longer than {timeout:g} s; not finished")
        if isinstance(sock, socket.socket):
            sock.settimeout(remaining)
        try:
            chunk = response.read1(_CHUNK)
        except TimeoutError:
            raise FetchError(f"{url}: the download took longer than {timeout:g} s; not finished") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BYTES:
            raise FetchError(f"{url}: larger than {MAX_BYTES // (1024 * 1024)} MB; not a price catalog")


def _open(url: str, timeout: float) -> tuple[bytes, str | None]:
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"})
    deadline = time.monotonic() + timeout
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http/https only)
            length = response.headers.get("Content-Length")
            body = _read_within(response, url, deadline, timeout)
            if length is not None and length.isdigit() and len(body) < int(length):
                raise FetchError(f"{url}: cut short: {len(body)} of {length} bytes arrived")
            return body, response.headers.get("Last-Modified")
    except http.client.IncompleteRead as exc:
        raise FetchError(f"{url}: cut short: {len(exc.partial)} bytes arrived before the connection ended") from None
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError, ConnectionError, socket.gaierror, OSError)):
            host = urllib.parse.urlsplit(url).netloc
            raise Offline(f"cannot reach {host} ({reason})") from None
        raise FetchError(f"{url}: {reason}") from None
    except (TimeoutError, ConnectionError) as exc:
        host = urllib.parse.urlsplit(url).netloc
        raise Offline(f"cannot reach {host} ({exc})") from None


def _http_date(value: str | None, today: _dt.date | None = None) -> str | None:
    """The date of a ``Last-Modified`` header, or None when there is none, it does not parse (any offset,
    any year), or it lies in the future (a server's wrong clock must not date prices ahead and freeze them:
    a later correct catalog would then count as older)."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
        day = parsed.astimezone(_dt.UTC).date() if parsed.tzinfo else parsed.date()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    if day > (today or _dt.datetime.now(_dt.UTC).date()) + _dt.timedelta(days=1):
        return None
    return day.isoformat()


def github_commits_url(url: str, api_base: str = GITHUB_API) -> str | None:
    """For ``https://raw.githubusercontent.com/OWNER/REPO/REF/PATH``, the commits-API query for the newest
    commit touching PATH at REF; None for any other URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc != "raw.githubusercontent.com":
        return None
    segments = parts.path.strip("/").split("/")
    if len(segments) < 4:
        return None
    owner, repo, ref, path = segments[0], segments[1], segments[2], "/".join(segments[3:])
    query = urllib.parse.urlencode({"path": path, "sha": ref, "per_page": "1"})
    return f"{api_base.rstrip('/')}/repos/{owner}/{repo}/commits?{query}"


def commit_date(api_url: str, timeout: float) -> str | None:
    """The committer date of the first commit in a GitHub commits-API answer, or None."""
    try:
        body, _ = _open(api_url, timeout)
        data = json.loads(body.decode("utf-8"))
        stamp = data[0]["commit"]["committer"]["date"]
        return _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).date().isoformat()
    except (FetchError, Offline, ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError):
        return None


LAST_MODIFIED = "Last-Modified header"
GIVEN = "date given with --as-of"


def fetch_dated(
    url: str, *, timeout: float = DEFAULT_TIMEOUT_S, api_base: str = GITHUB_API, as_of: str | None = None
) -> tuple[str, str, str]:
    """``(text, as_of, date basis)`` of one file. Raises :class:`Offline` or :class:`FetchError`.

    The date is the catalog's own where it has one (the last commit of a file on GitHub), else ``as_of``
    (``--as-of``, for a mirror or a copy), else the server's ``Last-Modified`` (which a mirror sets to the day
    it copied the file: the basis says so), else the download day."""
    body, last_modified = _open(url, timeout)
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FetchError(f"{url}: not UTF-8 text ({exc.reason})") from None
    api = github_commits_url(url, api_base)
    date, basis = (commit_date(api, timeout), "git commit date") if api else (None, "")
    if date is None and as_of is not None:
        date, basis = as_of, GIVEN
    if date is None:
        date, basis = _http_date(last_modified), LAST_MODIFIED
    if date is None:
        date, basis = _dt.date.today().isoformat(), "download date (the catalog gave none)"
    return text, date, basis


def fetch_cloud(
    base: str,
    cloud: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    api_base: str = GITHUB_API,
    as_of: str | None = None,
) -> FetchedCatalog:
    """Download one cloud's ``vms.csv`` with its date. Raises :class:`Offline` or :class:`FetchError`."""
    url = cloud_url(base, cloud)
    text, as_of, basis = fetch_dated(url, timeout=timeout, api_base=api_base, as_of=as_of)
    return FetchedCatalog(cloud, url, text, as_of, basis)


def fetch_all(
    base: str,
    clouds: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    api_base: str = GITHUB_API,
    on_progress: Callable[[str], None] | None = None,
    as_of: str | None = None,
) -> tuple[list[FetchedCatalog], dict[str, tuple[str, str]]]:
    """Every cloud's catalog, and per cloud that failed ``(url, message)``. Raises :class:`Offline` when no
    cloud's host could be reached at all (then nothing is returned and nothing may change)."""
    fetched: list[FetchedCatalog] = []
    failures: dict[str, tuple[str, str]] = {}
    offline: list[Offline] = []
    for cloud in clouds:
        if on_progress:
            on_progress(cloud)
        try:
            fetched.append(fetch_cloud(base, cloud, timeout=timeout, api_base=api_base, as_of=as_of))
        except Offline as exc:
            offline.append(exc)
            failures[cloud] = (cloud_url(base, cloud), f"offline: {exc}")
        except FetchError as exc:
            failures[cloud] = (cloud_url(base, cloud), str(exc))
    if clouds and len(offline) == len(clouds):
        raise offline[0]
    return fetched, failures
