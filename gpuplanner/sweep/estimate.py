"""The planner's estimate of a search: GPU-hours, cost and wall time with and without pruning, and the caps.

A trial is one planned run (:func:`gpuplanner.plan.planner.make_plan`); a trial stopped at a milestone
costs that share of the full trial (the work scales with the epochs trained), plus a fixed
per-trial overhead (start, load, first evaluation). With ``P`` trials in parallel the wall time is
the trial-hours spread over ``P`` slots but never shorter than the longest trial:
``max(trial_hours / P, longest)``; without pruning every trial is equal and the waves are exact:
``ceil(N / P) x hours``. Both caps grow in proportion while a search runs, so the one that binds
first is the one the search uses the largest share of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuplanner.export.human import human_money
from gpuplanner.plan.planner import Plan
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.sweep.schedule import Milestone, Schedule

CAPS = ("budget_usd", "max_gpu_hours")


# a trial's start-up beyond a year is a typo; larger figures overflow the search's totals to infinity
MAX_OVERHEAD_MINUTES = 525_600


@dataclass(frozen=True)
class SearchInputs:
    trials: int
    parallel: int = 1
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    trial_overhead_minutes: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or self.trials < 1:
            raise PlanInputError("trials", f"must be a whole number of at least 1, got {self.trials!r}")
        if isinstance(self.parallel, bool) or self.parallel < 1:
            raise PlanInputError("parallel", f"must be a whole number of at least 1, got {self.parallel!r}")
        for name, value in (("budget-usd", self.budget_usd), ("max-gpu-hours", self.max_gpu_hours)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PlanInputError(name, f"must be a positive number, got {value!r}")
        if not (
            math.isfinite(self.trial_overhead_minutes) and 0 <= self.trial_overhead_minutes <= MAX_OVERHEAD_MINUTES
        ):
            raise PlanInputError(
                "trial-overhead-minutes",
                f"must be 0 to {MAX_OVERHEAD_MINUTES:,} (a year), got {self.trial_overhead_minutes!r}",
            )


@dataclass(frozen=True)
class TrialCost:
    """One full trial: wall hours, GPU-hours and dollars under the chosen pricing."""

    hours: float
    gpu_hours: float
    cost_usd: float
    usd_per_hour: float  # the whole trial's rate (all its billed GPUs)
    gpus: int
    pricing: str


@dataclass(frozen=True)
class SearchTotals:
    gpu_hours: float
    cost_usd: float
    wall_hours: float
    trial_hours: float
    trials_finishing: float


@dataclass(frozen=True)
class SearchEstimate:
    inputs: SearchInputs
    schedule: Schedule
    trial: TrialCost
    milestones: list[Milestone]
    pruned: SearchTotals
    unpruned: SearchTotals
    binding_cap: str | None
    cap_shares: dict[str, float]
    finishes_under_cap: bool | None
    trials_within_cap: int | None
    warnings: tuple[str, ...]


def trial_cost(plan: Plan) -> TrialCost:
    """The cost of one full trial from its plan (spot: expected hours and cost)."""
    cost = plan.cost_usd
    if cost is None or not math.isfinite(cost):
        raise PlanInputError(
            "pricing",
            f"no {plan.request.pricing_mode} price for a trial on this GPU option: give --price"
            + (" and --spot-price or --spot-discount" if plan.request.pricing_mode == "spot" else ""),
        )
    hours = plan.hours
    if not (math.isfinite(hours) and hours > 0):
        raise PlanInputError("pricing", "a trial would never finish (spot interruptions outpace checkpoints)")
    gpus = plan.setup.gpus
    return TrialCost(hours, hours * gpus, cost, cost / hours, gpus, plan.request.pricing_mode)


def _totals(trial: TrialCost, schedule: Schedule, inputs: SearchInputs, trials: int, pruned: bool) -> SearchTotals:
    overhead_h = inputs.trial_overhead_minutes / 60.0
    if pruned:
        used, finishing = schedule.resource_used(trials, inputs.parallel)
    else:
        used, finishing = trials * schedule.max_resource, float(trials)
    trial_hours = used / schedule.max_resource * trial.hours + trials * overhead_h
    gpu_hours = trial_hours * trial.gpus
    cost = trial_hours * trial.usd_per_hour
    longest = trial.hours + overhead_h
    if pruned and finishing <= 0:
        longest = schedule.milestones()[-1] / schedule.max_resource * trial.hours + overhead_h
    if pruned:
        wall = max(trial_hours / inputs.parallel, longest)
    else:
        wall = math.ceil(trials / inputs.parallel) * longest
    return SearchTotals(gpu_hours, cost, wall, trial_hours, finishing)


def _shares(totals: SearchTotals, inputs: SearchInputs) -> dict[str, float]:
    shares = {}
    if inputs.budget_usd is not None:
        shares["budget_usd"] = totals.cost_usd / inputs.budget_usd
    if inputs.max_gpu_hours is not None:
        shares["max_gpu_hours"] = totals.gpu_hours / inputs.max_gpu_hours
    return shares


def estimate_search(plan: Plan, schedule: Schedule, inputs: SearchInputs) -> SearchEstimate:
    """The expected search under ``schedule`` and the same search with every trial run in full."""
    trial = trial_cost(plan)
    pruned = _totals(trial, schedule, inputs, inputs.trials, pruned=True)
    unpruned = _totals(trial, schedule, inputs, inputs.trials, pruned=False)
    shares = _shares(pruned, inputs)
    binding = max(shares, key=lambda k: shares[k]) if shares else None
    finishes = None if not shares else all(v <= 1.0 + 1e-12 for v in shares.values())
    within = None
    warnings: list[str] = []
    if shares:
        within = 0
        for n in range(inputs.trials, 0, -1):
            if all(v <= 1.0 + 1e-12 for v in _shares(_totals(trial, schedule, inputs, n, True), inputs).values()):
                within = n
                break
        first = schedule.milestones()[0] if schedule.milestones() else schedule.max_resource
        first_cost = first / schedule.max_resource * trial.hours + inputs.trial_overhead_minutes / 60.0
        one = SearchTotals(first_cost * trial.gpus, first_cost * trial.usd_per_hour, first_cost, first_cost, 0.0)
        if any(v > 1.0 for v in _shares(one, inputs).values()):
            warnings.append(
                f"the cap is smaller than one trial's first milestone ({first:g} {schedule.unit}: "
                f"{human_money(one.cost_usd)}, {one.gpu_hours:,.2f} GPU-hours): no trial can start"
            )
    if schedule.pruner == "none":
        warnings.append("no pruning: every trial runs in full")
    return SearchEstimate(
        inputs,
        schedule,
        trial,
        schedule.expected(inputs.trials, inputs.parallel),
        pruned,
        unpruned,
        binding,
        shares,
        finishes,
        within,
        tuple(warnings),
    )


def _num(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _totals_document(totals: SearchTotals) -> dict[str, Any]:
    return {
        "gpu_hours": _num(totals.gpu_hours),
        "cost_usd": _num(totals.cost_usd, 2),
        "wall_hours": _num(totals.wall_hours),
        "trial_hours": _num(totals.trial_hours),
        "trials_finishing": _num(totals.trials_finishing, 3),
    }


def search_document(estimate: SearchEstimate, trial_plan: dict[str, Any]) -> dict[str, Any]:
    """The stable JSON document of `gpuplanner sweep plan --json` (names in docs/sweeps.md)."""
    schedule, inputs, trial = estimate.schedule, estimate.inputs, estimate.trial
    pruned, unpruned = estimate.pruned, estimate.unpruned
    saving = unpruned.cost_usd - pruned.cost_usd
    return {
        "search": {
            "trials": inputs.trials,
            "parallel": inputs.parallel,
            "pruner": schedule.pruner,
            "unit": schedule.unit,
            "max_resource": _num(schedule.max_resource),
            "min_resource": _num(schedule.min_resource),
            "reduction_factor": schedule.reduction_factor
            if schedule.pruner in ("successive-halving", "hyperband")
            else None,
            "prune_percent": _num(schedule.prune_percent),
            "prune_at": _num(schedule.prune_at),
            "startup_trials": schedule.startup_trials if schedule.pruner == "percentile" else None,
            "budget_usd": inputs.budget_usd,
            "max_gpu_hours": inputs.max_gpu_hours,
            "trial_overhead_minutes": inputs.trial_overhead_minutes,
        },
        "trial": {
            "hours": _num(trial.hours),
            "gpu_hours": _num(trial.gpu_hours),
            "cost_usd": _num(trial.cost_usd, 4),
            "usd_per_hour": _num(trial.usd_per_hour, 4),
            "gpus": trial.gpus,
            "pricing": trial.pricing,
        },
        "milestones": [
            {
                "resource": _num(stone.resource),
                "trials_reaching": _num(stone.reaching, 3),
                "trials_continuing": _num(stone.continuing, 3),
            }
            for stone in estimate.milestones
        ],
        "pruned": _totals_document(pruned),
        "unpruned": _totals_document(unpruned),
        "saving": {
            "cost_usd": _num(saving, 2),
            "gpu_hours": _num(unpruned.gpu_hours - pruned.gpu_hours),
            "wall_hours": _num(unpruned.wall_hours - pruned.wall_hours),
            "pct": _num(saving / unpruned.cost_usd * 100.0 if unpruned.cost_usd > 0 else None, 2),
        },
        "caps": {
            "binding": estimate.binding_cap,
            "budget_usd_share": _num(estimate.cap_shares.get("budget_usd")),
            "max_gpu_hours_share": _num(estimate.cap_shares.get("max_gpu_hours")),
            "finishes_under_cap": estimate.finishes_under_cap,
            "trials_within_cap": estimate.trials_within_cap,
        },
        "trial_plan": trial_plan,
        "warnings": list(estimate.warnings),
    }
