"""Atomic, verified checkpoints in ``RUN_DIR/checkpoints/step-NNNNNNNN/``.

Writing: files go to a temporary directory, each is fsynced, the directory is renamed into place,
and only then the completion marker ``COMPLETE.json`` (holding a SHA-256 of every file) is written
and fsynced. A checkpoint without a valid marker, or whose files do not match their checksums, is
ignored, and the previous one is used. The last K (at least 2) complete checkpoints are kept.

Two layouts: ``model.pt`` and ``optimizer.pt`` (full state dicts; single-process and DDP runs) or, for
FSDP runs, per-rank shards and DCP's ``.metadata`` index (``trainer/sharded_checkpoint.py``). The
marker lists every file of either by its path relative to the checkpoint folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import torch

MARKER = "COMPLETE.json"
PREFIX = "step-"
TMP_PREFIX = ".tmp-" + PREFIX

# What the saved schedule records (trainer_state.json's "scheduler"), in the order differences are listed.
# The first four shape the learning rate; the settings after them decide the first four.
SCHEDULE_KEYS = ("total", "warmup", "lr", "min_lr_ratio", "max_steps", "epochs", "micro_batch", "grad_accum", "world")


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class _HashingWriter(io.RawIOBase):
    """A file opened for writing that feeds every byte written to a SHA-256 as well: ``torch.save``
    writes its archive front to back, so the checksum is ready when the file is, with no second read."""

    def __init__(self, fh: Any) -> None:
        super().__init__()
        self.fh, self.digest = fh, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return int(self.fh.write(data))


def save_hashed(obj: Any, path: Path) -> str:
    """``torch.save`` to ``path``, fsynced; returns the file's SHA-256 computed while writing."""
    with open(path, "wb") as fh:
        writer = _HashingWriter(fh)
        torch.save(obj, cast(IO[bytes], writer))
        fh.flush()
        os.fsync(fh.fileno())
    return writer.digest.hexdigest()


