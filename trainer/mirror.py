"""Mirror complete checkpoints to a durable location so a run can resume on another host.

URLs: a local path (or ``file://``), ``sftp://[user@]host[:port]/path`` (needs paramiko; uses
the SSH agent and ``~/.ssh`` keys), or object storage, ``s3://``, ``gs://``, ``az://``
(``object_mirror.py``, through fsspec). Each checkpoint is copied into a temporary folder, completion
marker last, and renamed into place, so a mirrored ``step-N`` folder is always complete; the last K
(at least 2) are kept. ``fetch_newest`` restores the newest mirrored checkpoint into a run
directory that has none.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import urllib.parse
from pathlib import Path, PurePosixPath
from typing import Any

from . import checkpoint, object_mirror
from .telemetry import warn


def _parse(url: str) -> tuple[str, Any]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return "local", Path(parsed.path if parsed.scheme else url)
    if parsed.scheme == "sftp":
        return "sftp", parsed
    if parsed.scheme in object_mirror.SCHEMES:
        object_mirror.check(url)
        return "object", url
    raise object_mirror.MirrorUnavailable(
        f"unsupported mirror URL {url!r}: use a path, sftp://host/path, s3://bucket/prefix, gs://bucket/prefix"
        " or az://container/prefix"
    )


def _files_marker_last(src: Path) -> list[Path]:
    files = sorted(f for f in src.iterdir() if f.is_file() and f.name != checkpoint.MARKER)
    return files + [src / checkpoint.MARKER]


# The host keys trusted, as OpenSSH reads them (the user's file, then the system's).
KNOWN_HOSTS_FILES = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")


def revoked_keys(paths: Any) -> set[str]:
    """The base64 blobs of the keys a ``@revoked`` line names in any of ``paths``."""
    out: set[str] = set()
    for path in paths:
        try:
            lines = Path(path).expanduser().read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 4 and fields[0] == "@revoked":
                out.add(fields[3])
    return out


def trust_host_keys(client: Any, paths: Any = KNOWN_HOSTS_FILES) -> None:
    """Trust the keys of the known_hosts files except those marked ``@revoked`` anywhere, as OpenSSH does
    (paramiko's own loading fails on a line with a marker): a revoked key is then unknown, and the client's
    default policy refuses it before authenticating. ``@cert-authority`` lines are skipped (not trusted)."""
    from paramiko.hostkeys import HostKeyEntry

    revoked = revoked_keys(paths)
    trusted = client.get_host_keys()
    for path in paths:
        try:
            lines = Path(path).expanduser().read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            if not line.strip() or line.lstrip().startswith(("#", "@")):
                continue
            try:
                entry = HostKeyEntry.from_line(line)
            except Exception:  # noqa: BLE001 (paramiko raises several kinds for a malformed line: skipped)
                continue
            if entry is None or entry.key is None or entry.key.get_base64() in revoked:
                continue
            for name in entry.hostnames:
                trusted.add(name, entry.key.get_name(), entry.key)


class _Sftp:
    def __init__(self, parsed: Any) -> None:
        import paramiko

        self.client = paramiko.SSHClient()  # unknown host keys are refused (paramiko's RejectPolicy)
        trust_host_keys(self.client)
        self.client.connect(parsed.hostname, port=parsed.port or 22, username=parsed.username, timeout=20)
        self.sftp = self.client.open_sftp()
        self.root = PurePosixPath(parsed.path)

    def makedirs(self, path: PurePosixPath) -> None:
        parts = []
        for part in path.parts:
            parts.append(part)
            p = str(PurePosixPath(*parts))
            try:
                self.sftp.stat(p)
            except OSError:
                self.sftp.mkdir(p)

    def rmtree(self, path: PurePosixPath) -> None:
        """Remove a folder of files (checkpoints are flat); missing is fine."""
        try:
            names = self.sftp.listdir(str(path))
        except OSError:
            return
        for name in names:
            self.sftp.remove(str(path / name))
        self.sftp.rmdir(str(path))

    def close(self) -> None:
        self.client.close()


def push(src: Path, url: str, keep: int) -> None:
    kind, target = _parse(url)
    if kind == "local":
        # Every file, the completion marker last, goes into a temporary folder that is fsynced and then
        # renamed into place: a mirrored checkpoint appears all at once, already marked complete.
        dest = target / src.name
        tmp = target / f".tmp-{src.name}"
        target.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for f in _files_marker_last(src):
            shutil.copy2(f, tmp / f.name)
            _fsync(tmp / f.name)
        _fsync(tmp)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        _fsync(target)
        done = sorted(
            (p for p in target.iterdir() if p.name.startswith(checkpoint.PREFIX) and (p / checkpoint.MARKER).exists()),
            reverse=True,
        )
        for old in done[max(2, keep) :]:
            shutil.rmtree(old, ignore_errors=True)
        return
    if kind == "object":
        object_mirror.ObjectStore(target).push(src, keep)
        return
    conn = _Sftp(target)
    try:
        dest = conn.root / src.name
        tmp = conn.root / f".tmp-{src.name}"
        conn.makedirs(conn.root)
        conn.rmtree(tmp)
        conn.sftp.mkdir(str(tmp))
        for f in _files_marker_last(src):
            conn.sftp.put(str(f), str(tmp / f.name))
        conn.rmtree(dest)
        conn.sftp.rename(str(tmp), str(dest))
        done = sorted(
            (
                a.filename
                for a in conn.sftp.listdir_attr(str(conn.root))
                if a.filename.startswith(checkpoint.PREFIX) and stat.S_ISDIR(a.st_mode or 0)
            ),
            reverse=True,
        )
        for old in done[max(2, keep) :]:
            conn.rmtree(conn.root / old)
    finally:
        conn.close()


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fetch_newest(url: str, run_dir: Path) -> Path | None:
    """Copy the newest valid mirrored checkpoint into ``run_dir/checkpoints``; return its path."""
    kind, target = _parse(url)
    root = checkpoint.checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        if not target.is_dir():
            return None
        for src in sorted((p for p in target.iterdir() if p.name.startswith(checkpoint.PREFIX)), reverse=True):
            if checkpoint.is_valid(src):
                dest = root / src.name
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(src, dest)
                return dest
        return None
    if kind == "object":
        return object_mirror.ObjectStore(target).fetch_newest(root)
    conn = _Sftp(target)
    try:
        try:
            entries = conn.sftp.listdir_attr(str(conn.root))
        except FileNotFoundError:  # nothing mirrored yet (a first run)
            return None
        names = sorted(
            (a.filename for a in entries if a.filename.startswith(checkpoint.PREFIX) and stat.S_ISDIR(a.st_mode or 0)),
            reverse=True,
        )
        for name in names:
            dest = root / name
            dest.mkdir(exist_ok=True)
            for entry in conn.sftp.listdir(str(conn.root / name)):
                conn.sftp.get(str(conn.root / name / entry), str(dest / entry))
            if checkpoint.is_valid(dest):
                return dest
            shutil.rmtree(dest, ignore_errors=True)
        return None
    finally:
        conn.close()


class Mirror:
    """Pushes checkpoints in a background thread, one at a time; a push still running is not queued twice."""

    def __init__(self, url: str, keep: int) -> None:
        _parse(url)
        self.url, self.keep = url, keep
        self._thread: threading.Thread | None = None
        self.pushed: list[str] = []

    def submit(self, path: Path) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._push, args=(path,), name="checkpoint-mirror", daemon=True)
        self._thread.start()

    def _push(self, path: Path) -> None:
        try:
            push(path, self.url, self.keep)
            self.pushed.append(path.name)
        except Exception as exc:
            warn(f"mirroring {path.name} to {self.url} failed: {exc}")

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
