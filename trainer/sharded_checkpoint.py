"""Sharded, asynchronous checkpoints of FSDP runs with ``torch.distributed.checkpoint`` (DCP).

Each rank writes its own shards of the model and optimizer state (``__<rank>_0.distcp`` in the
checkpoint folder; rank 0 also writes DCP's index ``.metadata``), so no rank gathers the full model, and none hashes it while the
others wait. ``dcp.async_save`` copies the rank's shards to host memory (the only part training waits
for) and writes them on a background thread over a gloo process group of its own; training goes on.

The checkpoint is complete only when the writer, after every rank's shards are on disk (DCP's
coordinator writes ``.metadata`` after gathering every rank's write results), hashes every file,
renames the temporary folder into place and writes the manifest ``COMPLETE.json`` last
(:func:`trainer.checkpoint.finish`): a kill at any moment leaves either a complete, verifiable
checkpoint or a ``.tmp-step-*`` folder that the next start removes.

State dicts are keyed by parameter name (``get_state_dict``), so a DCP checkpoint reloads on another
rank count (DCP reshards on load). Non-FSDP runs keep the single-file format of ``checkpoint.py``.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

METADATA = ".metadata"  # DCP's own index of the shards, written by the coordinator rank last


def is_sharded(path: Path) -> bool:
    """True for a checkpoint folder written by :class:`AsyncSaver` (DCP's index inside)."""
    return (path / METADATA).is_file()


def state_of(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's shards of the model and optimizer state, keyed by parameter name (no gather)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optim_state}


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Collective: every rank reads its own shards of the checkpoint at ``path`` into the model and
    the optimizer."""
    import torch.distributed as tdist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = state_of(model, optimizer)  # the shapes and shardings to load into (optimizer state created)
    # one process (or DDP, every rank reading everything): no collectives; FSDP: each rank its shards
    alone = not (tdist.is_available() and tdist.is_initialized()) or not _sharded(model)
    with warnings.catch_warnings():  # DCP warns that one process is "assumed": here it is meant
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, checkpoint_id=str(path), no_dist=alone)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


class AsyncSaver:
    """One DCP save in flight at a time. :meth:`save` returns once this rank's shards are staged in
    host memory; ``then`` runs on a background thread after the write completed on this rank (for
    the coordinator, rank 0: after every rank's shards and the metadata are written)."""

    def __init__(self, distributed: bool) -> None:
        self.distributed = distributed
        self._group: Any = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.asynchronous = True

    def _process_group(self) -> Any:
        # A gloo group of its own: the background write's collectives never interleave with the
        # training's (NCCL on GPUs, gloo on CPU), as torch recommends for async_save.
        if self.distributed and self._group is None:
            import torch.distributed as tdist

            self._group = tdist.new_group(backend="gloo")
        return self._group

    def save(self, state: dict[str, Any], dest: Path, then: Callable[[], None] | None = None) -> float:
        """Start writing ``state`` to ``dest``; returns the seconds training was held (staging)."""
        import torch.distributed.checkpoint as dcp

        self.wait()
        group = self._process_group()
        t0 = time.perf_counter()
        if hasattr(dcp, "async_save"):
            result: Any = dcp.async_save(
                state, checkpoint_id=str(dest), process_group=group, no_dist=not self.distributed
            )
            future: Future[Any] = getattr(result, "upload_completion", result)
        else:  # torch < 2.4: a plain collective save, done when it returns
            self.asynchronous = False
            dcp.save(state, checkpoint_id=str(dest), process_group=group, no_dist=not self.distributed)
            future = Future()
            future.set_result(None)
        held = time.perf_counter() - t0
        self._thread = threading.Thread(target=self._complete, args=(future, then), name="dcp-save", daemon=True)
        self._thread.start()
        return held

    def _complete(self, future: Future[Any], then: Callable[[], None] | None) -> None:
        try:
            future.result()
            if then is not None:
                then()
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    def pending(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until the save in flight (and its ``then``) is done; re-raise its failure here."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            raise RuntimeError(f"writing the sharded checkpoint failed: {exc}") from exc