def _write_text_hashed(path: Path, text: str) -> str:
    data = text.encode("utf-8")
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return hashlib.sha256(data).hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync_file(path)
    except OSError:
        pass


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state(legacy=True)
    if not isinstance(np_state, tuple):  # legacy=True: the Mersenne Twister's tuple
        raise TypeError(f"numpy's global random state is not a Mersenne Twister: {type(np_state).__name__}")
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    n = state["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def step_of(path: Path) -> int:
    return int(path.name[len(PREFIX) :])


def begin(run_dir: Path, step: int) -> Path:
    """A fresh temporary directory for the checkpoint of ``step``, made by the writer of each node's
    run directory (rank 0 with a shared file system); every rank of that node writes into it."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{step_dir_name(step)}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def write_rank_state(tmp: Path, rank: int) -> None:
    path = tmp / f"rng-rank{rank}.pt"
    torch.save(rng_state(), path)
    _fsync_file(path)


def write_state(tmp: Path, scaler_state: dict[str, Any] | None, trainer_state: dict[str, Any]) -> None:
    """``trainer_state.json`` (and the gradient scaler's state), fsynced: what a sharded checkpoint
    keeps beside its DCP shards."""
    if scaler_state:
        torch.save(scaler_state, tmp / "scaler.pt")
        _fsync_file(tmp / "scaler.pt")
    path = tmp / "trainer_state.json"
    path.write_text(json.dumps(trainer_state, indent=1), encoding="utf-8")
    _fsync_file(path)


def _files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.rglob("*") if f.is_file())


def write_main(
    tmp: Path,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
    scaler_state: dict[str, Any] | None,
    trainer_state: dict[str, Any],
) -> dict[str, str]:
    """Write the full-state checkpoint's files into ``tmp``, each fsynced; returns their SHA-256s
    (computed while writing) by name, for :func:`finish`."""
    digests = {
        "model.pt": save_hashed(model_state, tmp / "model.pt"),
        "optimizer.pt": save_hashed(optimizer_state, tmp / "optimizer.pt"),
    }
    if scaler_state:
        digests["scaler.pt"] = save_hashed(scaler_state, tmp / "scaler.pt")
    digests["trainer_state.json"] = _write_text_hashed(tmp / "trainer_state.json", json.dumps(trainer_state, indent=1))
    return digests


def finish(run_dir: Path, tmp: Path, step: int, keep: int, digests: dict[str, str] | None = None) -> tuple[Path, int]:
    """Rename into place, then write the completion marker last. Returns (path, bytes). ``digests``:
    SHA-256s already known (computed while writing, :func:`write_main`); the other files are read and
    hashed here."""
    final = checkpoints_dir(run_dir) / step_dir_name(step)
    if final.exists():
        shutil.rmtree(final)
    known = digests or {}
    files = {}
    for f in _files(tmp):
        name = f.relative_to(tmp).as_posix()
        files[name] = known[name] if name in known else _sha256(f)
    size = sum(f.stat().st_size for f in _files(tmp))
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    marker = final / MARKER
    marker_tmp = final / (MARKER + ".tmp")
    marker_tmp.write_text(json.dumps({"step": step, "files": files, "bytes": size, "t": time.time()}))
    _fsync_file(marker_tmp)
    os.replace(marker_tmp, marker)
    _fsync_dir(final)
    prune(run_dir, keep)
    return final, size


def problem(path: Path, verify: bool = True) -> str | None:
    """Why the checkpoint at ``path`` cannot be used (naming the file), or None when every file the
    manifest lists is there with its checksum (``verify`` False: there, checksums not read)."""
    marker = path / MARKER
    try:
        meta = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {MARKER}: the checkpoint was never completed"
    except (OSError, ValueError) as exc:
        return f"{MARKER} is unreadable ({exc})"
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict):
        return f"{MARKER} lists no files"
    if "trainer_state.json" not in files:
        return f"{MARKER} does not list trainer_state.json"
    if "model.pt" not in files and ".metadata" not in files:
        return f"{MARKER} lists neither model.pt nor DCP's .metadata"
    for name, digest in files.items():
        if not verify:
            if not (path / name).is_file():
                return f"{name} is missing"
            continue
        try:
            actual = _sha256(path / name)
        except OSError:
            return f"{name} is missing"
        if actual != digest:
            return f"{name} does not match its SHA-256 checksum in {MARKER}"
    return None


def is_valid(path: Path) -> bool:
    return problem(path) is None


def candidates(run_dir: Path) -> list[Path]:
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()), reverse=True)


def complete(run_dir: Path) -> list[Path]:
    """Checkpoints with a completion marker, newest first (checksums not verified)."""
    return [p for p in candidates(run_dir) if (p / MARKER).exists()]


def newest_valid(run_dir: Path, log: Any = None, verify: bool = True) -> Path | None:
    """The newest checkpoint that :func:`problem` accepts (``verify``: checksums read)."""
    for path in candidates(run_dir):
        why = problem(path, verify)
        if why is None:
            return path
        if log:
            log(f"checkpoint {path.name} is not usable: {why}; trying the previous one")
    return None


def prune(run_dir: Path, keep: int) -> None:
    keep = max(2, keep)
    done = complete(run_dir)
    for old in done[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    # Directories without a marker older than the newest complete one are leftovers of a crash.
    if done:
        for p in candidates(run_dir):
            if not (p / MARKER).exists() and p.name < done[0].name:
                shutil.rmtree(p, ignore_errors=True)
        # Temporary folders of steps up to the newest complete one can only be a crash's leftovers.
        for p in checkpoints_dir(run_dir).iterdir():
            if p.name.startswith(TMP_PREFIX) and p.name[len(".tmp-") :] <= done[0].name:
                shutil.rmtree(p, ignore_errors=True)


def prune_temporaries(run_dir: Path) -> tuple[list[str], int]:
    """Remove the ``.tmp-step-*`` folders a crash left behind (each can be a whole checkpoint). Call it
    only while no checkpoint is being written (at start-up). Returns (names removed, bytes freed)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return [], 0
    names, size = [], 0
    for p in sorted(root.iterdir()):
        if p.name.startswith(TMP_PREFIX) and p.is_dir():
            size += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p, ignore_errors=True)
            names.append(p.name)
    return names, size


class ResumeConflict(ValueError):
    """Resuming would silently change the run (its learning-rate schedule); the message says how."""


def schedule_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, current value) for each schedule key that both record and that differ.

    Checkpoints written before a key was recorded are compared on the keys they have."""
    out = []
    for key in SCHEDULE_KEYS:
        if key in saved and key in now and saved[key] != now[key]:
            out.append((key, saved[key], now[key]))
    return out


def describe_changes(changes: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{key} {old} -> {new}" for key, old, new in changes)


def load(path: Path, rank: int) -> dict[str, Any]:
    """The state a checkpoint holds for ``rank``. A sharded (DCP) checkpoint's model and optimizer
    ("model"/"optimizer" None here) are read by ``sharded_checkpoint.load``, a collective. The full
    state dicts are memory-mapped (``torch.load(mmap=True)``)."""
    sharded = (path / ".metadata").is_file()
    # memory-mapped: tensors are read from the page cache as they are copied into the model and the
    # optimizer, not first loaded whole into RAM (private mappings: nothing is written back)
    out: dict[str, Any] = {
        "model": None if sharded else torch.load(path / "model.pt", map_location="cpu", weights_only=True, mmap=True),
        "optimizer": None
        if sharded
        else torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True, mmap=True),
        "state": json.loads((path / "trainer_state.json").read_text(encoding="utf-8")),
        "scaler": None,
        "rng": None,
    }
    if (path / "scaler.pt").exists():
        out["scaler"] = torch.load(path / "scaler.pt", weights_only=True)
    rng_path = path / f"rng-rank{rank}.pt"
    if rng_path.exists():
        out["rng"] = torch.load(rng_path, weights_only=True)
    return out
