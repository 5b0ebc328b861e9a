"""Full-state checkpoints (one process, DDP) written in the background, as DCP's ``async_save`` does for
FSDP (``sharded_checkpoint.py``): training waits only while the state is copied to host memory.

:func:`to_host` copies a state (model and optimizer state dicts, nested) to CPU tensors of its own
(pinned with CUDA, so the copies run asynchronously and the writing thread reads them without
another copy); :class:`BackgroundWrite` runs the write (``torch.save``, fsync, SHA-256 computed while
writing, the rename and the completion marker last: ``checkpoint.write_main`` and ``finish``) on a
thread, one at a time. A failure is raised in the training thread at the next :meth:`wait`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import torch


def to_host(obj: Any, pin: bool) -> Any:
    """A copy of ``obj`` whose tensors are CPU tensors of their own (never views of live parameters or
    optimizer states, which training goes on changing); dicts, lists and tuples are copied, other
    values kept. ``pin``: page-locked host memory and non-blocking device copies; the caller
    synchronises (:func:`stage` does)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if pin and t.device.type == "cuda":
            host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            return host.copy_(t, non_blocking=True)
        return t.to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_host(v, pin) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_host(v, pin) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_host(v, pin) for v in obj)
    return obj


def stage(obj: Any, device: torch.device) -> Any:
    """:func:`to_host` of ``obj``, complete when it returns (device copies waited for)."""
    pin = device.type == "cuda" and torch.cuda.is_available()
    out = to_host(obj, pin)
    if pin:
        torch.cuda.synchronize(device)
    return out


WRITER_NICENESS = 10  # the writing thread yields the CPU to training (the data loader, the host side of steps)


def _lower_priority() -> None:
    """Lower this thread's scheduling priority (Linux: niceness is per thread, keyed by its native id);
    a no-op where the platform has no per-thread priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
    except (AttributeError, OSError):
        pass


class BackgroundWrite:
    """At most one checkpoint write in flight on a thread of its own."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, write: Callable[[], None]) -> None:
        """Run ``write`` on a background thread, after the write before it is complete."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(write,), name="checkpoint-write", daemon=True)
        self._thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        try:
            _lower_priority()
            write()
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    def pending(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until the write in flight is done; re-raise its failure here."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            raise RuntimeError(f"writing the checkpoint failed: {exc}") from exc
