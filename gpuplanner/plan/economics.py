"""Unit economics of GPU time: what a GPU-hour, a sample and a million tokens really cost.

Pure arithmetic shared by the planner and the run history. Unknown inputs (None) give None.
Example: 8 GPUs for 1.25 h at $8 with 60% utilisation and 200k samples is 10 GPU-hours,
6 effective GPU-hours, $80, $13.33 per effective GPU-hour and $0.0004 per sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.spend import cost_for_hours


@dataclass(frozen=True)
class UnitEconomics:
    gpu_hours: float
    effective_gpu_hours: float | None
    cost_usd: float | None
    cost_per_effective_gpu_hour_usd: float | None
    cost_per_sample_usd: float | None
    cost_per_million_tokens_usd: float | None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def unit_economics(
    *,
    gpus: int,
    hours: float,
    price_usd_per_gpu_hour: float | None,
    avg_util_pct: float | None,
    samples: int | None = None,
    tokens: int | None = None,
) -> UnitEconomics:
    """Cost = price x GPUs x hours (:func:`trainer.spend.cost_for_hours`; None without a price);
    effective GPU-hours = GPU-hours x average utilisation."""
    gpu_hours = gpus * hours
    effective = gpu_hours * avg_util_pct / 100.0 if avg_util_pct is not None else None
    cost = cost_for_hours(price_usd_per_gpu_hour, gpus, hours)
    per_million = ratio(cost, tokens / 1e6 if tokens else None)
    return UnitEconomics(gpu_hours, effective, cost, ratio(cost, effective), ratio(cost, samples), per_million)


def diff_pct(planned: float | None, actual: float | None) -> float | None:
    """How far actual is from planned, in % of planned (positive: more than planned)."""
    if planned is None or actual is None or planned == 0:
        return None
    return (actual - planned) / planned * 100.0
