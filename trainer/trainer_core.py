"""The trainer's shared state and its clocks: what every part of :class:`trainer.loop._Trainer` reads.

:class:`TrainerCore` holds the run's configuration, process group, telemetry, stop flag, cumulative
:class:`~trainer.run_state.RunState`, the phase clock and the spend clock, and declares the attributes
the other parts set (the model and optimizer from ``building.py``, the schedule from the loop). The
parts are mixins over it, one job each: ``building.py`` (data, model, optimizer), ``resuming.py``,
``saving.py`` (checkpoints), ``evaluation.py``, ``run_records.py`` (step and totals records); the
loop itself (``loop.py``) composes them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from . import async_checkpoint, compiling, dist, sharded_checkpoint
from . import data as data_mod
from .config import TrainConfig
from .mirror import Mirror
from .model import Precision, TrainingFlops
from .nvml_sampler import Activity
from .phases import PhaseClock
from .preemption import BUDGET_STOP, StopFlag
from .run_state import BenchStats, RunState
from .spend import SpendClock, SpendTotals, cap_reached
from .telemetry import Telemetry


class TrainerCore:
    """The state every part reads, the clocks (phases, spend, compile time) and the budget stop."""

    # set by building.py (data, model, optimizer)
    tokenizer: data_mod.ByteTokenizer | data_mod.HFTokenizer
    data: data_mod.Data
    cls: bool  # sequence classification (else next-token)
    precision: Precision
    dtype: torch.dtype
    meta_init: bool
    _rank0_weights: tuple[dict[str, Any], dict[str, torch.Tensor]] | None
    model: torch.nn.Module
    loss_fn: Any
    loss_impl: str
    compiled: bool
    compile_clock: compiling.CompileClock | None
    trainable: list[str]
    full_state: bool  # every parameter is trained: checkpoints carry the whole model
    fsdp: bool
    saver: sharded_checkpoint.AsyncSaver | None
    writes: async_checkpoint.BackgroundWrite | None
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    # set by resuming.py
    saved_state: dict[str, Any]
    # set by the loop (loop.py)
    total_steps: int
    warmup: int
    autocast: Any
    flops: TrainingFlops
    last_ckpt: float
    agree: dist.AgreeSchedule

    def __init__(
        self,
        config: TrainConfig,
        info: dist.DistInfo,
        device: torch.device,
        run_dir: Path,
        tele: Telemetry,
        bench: BenchStats | None,
        writer: bool | None = None,
        started: tuple[float, float] | None = None,
    ) -> None:
        self.config, self.info, self.device, self.run_dir, self.tele, self.bench = (
            config,
            info,
            device,
            run_dir,
            tele,
            bench,
        )
        self.writer = info.is_main if writer is None else writer
        self.steps_done = 0  # optimizer steps taken in this process (0: a stop before the first one)
        self.flag = StopFlag()
        self.activity = Activity()
        self.state = RunState(world=info.world)
        # The budget clock: paid time runs from the process start (loading and resuming included);
        # ``run_start`` carries the same moment, so the history prices the same span.
        self.started_wall, self.started_mono = started or (time.time(), time.monotonic())
        # Where this process's time goes, from its start (trainer/phases.py); records carry the totals.
        self.phases = PhaseClock(self.started_mono)
        self._first_compute: float | None = None  # --compile: the first step's compute time
        # elapsed, GPU-hours and spend from the process start plus what the checkpoint carried over
        self.spend_clock = SpendClock(config.price_per_gpu_hour, info.world, self.started_mono)
        self.mirror = Mirror(config.mirror_url, config.keep_checkpoints) if config.mirror_url and info.is_main else None

    def phase_fields(self) -> dict[str, Any]:
        """The ``phases`` and ``phases_start`` fields a record carries (trainer/protocol.py)."""
        return {"phases": self.phases.totals(), "phases_start": self.started_wall}

    def _raw_model(self) -> torch.nn.Module:
        return getattr(self.model, "module", self.model)

    def _schedule(self) -> dict[str, Any]:
        """The learning-rate schedule and the settings that decide it, as checkpoints record it."""
        c = self.config
        return {
            "kind": "warmup-cosine",
            "warmup": self.warmup,
            "total": self.total_steps,
            "lr": c.lr,
            "min_lr_ratio": c.min_lr_ratio,
            "max_steps": c.max_steps,
            "epochs": c.epochs,
            "micro_batch": c.micro_batch,
            "grad_accum": c.grad_accum,
            "world": self.info.world,
        }

    def _count_compile(self, compute_s: float) -> None:
        """``--compile``: the first step ran in the ``compile`` phase; once a second step shows what a
        normal step costs, that much of the first step is training, not compilation."""
        if not self.compiled:
            return
        if self.steps_done == 1:
            self._first_compute = compute_s
        elif self.steps_done == 2 and self._first_compute is not None:
            self.phases.move("compile", "train", min(self._first_compute, compute_s))

    def _tick(self) -> SpendTotals:
        """Bring elapsed time, GPU-hours and spend up to now (cumulative across resumes)."""
        totals = self.spend_clock.totals()
        s = self.state
        s.elapsed_s, s.gpu_hours = totals.elapsed_s, totals.gpu_hours
        s.spend_usd = totals.spend_usd if totals.spend_usd is not None else 0.0
        return totals

    def _spend(self) -> float | None:
        """The spend the records carry: None (unknown) without a price, never $0."""
        return self.state.spend_usd if self.spend_clock.priced else None

    def _tick_budget(self) -> None:
        """:meth:`_tick`, then request the budget stop when a cap is reached (:func:`trainer.spend.cap_reached`)."""
        totals = self._tick()
        reason = cap_reached(totals, self.config.budget_usd, self.config.max_gpu_hours)
        if reason is not None:
            self.flag.request(BUDGET_STOP, reason)
