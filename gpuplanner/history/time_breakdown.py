"""Where a run's billed time went: seconds, share and dollars per phase, per run and summed over runs.

The trainer reports, per process, the seconds it spent in each phase since it started
(``trainer/phases.py``); the history keeps each process's newest totals in ``run_phases``. A run's
breakdown adds its processes' totals and two phases of its own:

- ``idle_after``: idle after the job, from the end of the last recorded phase (the last step,
  evaluation or checkpoint write the trainer reported) to the run's end (its last record). Zero
  while the run is still running.
- ``unaccounted``: billed time no phase explains (a process killed before it reported, a gap the
  interruption accounting did not subtract).

Shares are of the breakdown's total: the billed time, or the phases' sum where rounding or clocks
make that slightly longer. Dollars are the run's cost (billed GPU-hours at its price) times the
share, so the phases' dollars add up to the run's cost. Summed over runs, a phase's GPU-hours and
dollars add up, and shares are of the dollars where every run has a price, else of the GPU-hours.
A run whose trainer did not report phases (recorded before they existed) says "not recorded".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.run_cost import run_cost_usd
from trainer.protocol import PHASE_NAMES

IDLE_AFTER = "idle_after"
UNACCOUNTED = "unaccounted"
PHASES = (*PHASE_NAMES, IDLE_AFTER, UNACCOUNTED)
LABELS = {
    "startup": "start-up and model load",
    "compile": "compilation",
    "data": "data loading",
    "train": "training",
    "checkpoint": "checkpoint writes",
    "eval": "evaluation",
    IDLE_AFTER: "idle after the job",
    UNACCOUNTED: "not accounted for",
}
# Phases shorter than this are left out of legends and text (never out of the figures or the JSON).
SHOWN_MIN_S = 0.05
NOT_RECORDED = "not recorded: the run's trainer did not report where its time went"


def label(phase: str) -> str:
    """The words for a phase (a phase this version does not know is shown by its name)."""
    return LABELS.get(phase, phase)


@dataclass(frozen=True)
class PhaseTime:
    phase: str
    seconds: float
    share: float  # of the breakdown's total, 0..1
    gpu_hours: float
    cost_usd: float | None

    @property
    def label(self) -> str:
        return label(self.phase)

    @property
    def shown(self) -> bool:
        """Worth a line in a legend (:data:`SHOWN_MIN_S` or more)."""
        return self.seconds >= SHOWN_MIN_S

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "label": self.label,
            "seconds": self.seconds,
            "share": self.share,
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True)
class TimeBreakdown:
    """One run's breakdown, or the sum over several (``runs`` > 1)."""

    recorded: bool
    billed_s: float  # summed over runs for a sum (wall seconds, not GPU-seconds)
    gpu_hours: float
    cost_usd: float | None
    phases: tuple[PhaseTime, ...] = ()
    runs: int = 1
    runs_not_recorded: int = 0
    share_basis: str = "time"  # "time" (one run), "cost" or "gpu_hours" (a sum)

    def phase(self, name: str) -> PhaseTime | None:
        return next((p for p in self.phases if p.phase == name), None)

    @property
    def note(self) -> str | None:
        if not self.recorded:
            return NOT_RECORDED
        if self.runs_not_recorded:
            return f"{self.runs_not_recorded} of {self.runs} runs not recorded (left out of the sum)"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "note": self.note,
            "billed_s": self.billed_s,
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
            "runs": self.runs,
            "runs_not_recorded": self.runs_not_recorded,
            "share_basis": self.share_basis,
            "phases": [p.as_dict() for p in self.phases],
        }


