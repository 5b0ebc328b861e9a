"""Unit economics of a run: what a GPU-hour, a sample and a million tokens really cost."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnitEconomics:
    gpu_hours: float
    effective_gpu_hours: float
    cost_usd: float
    cost_per_effective_gpu_hour_usd: float | None
    cost_per_sample_usd: float | None
    cost_per_million_tokens_usd: float | None


def _ratio(numerator: float, denominator: float | None) -> float | None:
    return numerator / denominator if denominator else None


def unit_economics(gpus: int, hours: float, usd_per_gpu_hour: float, utilisation: float,
                   samples: float | None = None, tokens: float | None = None) -> UnitEconomics:
    """Cost = price x GPUs x hours; effective GPU-hours = GPU-hours x average utilisation (0..1).

    Example: 8 GPUs for 1.25 h at $8 with 60% utilisation and 200k samples is 10 GPU-hours,
    6 effective GPU-hours, $80, $13.33 per effective GPU-hour and $0.0004 per sample.
    """
    gpu_hours = gpus * hours
    effective = gpu_hours * utilisation
    cost = gpu_hours * usd_per_gpu_hour
    return UnitEconomics(
        gpu_hours=gpu_hours,
        effective_gpu_hours=effective,
        cost_usd=cost,
        cost_per_effective_gpu_hour_usd=_ratio(cost, effective),
        cost_per_sample_usd=_ratio(cost, samples),
        cost_per_million_tokens_usd=_ratio(cost * 1e6, tokens),
    )
