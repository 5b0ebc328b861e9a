"""Stop requests: signals and cloud preemption notices set one flag; the loop acts on it between steps.

Signal handlers only set the flag (never save inside a handler). :class:`MetadataWatcher` polls an
instance-metadata endpoint in a daemon thread: AWS spot ``instance-action`` (200 with a body means a
notice), GCP ``instance/preempted`` (``TRUE``), Azure scheduled events (an event of type ``Preempt``).
On AWS an IMDSv2 session token is fetched first (``PUT /latest/api/token``) and sent with each poll:
instances that require IMDSv2 answer 401 to a request without one; where the token cannot be had
(IMDSv1 only, an old proxy) the watcher polls without it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from . import early_signals

# Stop reasons, ordered: the highest wins when ranks are combined with a max all-reduce.
NONE, EARLY_STOP, BUDGET_STOP, PREEMPTED = 0, 1, 2, 3
REASON_STATUS = {EARLY_STOP: "early_stop", BUDGET_STOP: "budget_stop", PREEMPTED: "preempted"}

DEFAULT_URLS = {
    "aws": "http://169.254.169.254/latest/meta-data/spot/instance-action",
    "gcp": "http://metadata.google.internal/computeMetadata/v1/instance/preempted",
    "azure": "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01",
}
HEADERS = {"aws": {}, "gcp": {"Metadata-Flavor": "Google"}, "azure": {"Metadata": "true"}}
AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_TTL_S = 21600


class StopFlag:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reason = NONE
        self.detail = ""

    def request(self, reason: int, detail: str = "") -> None:
        with self._lock:
            if reason > self.reason:
                self.reason, self.detail = reason, detail

    @property
    def set(self) -> bool:
        return self.reason != NONE


class SignalHandlers:
    """Context manager: SIGTERM, SIGINT and SIGUSR1 request a preemption stop; restores on exit.

    A stop signal recorded during start-up (:mod:`trainer.early_signals`, installed by
    ``python -m trainer`` before the heavy imports) requests the stop as soon as this is entered.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

    def __init__(self, flag: StopFlag) -> None:
        self.flag = flag
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.flag.request(PREEMPTED, f"signal {signal.Signals(signum).name}")

    def __enter__(self) -> SignalHandlers:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handler)
        early = early_signals.pending()
        if early is not None:
            self.flag.request(PREEMPTED, f"signal {signal.Signals(early).name} (during start-up)")
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def notice_in(provider: str, status: int, body: bytes) -> str | None:
    """The preemption notice in one metadata response, or None."""
    text = body.decode("utf-8", "replace").strip()
    if status != 200 or not text:
        return None
    if provider == "gcp":
        return "gcp preempted" if text.upper() == "TRUE" else None
    if provider == "azure" or (provider == "auto" and "Events" in text):
        try:
            events = json.loads(text).get("Events", [])
        except (ValueError, AttributeError):
            return None
        for ev in events:
            if isinstance(ev, dict) and ev.get("EventType") == "Preempt":
                return f"azure Preempt {ev.get('NotBefore', '')}".strip()
        return None
    if provider == "auto" and text.upper() in ("TRUE", "FALSE"):
        return "gcp preempted" if text.upper() == "TRUE" else None
    try:
        action = json.loads(text)
    except ValueError:
        return None
    if isinstance(action, dict) and action.get("action") in ("terminate", "stop", "hibernate"):
        return f"aws spot {action['action']} at {action.get('time', '?')}"
    return None


class MetadataWatcher:
    def __init__(self, url: str | None, provider: str, interval_s: float, on_notice: Callable[[str], None]) -> None:
        if provider == "auto" and not url:
            raise ValueError("--preemption-provider auto needs --preemption-url")
        self.provider = provider
        self.url = url or DEFAULT_URLS[provider]
        self.interval_s = interval_s
        self.on_notice = on_notice
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preemption-watcher", daemon=True)
        self.polls = 0
        self.errors = 0
        self._token: str | None = None
        self._token_until = 0.0

    def _aws_token(self, refresh: bool = False) -> str | None:
        """An IMDSv2 session token for the AWS metadata service (cached until shortly before it
        expires), or None when the service gives none."""
        now = time.monotonic()
        if self._token is not None and not refresh and now < self._token_until:
            return self._token
        parts = urllib.parse.urlsplit(self.url)
        req = urllib.request.Request(
            urllib.parse.urlunsplit((parts.scheme, parts.netloc, AWS_TOKEN_PATH, "", "")),
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
        )
        try:
            with urllib.request.urlopen(req, timeout=min(2.0, self.interval_s + 1)) as resp:
                token = resp.read(4096).decode("ascii", "replace").strip()
        except urllib.error.HTTPError as exc:
            exc.close()
            token = ""
        except (urllib.error.URLError, OSError, ValueError):
            token = ""
        self._token = token or None
        self._token_until = now + (AWS_TOKEN_TTL_S - 60 if token else 30.0)  # no token: ask again later
        return self._token

    def start(self) -> MetadataWatcher:
        self._thread.start()
        return self

    def poll_once(self) -> str | None:
        headers = {
            **HEADERS.get(self.provider, {}),
            **({"Metadata-Flavor": "Google", "Metadata": "true"} if self.provider == "auto" else {}),
        }
        if self.provider == "aws":
            token = self._aws_token()
            if token:
                headers["X-aws-ec2-metadata-token"] = token
        req = urllib.request.Request(self.url, headers=headers)
        self.polls += 1
        try:
            with urllib.request.urlopen(req, timeout=min(2.0, self.interval_s + 1)) as resp:
                return notice_in(self.provider, resp.status, resp.read(65536))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 401 and self.provider == "aws":
                self._token_until = 0.0  # an expired or missing token: a new one for the next poll
            return None
        except (urllib.error.URLError, OSError, ValueError):
            self.errors += 1
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self.poll_once()
            if notice:
                self.on_notice(notice)
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3)