def _phase_totals(rows: Iterable[tuple[str]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (text,) in rows:
        try:
            phases = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if not isinstance(phases, dict):
            continue
        for name, seconds in phases.items():
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
                totals[str(name)] = totals.get(str(name), 0.0) + float(seconds)
    return totals


def breakdown_from_phases(
    phases: dict[str, float],
    *,
    billed_s: float,
    idle_after_s: float,
    gpus: int,
    price_usd_per_gpu_hour: float | None,
) -> TimeBreakdown:
    """One run's breakdown from its recorded phase seconds (see the module docstring)."""
    seconds = {name: phases.get(name, 0.0) for name in PHASE_NAMES}
    seconds.update({name: value for name, value in phases.items() if name not in seconds})
    seconds[IDLE_AFTER] = max(0.0, idle_after_s)
    seconds[UNACCOUNTED] = max(0.0, billed_s - sum(seconds.values()))
    total = sum(seconds.values())
    gpu_hours = billed_s * gpus / 3600.0
    cost = run_cost_usd(price_usd_per_gpu_hour, gpus, billed_s / 3600.0)
    out = []
    for name, value in seconds.items():
        share = value / total if total > 0 else 0.0
        out.append(PhaseTime(name, value, share, gpu_hours * share, cost * share if cost is not None else None))
    return TimeBreakdown(True, billed_s, gpu_hours, cost, tuple(out))


def run_breakdown(
    db: Database,
    run_id: int,
    *,
    billed_s: float,
    last_t: float | None,
    ended: bool,
    gpus: int,
    price_usd_per_gpu_hour: float | None,
) -> TimeBreakdown:
    """A stored run's breakdown; ``billed_s`` is the run's billed time (``analytics.summarize``'s
    hours), ``last_t`` its last record's time, ``ended`` whether it has ended."""
    rows = db.execute("SELECT phases_json, t FROM run_phases WHERE run_id = ?", [run_id]).fetchall()
    gpu_hours = billed_s * gpus / 3600.0
    cost = run_cost_usd(price_usd_per_gpu_hour, gpus, billed_s / 3600.0)
    if not rows:
        return TimeBreakdown(False, billed_s, gpu_hours, cost)
    phases = _phase_totals((text,) for text, _ in rows)
    last_phase_t = max(t for _, t in rows)
    idle = max(0.0, last_t - last_phase_t) if ended and last_t is not None else 0.0
    return breakdown_from_phases(
        phases, billed_s=billed_s, idle_after_s=idle, gpus=gpus, price_usd_per_gpu_hour=price_usd_per_gpu_hour
    )


def sum_breakdowns(breakdowns: Iterable[TimeBreakdown]) -> TimeBreakdown:
    """The sum over runs: GPU-hours and dollars per phase add up; runs not recorded are counted and left out."""
    items = list(breakdowns)
    recorded = [b for b in items if b.recorded]
    if not recorded:
        return TimeBreakdown(False, 0.0, 0.0, None, runs=len(items), runs_not_recorded=len(items))
    by_cost = all(b.cost_usd is not None for b in recorded)
    names: list[str] = []
    seconds: dict[str, float] = {}
    gpu_hours: dict[str, float] = {}
    cost: dict[str, float] = {}
    for b in recorded:
        for p in b.phases:
            if p.phase not in seconds:
                names.append(p.phase)
                seconds[p.phase] = gpu_hours[p.phase] = cost[p.phase] = 0.0
            seconds[p.phase] += p.seconds
            gpu_hours[p.phase] += p.gpu_hours
            cost[p.phase] += p.cost_usd or 0.0
    weights = cost if by_cost else gpu_hours
    total_weight = sum(weights.values())
    phases = tuple(
        PhaseTime(
            name,
            seconds[name],
            weights[name] / total_weight if total_weight > 0 else 0.0,
            gpu_hours[name],
            cost[name] if by_cost else None,
        )
        for name in names
    )
    return TimeBreakdown(
        True,
        sum(b.billed_s for b in recorded),
        sum(b.gpu_hours for b in recorded),
        sum(b.cost_usd or 0.0 for b in recorded) if by_cost else None,
        phases,
        runs=len(items),
        runs_not_recorded=len(items) - len(recorded),
        share_basis="cost" if by_cost else "gpu_hours",
    )


def from_dict(data: dict[str, Any] | None) -> TimeBreakdown | None:
    """A breakdown back from :meth:`TimeBreakdown.as_dict` (the summary carries it as a dict)."""
    if not data:
        return None
    phases = tuple(
        PhaseTime(p["phase"], p["seconds"], p["share"], p["gpu_hours"], p.get("cost_usd"))
        for p in data.get("phases", ())
    )
    return TimeBreakdown(
        bool(data.get("recorded")),
        float(data.get("billed_s") or 0.0),
        float(data.get("gpu_hours") or 0.0),
        data.get("cost_usd"),
        phases,
        runs=int(data.get("runs") or 1),
        runs_not_recorded=int(data.get("runs_not_recorded") or 0),
        share_basis=str(data.get("share_basis") or "time"),
    )
