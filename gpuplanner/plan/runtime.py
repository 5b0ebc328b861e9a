"""How much work a run is and how long it takes: samples x epochs (or tokens) over throughput."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.throughput import Throughput


@dataclass(frozen=True)
class Workload:
    """The data to train on: ``samples`` sequences or ``tokens`` per pass, for ``epochs`` passes."""

    samples: int | None = None
    epochs: float = 1.0
    tokens: int | None = None

    def __post_init__(self) -> None:
        if self.samples is None and self.tokens is None:
            raise PlanInputError("samples", "give the data size as --samples (with --epochs) or --tokens")
        if self.samples is not None and self.tokens is not None:
            raise PlanInputError("tokens", "give either --samples (with --epochs) or --tokens, not both")
        if self.samples is not None and (isinstance(self.samples, bool) or self.samples < 1):
            raise PlanInputError("samples", f"must be a whole number of at least 1, got {self.samples!r}")
        if self.tokens is not None and (isinstance(self.tokens, bool) or self.tokens < 1):
            raise PlanInputError("tokens", f"must be a whole number of at least 1, got {self.tokens!r}")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise PlanInputError("epochs", f"must be a positive number, got {self.epochs!r}")

    def total_tokens(self, seq_len: int) -> float:
        """Tokens trained over all epochs (``tokens`` is the size of one pass over the data)."""
        if self.tokens is not None:
            return float(self.tokens) * self.epochs
        assert self.samples is not None
        return float(self.samples) * self.epochs * seq_len

    def total_samples(self, seq_len: int) -> float:
        return self.total_tokens(seq_len) / seq_len


@dataclass(frozen=True)
class Runtime:
    hours: float  # the whole run: steady-state training plus the whole-run overhead
    gpu_hours: float
    effective_batch: int
    optimizer_steps: int
    total_tokens: float
    total_samples: float
    overhead_hours: float = 0.0  # restarts, evaluations, checkpoints, stragglers (--run-overhead-pct)

    @property
    def steady_hours(self) -> float:
        """The hours of training at the planned speed, without the whole-run overhead."""
        return self.hours - self.overhead_hours


def estimate_runtime(
    workload: Workload, throughput: Throughput, setup: TrainSetup, overhead_pct: float | None = None
) -> Runtime:
    """Wall-clock hours and GPU-hours of the training (no spot interruptions): the steady state at the
    planned speed, plus ``overhead_pct`` percent of it for what a whole run spends beyond that."""
    tokens = workload.total_tokens(setup.seq_len)
    steady = tokens / throughput.tokens_per_s / 3600.0
    overhead = steady * (overhead_pct or 0.0) / 100.0
    hours = steady + overhead
    samples = tokens / setup.seq_len
    return Runtime(
        overhead_hours=overhead,
        hours=hours,
        gpu_hours=hours * setup.gpus,
        effective_batch=setup.effective_batch,
        optimizer_steps=math.ceil(samples / setup.effective_batch),
        total_tokens=tokens,
        total_samples=samples,
    )
