"""The checkpoint mirror in object storage: ``s3://bucket/prefix``, ``gs://bucket/prefix`` (also
``gcs://``) and ``az://container/prefix`` (also ``abfs://``), through fsspec with s3fs, gcsfs or adlfs.

An object store has no folder rename, so completeness is the completion marker: a checkpoint's files
are uploaded first and ``COMPLETE.json`` last, and a mirrored ``step-N/`` counts only once its marker
is there. A re-upload of the same step deletes the old marker before anything else, so an upload cut
half-way never leaves a marker beside files of another upload. Restoring downloads only folders with a
marker and verifies every file against the marker's SHA-256 sums; the last K (at least 2) complete
checkpoints are kept, and folders left by cut uploads older than the newest complete one are removed.

Credentials and endpoints come from each library's usual sources (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``~/.aws``; for GCS: application default credentials;
for Azure: ``AZURE_STORAGE_CONNECTION_STRING`` or ``AZURE_STORAGE_ACCOUNT_NAME`` with a key or login).
"""

from __future__ import annotations

import importlib.util
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

from . import checkpoint

# URL scheme -> (fsspec protocol, the package that implements it, the extra that installs it)
SCHEMES: dict[str, tuple[str, str, str]] = {
    "s3": ("s3", "s3fs", "s3"),
    "gs": ("gs", "gcsfs", "gcs"),
    "gcs": ("gs", "gcsfs", "gcs"),
    "az": ("az", "adlfs", "azure"),
    "abfs": ("abfs", "adlfs", "azure"),
}


class MirrorUnavailable(ValueError):
    """A mirror URL the trainer cannot use (unknown scheme, no bucket, its library missing): one line, exit 2."""


def check(url: str) -> None:
    """Refuse, in one line, a URL without a bucket or whose storage library is not installed."""
    parsed = urllib.parse.urlparse(url)
    if not parsed.netloc:
        raise MirrorUnavailable(f"mirror URL {url!r} names no bucket: use {parsed.scheme}://bucket/prefix")
    _protocol, package, extra = SCHEMES[parsed.scheme]
    for name in ("fsspec", package):
        if importlib.util.find_spec(name) is None:
            raise MirrorUnavailable(
                f"mirroring to {parsed.scheme}:// needs {name}: pip install 'gpuplanner[{extra}]' (or pip install {package})"
            )


class ObjectStore:
    """One checkpoint mirror root in an object store."""

    def __init__(self, url: str) -> None:
        check(url)
        import fsspec

        parsed = urllib.parse.urlparse(url)
        protocol = SCHEMES[parsed.scheme][0]
        # No listing cache (another host may have changed the mirror since); fsspec keeps one client per
        # process and settings, so each push does not set up a new connection pool and session.
        self.fs: Any = fsspec.filesystem(protocol, use_listings_cache=False)
        self.root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")

    def _names(self) -> list[str]:
        """``step-N`` folder names at the root, newest first."""
        self.fs.invalidate_cache()
        try:
            paths = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        names = {p.rstrip("/").rsplit("/", 1)[-1] for p in paths}
        steps = (n for n in names if n.startswith(checkpoint.PREFIX) and n[len(checkpoint.PREFIX) :].isdigit())
        return sorted(steps, reverse=True)

    def _complete(self, name: str) -> bool:
        return bool(self.fs.exists(f"{self.root}/{name}/{checkpoint.MARKER}"))

    def _remove(self, name: str) -> None:
        """Delete a mirrored folder, its marker first (it stops counting before its files go)."""
        folder = f"{self.root}/{name}"
        marker = f"{folder}/{checkpoint.MARKER}"
        if self.fs.exists(marker):
            self.fs.rm_file(marker)
        try:
            files = self.fs.find(folder)
        except FileNotFoundError:
            return
        if files:
            self.fs.rm(files)

    def push(self, src: Path, keep: int) -> None:
        self.fs.invalidate_cache()
        self._remove(src.name)
        files = sorted(f for f in src.iterdir() if f.is_file() and f.name != checkpoint.MARKER)
        for f in [*files, src / checkpoint.MARKER]:  # the completion marker last
            self.fs.put_file(str(f), f"{self.root}/{src.name}/{f.name}")
        names = self._names()
        done = [n for n in names if self._complete(n)]
        for old in done[max(2, keep) :]:
            self._remove(old)
        newest = checkpoint.step_of(Path(done[0])) if done else None
        for name in names:  # folders of cut uploads behind the newest complete checkpoint
            if name not in done and newest is not None and checkpoint.step_of(Path(name)) < newest:
                self._remove(name)

    def fetch_newest(self, root: Path) -> Path | None:
        """Download the newest complete, checksum-valid mirrored checkpoint into ``root``."""
        for name in self._names():
            if not self._complete(name):
                continue  # a cut upload: never restored
            dest = root / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            for remote in self.fs.find(f"{self.root}/{name}"):
                self.fs.get_file(remote, str(dest / remote.rsplit("/", 1)[-1]))
            if checkpoint.is_valid(dest):
                return dest
            shutil.rmtree(dest, ignore_errors=True)
        return None
