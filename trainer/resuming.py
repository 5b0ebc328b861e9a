"""Resuming a run: find the newest valid checkpoint (pruning unfinished ones, fetching from the mirror,
agreeing across nodes), load it exactly (weights, optimizer, scaler, RNG, data position), check the
learning-rate schedule against the saved one, and count the steps left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import checkpoint, dist, sharded_checkpoint
from . import fsdp as fsdp_mod
from .mirror import fetch_newest
from .run_state import RunState
from .step import lr_at
from .telemetry import warn
from .trainer_core import TrainerCore


class Resuming(TrainerCore):
    """Loads the newest valid checkpoint into the built model and optimizer and restores ``state``."""

    def _resume(self) -> Path | None:
        c = self.config
        if not c.resume or self.bench is not None:
            return None
        if self.writer:  # a crash mid-checkpoint leaves a temporary folder, possibly a whole checkpoint
            names, size = checkpoint.prune_temporaries(self.run_dir)
            if names:
                warn(f"removed {len(names)} unfinished checkpoint folder(s) ({size / 1e6:.1f} MB): {', '.join(names)}")
        # The writer of each node's run directory reads every checksum; the other ranks on that storage
        # check the manifest and the files' presence (the ranks then agree on the step, which re-checks
        # a step they disagree on).
        path = checkpoint.newest_valid(self.run_dir, log=warn if self.writer else None, verify=self.writer)
        if c.mirror_url and dist.all_max([int(path is None)], self.info, self.device)[0]:
            if self.writer and path is None:
                fetch_newest(c.mirror_url, self.run_dir)
            dist.barrier(self.info)
            path = checkpoint.newest_valid(self.run_dir)
        path = self._agree_on_checkpoint(path)
        if path is None:
            return None
        ck = checkpoint.load(path, self.info.rank)
        st = ck["state"]
        if st.get("world") != self.info.world:
            gb = self.config.micro_batch * self.config.grad_accum * self.info.world
            warn(
                f"resuming a {st.get('world')}-rank checkpoint on {self.info.world} ranks: the data position "
                f"(epoch {st['epoch']}, sample {st['offset']}) is re-sharded exactly; global batch is now {gb}; "
                "the dropout RNG streams of new ranks start fresh"
            )
        if ck["model"] is None:  # sharded (DCP): every rank reads its shards, resharded to this run
            sharded_checkpoint.load(path, self.model, self.optimizer)
        else:
            self._load_full(path, ck)
        if self.scaler is not None and ck["scaler"]:
            self.scaler.load_state_dict(ck["scaler"])
        if ck["rng"] is not None:
            checkpoint.set_rng_state(ck["rng"])
        self.saved_state = st
        known = set(RunState.__dataclass_fields__)
        self.state = RunState(**{k: v for k, v in st.items() if k in known})
        self.state.world = self.info.world
        return path

    def _load_full(self, path: Path, ck: dict[str, Any]) -> None:
        """A checkpoint of full state dicts (model.pt, optimizer.pt) into this run's model."""
        st = ck["state"]
        names = set(self.model.state_dict())  # (FSDP: the same names, sharded values; nothing gathered)
        bad = [k for k in self.trainable if k not in ck["model"]] + [k for k in ck["model"] if k not in names]
        if bad:
            raise RuntimeError(f"checkpoint {path} does not match the model: {bad[:5]}")
        by_name = st.get("optimizer_format") == "by-name"
        if self.fsdp:
            fsdp_mod.load_model_state(self.model, ck["model"])
        else:
            self.model.load_state_dict(ck["model"], strict=False)
        if by_name:
            fsdp_mod.load_optimizer_state(self.model, self.optimizer, ck["optimizer"])
        elif self.fsdp:
            raise RuntimeError(
                f"checkpoint {path} was written without --fsdp: its optimizer state cannot be "
                "sharded; resume it without --fsdp"
            )
        else:
            self.optimizer.load_state_dict(ck["optimizer"])

    def _agree_on_checkpoint(self, path: Path | None) -> Path | None:
        """Every rank resumes the same step: the newest valid one on this rank's storage, agreed by all.

        With one shared run directory every rank finds the same. With a run directory per node, the
        nodes may differ (one was cut off while completing a checkpoint): the newest step is taken
        that is valid on every node; a node without it (a fresh disk, no mirror) refuses clearly.
        """
        if not self.info.distributed:
            return path
        step = checkpoint.step_of(path) if path is not None else -1
        low = -dist.all_max([-step], self.info, self.device)[0]
        high = dist.all_max([step], self.info, self.device)[0]
        if low == high:  # the same step everywhere (always so with a shared run directory)
            return path
        candidate = checkpoint.checkpoints_dir(self.run_dir) / checkpoint.step_dir_name(low) if low >= 0 else None
        ok = int(candidate is not None and checkpoint.is_valid(candidate))
        if -dist.all_max([-ok], self.info, self.device)[0] == 0:
            raise RuntimeError(
                f"the nodes' run directories hold different checkpoints (newest valid steps "
                f"{low}..{high}) and none is valid on every node; copy the newest checkpoint to "
                "every node's run directory, or resume from a --mirror-url"
            )
        return candidate

    def _check_schedule(self, path: Path) -> list[tuple[str, Any, Any]]:
        """Compare the checkpoint's schedule with this run's: refuse (``--schedule-change refuse``) or warn.

        A change of world size alone (a failover to another machine) only warns: the schedule is
        the same, the global batch is not. Anything that moves the learning rate refuses under ``refuse``."""
        saved = dict(self.saved_state.get("scheduler") or {})
        saved.setdefault("world", self.saved_state.get("world"))
        changes = checkpoint.schedule_changes(saved, self._schedule())
        if not changes:
            return []
        c, step = self.config, self.state.step
        before = lr_at(
            step,
            saved.get("lr", c.lr),
            saved.get("warmup", self.warmup),
            saved.get("total", self.total_steps),
            saved.get("min_lr_ratio", c.min_lr_ratio),
        )
        after = lr_at(step, c.lr, self.warmup, self.total_steps, c.min_lr_ratio)
        what = (
            f"resuming {path.name} with a different schedule: {checkpoint.describe_changes(changes)} "
            f"(learning rate at step {step}: {before:.3g} saved, {after:.3g} now)"
        )
        if c.schedule_change == "refuse" and any(k != "world" for k, _, _ in changes):
            raise checkpoint.ResumeConflict(
                f"{what}; restore the saved settings, or pass --schedule-change warn to continue on the new schedule"
            )
        if self.info.is_main:
            warn(what + "; continuing on the new schedule")
        return changes

    def _announce_resume(self, path: Path, step: int) -> None:
        """After ``run_start``: check the schedule (:meth:`_check_schedule`, which may refuse) and emit
        the ``resumed`` record, listing any schedule change."""
        changes = self._check_schedule(path)
        listed: dict[str, Any] = (
            {"schedule_changes": [{"setting": k, "saved": a, "now": b} for k, a, b in changes]} if changes else {}
        )
        self.tele.emit(
            "resumed",
            step=step,
            checkpoint=str(path),
            spend_usd=self._spend(),
            **listed,
        )

    def _remaining_steps(self) -> int:
        c, s, n = self.config, self.state, self.data.n_train
        gb = c.micro_batch * c.grad_accum * self.info.world
        if c.max_steps > 0:
            return max(0, c.max_steps - s.step)
        if s.epoch >= c.epochs:
            return 0
        per_epoch = n // gb
        return (n - s.offset) // gb + (c.epochs - s.epoch - 1) * per_epoch
