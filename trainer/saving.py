"""Saving checkpoints during a run: full state dicts written by each node's writer (one process, DDP),
staged to host memory and written in the background (``async_checkpoint.py``), or per-rank DCP shards
in the background (FSDP); completed atomically (marker last) and copied to the mirror."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

from . import async_checkpoint, checkpoint, dist, hold, sharded_checkpoint
from . import fsdp as fsdp_mod
from .trainer_core import TrainerCore


class Saving(TrainerCore):
    """Writes a checkpoint of the current step (in the ``checkpoint`` phase)."""

    def save_checkpoint(self, blocking: bool = False) -> None:
        """Checkpoint the current step. Full-state checkpoints are written in the background unless
        ``blocking`` (the last save before exiting: nothing to overlap, so no host copy is made) or
        ``--no-checkpoint-async``; FSDP's sharded ones always are (DCP's ``async_save``)."""
        previous = self.phases.switch("checkpoint")
        try:
            self._save_checkpoint(blocking)
        finally:
            self.phases.switch(previous)

    def _save_checkpoint(self, blocking: bool) -> None:
        if self.saver is not None:
            self._save_sharded()
            return
        t0 = time.perf_counter()
        background = self.writes is not None and not blocking
        if self.writes is not None:
            self.writes.wait()  # one write in flight: the previous one is complete (or its failure raised here)
        step = self.state.step
        # Each node's writer creates the temporary folder in its own run directory; every rank writes
        # its RNG state into its node's folder; each writer completes its node's copy (marker last).
        tmp = self.run_dir / "checkpoints" / f".tmp-{checkpoint.step_dir_name(step)}"
        if self.writer:
            tmp = checkpoint.begin(self.run_dir, step)
        dist.barrier(self.info)
        checkpoint.write_rank_state(tmp, self.info.rank)
        if self.fsdp:  # collectives: every rank takes part, rank 0 receives the full tensors
            full_model = fsdp_mod.full_model_state(self.model)
            optim_state = fsdp_mod.full_optimizer_state(self.model, self.optimizer)
        else:
            full_model, optim_state = {}, {}
        dist.barrier(self.info)  # every rank's RNG file is on disk before the manifest can list it
        if self.writer:  # DDP: every rank holds the same weights and optimizer state; FSDP: rank 0 only
            trainable = set(self.trainable)
            if not self.fsdp:
                full_model, optim_state = self._raw_model().state_dict(), self.optimizer.state_dict()
            model_state = {k: v for k, v in full_model.items() if k in trainable or self.full_state}
            st = self._checkpoint_state("by-name" if self.fsdp else "by-index")
            scaler = self.scaler.state_dict() if self.scaler is not None else None
            if background and self.writes is not None:
                # what training waits for: copying the state to host memory of its own (pinned with CUDA)
                staged = async_checkpoint.stage((model_state, optim_state, scaler), self.device)
                held = time.perf_counter() - t0
                self.writes.start(functools.partial(self._write_full, tmp, step, staged, st, t0, held))
            else:
                self._write_full(tmp, step, (model_state, optim_state, scaler), st, t0, None)
        if not background:
            dist.barrier(self.info)
        self.last_ckpt = time.monotonic()

    def _write_full(
        self, tmp: Path, step: int, state: tuple[Any, Any, Any], st: dict[str, Any], t0: float, held: float | None
    ) -> None:
        """Write, checksum (while writing), rename and mark complete; on the background thread when
        ``held`` (the seconds training waited for the staging) is given, else in the training thread."""
        model_state, optim_state, scaler = state
        digests = checkpoint.write_main(tmp, model_state, optim_state, scaler, st)
        hold.at_checkpoint(step, self.run_dir, lambda: self.flag.set)  # tests' barriers (trainer/hold.py)
        self.tele.sync()
        path, size = checkpoint.finish(self.run_dir, tmp, step, self.config.keep_checkpoints, digests)
        seconds = time.perf_counter() - t0
        if self.info.is_main:
            self.tele.emit(
                "checkpoint",
                step=step,
                path=str(path),
                bytes=size,
                seconds=round(seconds, 4),
                blocking_s=round(held if held is not None else seconds, 4),
                asynchronous=held is not None,
                **self.phase_fields(),
            )
        if self.mirror is not None:
            self.mirror.submit(path)

    def _checkpoint_state(self, optimizer_format: str) -> dict[str, Any]:
        st = dict(self.state.__dict__)
        st["optimizer_format"] = optimizer_format
        st["fsdp"] = self.fsdp
        st["global_batch"] = self.config.micro_batch * self.config.grad_accum * self.info.world
        st["seed"] = self.config.seed
        st["scheduler"] = self._schedule()
        return st

    def _save_sharded(self) -> None:
        """FSDP: every rank writes its own shards with DCP in the background; the writer completes the
        checkpoint (checksums, rename, manifest last) once every shard is on disk. Training waits only
        for the previous save to end and for this rank's shards to be copied to host memory."""
        assert self.saver is not None
        t0 = time.perf_counter()
        self.saver.wait()  # one save in flight: the previous one is complete (or its failure raised here)
        step = self.state.step
        tmp = checkpoint.checkpoints_dir(self.run_dir) / f".tmp-{checkpoint.step_dir_name(step)}"
        if self.writer:
            tmp = checkpoint.begin(self.run_dir, step)
        dist.barrier(self.info)
        checkpoint.write_rank_state(tmp, self.info.rank)
        if self.writer:
            st = self._checkpoint_state("dcp")
            checkpoint.write_state(tmp, self.scaler.state_dict() if self.scaler is not None else None, st)
        dist.barrier(self.info)  # every rank's RNG file is on disk before the manifest can list it
        held: dict[str, Any] = {"s": None, "ready": threading.Event()}
        then = functools.partial(self._complete_sharded, tmp, step, t0, held) if self.writer else None
        self.saver.save(sharded_checkpoint.state_of(self.model, self.optimizer), tmp, then)
        held["s"] = time.perf_counter() - t0  # what training waited for: the previous save, staging
        held["ready"].set()
        self.last_ckpt = time.monotonic()

    def _complete_sharded(self, tmp: Path, step: int, t0: float, held: dict[str, Any]) -> None:
        """On the save's background thread of the writer, after every rank's shards are written."""
        held["ready"].wait()
        hold.at_checkpoint(step, self.run_dir, lambda: self.flag.set)  # tests' barriers (trainer/hold.py)
        self.tele.sync()
        path, size = checkpoint.finish(self.run_dir, tmp, step, self.config.keep_checkpoints)
        if self.info.is_main:
            self.tele.emit(
                "checkpoint",
                step=step,
                path=str(path),
                bytes=size,
                seconds=round(time.perf_counter() - t0, 4),
                blocking_s=round(held["s"], 4),
                format="dcp",
                asynchronous=self.saver.asynchronous if self.saver is not None else False,
                **self.phase_fields(),
            )
        if self.mirror is not None:
            self.mirror.submit(path)

    def wait_checkpoint(self) -> None:
        """Block until a checkpoint in flight is complete (before exiting or the final save)."""
        if self.saver is not None:
            self.saver.wait()
        if self.writes is not None:
            self.writes.wait()
        dist.barrier(self.info)
