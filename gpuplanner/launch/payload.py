"""The payload: the ``trainer`` package plus the process wrapper, identified by a content hash.

The trainer's sources are found with :func:`gpuplanner.resources.trainer_source_dir` (in the frozen
app ``trainer.__file__`` points into PyInstaller's archive, where there are no ``.py`` files; the
bundle ships a plain copy of the sources). Locally they run from where they are. On an SSH host they live in
``REMOTE_ROOT/payload/<hash>/`` and are uploaded by SFTP only when that folder is not complete yet
(upload into a temporary folder, then rename), so concurrent launches and re-launches cost nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import paramiko

from gpuplanner.resources import trainer_source_dir

WRAPPER = Path(__file__).resolve().parent / "wrapper.py"
WRAPPER_NAME = "gpuplanner_wrapper.py"
COMPLETE = ".complete"


@dataclass(frozen=True)
class Payload:
    """Where the payload is on a host: ``pythonpath`` holds ``trainer/``; ``wrapper`` is the script."""

    pythonpath: str
    wrapper: str
    content_hash: str


def _files() -> list[tuple[str, Path]]:
    source = trainer_source_dir()
    files = [
        (f"trainer/{p.relative_to(source).as_posix()}", p)
        for p in sorted(source.rglob("*.py"))
        if "__pycache__" not in p.parts
    ]
    return files + [(WRAPPER_NAME, WRAPPER)]


def content_hash() -> str:
    return _hash_of(tuple((rel, str(path), path.stat().st_mtime_ns, path.stat().st_size) for rel, path in _files()))


@lru_cache(maxsize=8)
def _hash_of(files: tuple[tuple[str, str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for rel, path, _, _ in files:
        digest.update(rel.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def local_payload() -> Payload:
    return Payload(str(trainer_source_dir().parent), str(WRAPPER), content_hash())


def _exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.stat(path)
        return True
    except FileNotFoundError:
        return False


def _mkdirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        sub = "/".join(parts[:i])
        if sub and not _exists(sftp, sub):
            try:
                sftp.mkdir(sub, 0o700)
            except OSError:
                if not _exists(sftp, sub):
                    raise


def ensure_remote(sftp: paramiko.SFTPClient, remote_root: str) -> tuple[Payload, bool]:
    """Upload the payload under ``remote_root`` (absolute) unless present; returns it and whether it uploaded."""
    h = content_hash()
    final = f"{remote_root}/payload/{h}"
    payload = Payload(final, f"{final}/{WRAPPER_NAME}", h)
    if _exists(sftp, f"{final}/{COMPLETE}"):
        return payload, False
    tmp = f"{remote_root}/payload/.tmp-{h}-{secrets.token_hex(4)}"
    _mkdirs(sftp, tmp)
    for rel, path in _files():
        parent = f"{tmp}/{rel}".rsplit("/", 1)[0]
        _mkdirs(sftp, parent)
        sftp.put(str(path), f"{tmp}/{rel}")
    with sftp.open(f"{tmp}/{COMPLETE}", "w") as handle:
        handle.write(h)
    try:
        sftp.posix_rename(tmp, final)
    except OSError:
        if not _exists(sftp, f"{final}/{COMPLETE}"):  # a concurrent upload won the race: fine
            raise
        _remove_tree(sftp, tmp)
    return payload, True


def _remove_tree(sftp: paramiko.SFTPClient, path: str) -> None:
    for entry in sftp.listdir_attr(path):
        child = f"{path}/{entry.filename}"
        if stat.S_ISDIR(entry.st_mode or 0):
            _remove_tree(sftp, child)
        else:
            sftp.remove(child)
    sftp.rmdir(path)
