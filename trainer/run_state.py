"""What a run accumulates besides tensors: the checkpointed :class:`RunState` and, under ``trainer bench``,
the measured :class:`BenchStats`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .reports import BenchInfo


@dataclass
class RunState:
    """Everything besides tensors that a checkpoint carries; cumulative across resumes."""

    step: int = 0
    epoch: int = 0
    offset: int = 0
    tokens_total: int = 0
    samples_total: int = 0
    elapsed_s: float = 0.0
    spend_usd: float = 0.0
    gpu_hours: float = 0.0
    best_eval: float | None = None
    bad_evals: int = 0
    world: int = 1
    global_batch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchStats:
    """Filled when the loop runs as ``trainer bench``: per-step timings after warm-up."""

    warmup_steps: int
    step_times: list[float] = field(default_factory=list)
    # perf_counter at the end of each step's whole iteration (bookkeeping and telemetry included);
    # ``step_ends[warmup_steps - 1]`` (or ``loop_start``) to ``step_ends[-1]`` is the measured wall span.
    step_ends: list[float] = field(default_factory=list)
    loop_start: float = 0.0
    data_waits: list[float] = field(default_factory=list)
    tokens_per_step: int = 0
    samples_per_step: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    flops_per_token: float = 0.0
    hardware_flops_per_token: float = 0.0
    peak_flops: float | None = None
    info: BenchInfo = field(default_factory=BenchInfo)
