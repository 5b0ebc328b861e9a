"""The price of an instance-hour and the spend clock: the one implementation (standard library only).

Spend is the price per GPU-hour x the GPUs held x the time they were held. The trainer's budget stop
(``trainer/loop.py``), the command monitor's (``trainer/command_monitor.py``), the launcher's Slurm
billing, the planner and the history all compute it here, so a budget stops a run at the figure the
history later shows. ``gpuplanner`` imports this module; it imports nothing of ``gpuplanner``.

No price (None) means an unknown spend (None), never $0: a run on a host without a price has no cost.
Example: 8 GPUs at $2.50 per GPU-hour cost $20 per instance-hour; held 90 minutes, $30.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import overload

SECONDS_PER_HOUR = 3600.0


@overload
def instance_hour_usd(price_per_gpu_hour: float, gpus: float) -> float: ...
@overload
def instance_hour_usd(price_per_gpu_hour: float | None, gpus: float) -> float | None: ...
def instance_hour_usd(price_per_gpu_hour: float | None, gpus: float) -> float | None:
    """What one hour of ``gpus`` GPUs (an instance's billed GPUs) costs at ``price_per_gpu_hour``
    (None without a price)."""
    if price_per_gpu_hour is None:
        return None
    return float(price_per_gpu_hour) * gpus


@overload
def spend_usd(price_per_gpu_hour: float, gpus: float, seconds: float) -> float: ...
@overload
def spend_usd(price_per_gpu_hour: float | None, gpus: float, seconds: float) -> float | None: ...
def spend_usd(price_per_gpu_hour: float | None, gpus: float, seconds: float) -> float | None:
    """What ``gpus`` GPUs held for ``seconds`` cost at ``price_per_gpu_hour`` (None without a price)."""
    per_hour = instance_hour_usd(price_per_gpu_hour, gpus)
    return None if per_hour is None else per_hour * seconds / SECONDS_PER_HOUR


@overload
def cost_for_hours(price_per_gpu_hour: float, gpus: float, hours: float) -> float: ...
@overload
def cost_for_hours(price_per_gpu_hour: float | None, gpus: float, hours: float) -> float | None: ...
def cost_for_hours(price_per_gpu_hour: float | None, gpus: float, hours: float) -> float | None:
    """What ``gpus`` GPUs held for ``hours`` cost (None without a price)."""
    return spend_usd(price_per_gpu_hour, gpus, hours * SECONDS_PER_HOUR)


@dataclass(frozen=True)
class SpendTotals:
    """A run's cumulative figures (across resumes) at one moment."""

    elapsed_s: float
    gpu_hours: float
    spend_usd: float | None  # None: no price

    def as_dict(self) -> dict[str, float | None]:
        return {"elapsed_s": self.elapsed_s, "gpu_hours": self.gpu_hours, "spend_usd": self.spend_usd}


class SpendClock:
    """Elapsed time, GPU-hours and spend of a run from ``started_mono`` (``time.monotonic()`` of the
    process start, :mod:`trainer.clock`) plus what earlier attempts carried over (``base``)."""

    def __init__(
        self,
        price_per_gpu_hour: float | None,
        gpus: float,
        started_mono: float,
        base: SpendTotals | None = None,
    ) -> None:
        self.price_per_gpu_hour = price_per_gpu_hour
        self.gpus = max(1.0, float(gpus))
        self.started_mono = started_mono
        self.base = base or SpendTotals(0.0, 0.0, 0.0)

    @property
    def priced(self) -> bool:
        return self.price_per_gpu_hour is not None

    def carry_over(self, elapsed_s: float, gpu_hours: float, spend: float | None) -> None:
        """Start from an earlier attempt's totals (a resume)."""
        self.base = SpendTotals(float(elapsed_s or 0.0), float(gpu_hours or 0.0), spend)

    def totals(self, now_mono: float | None = None) -> SpendTotals:
        """The totals at ``now_mono`` (default: now)."""
        now = time.monotonic() if now_mono is None else now_mono
        this_process = max(0.0, now - self.started_mono)
        spend = spend_usd(self.price_per_gpu_hour, self.gpus, this_process)
        if spend is not None:
            spend += self.base.spend_usd or 0.0
        return SpendTotals(
            self.base.elapsed_s + this_process,
            self.base.gpu_hours + self.gpus * this_process / SECONDS_PER_HOUR,
            spend,
        )

    def cap_moment(self, budget_usd: float | None, max_gpu_hours: float | None) -> float:
        """The ``time.monotonic()`` moment the nearer of the two caps is reached at this clock's rate (the
        inverse of :meth:`totals`); ``math.inf`` without a cap that can be reached (no cap, or a budget without
        a price). A cap already passed gives a moment in the past."""
        moments = [math.inf]
        per_second = spend_usd(self.price_per_gpu_hour, self.gpus, 1.0)
        if budget_usd is not None and per_second:
            moments.append(self.started_mono + (budget_usd - (self.base.spend_usd or 0.0)) / per_second)
        if max_gpu_hours is not None:
            moments.append(self.started_mono + (max_gpu_hours - self.base.gpu_hours) * SECONDS_PER_HOUR / self.gpus)
        return min(moments)


def cap_reached(totals: SpendTotals, budget_usd: float | None, max_gpu_hours: float | None) -> str | None:
    """Why a run must stop now (its budget or its GPU-hour cap reached), or None: one rule for the
    trainer and the command monitor."""
    if budget_usd is not None and totals.spend_usd is not None and totals.spend_usd >= budget_usd:
        return f"spend ${totals.spend_usd:.4f} reached the budget ${budget_usd:g}"
    if max_gpu_hours is not None and totals.gpu_hours >= max_gpu_hours:
        return f"{totals.gpu_hours:.4f} GPU-hours reached the cap {max_gpu_hours:g}"
    return None
