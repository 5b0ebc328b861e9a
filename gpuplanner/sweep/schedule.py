"""The pruning schedule of a search: where trials are judged and how many go on, in expectation.

One schedule serves the planner (resource in epochs) and the runner (resource in optimizer steps).
The counts follow the rules of the Optuna pruner the runner uses, for trials whose quality does not
depend on the order they run in:

- ``successive-halving`` (Optuna's asynchronous ``SuccessiveHalvingPruner``, ASHA): milestones at
  ``min_resource x reduction_factor^k`` below the full trial. The i-th trial to reach a milestone is
  promoted when its value ranks within the best ``max(1, i // reduction_factor)`` of the i values seen
  there, so in expectation ``sum(max(1, i // eta) / i for i in 1..n)`` of ``n`` trials go on.
- ``hyperband`` (``HyperbandPruner``): brackets of successive halving starting ``eta^b`` times later,
  trials shared among them in Optuna's allocation ratio ``ceil(B x eta^s / (s + 1))``, ``s = B - 1 - b``.
- ``percentile`` ("prune the bottom X% at E", ``PercentilePruner``): one milestone; the first
  ``startup_trials + parallel - 1`` trials are never pruned (nothing finished to compare with yet),
  each later one goes on with probability ``1 - X / 100``.
- ``none``: every trial runs in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplanner.plan.setup import PlanInputError

PRUNERS = ("successive-halving", "hyperband", "percentile", "none")
# Bounds that keep an estimate finite and quick (issue 27 item 11: `--trials 1e12` hung, hyperband with
# `--min-epochs 1e-308` or `--reduction-factor 1e308` overflowed or ran for hours): the expectations add up one
# term per trial and per rung, and no search runs a million trials, keeps 1 in more than 1,000, or judges
# trials at more than 60 milestones (a factor of at least 2 per rung: 2^60 between the first and the last).
MAX_TRIALS = 1_000_000
MAX_REDUCTION_FACTOR = 1000
MAX_RUNGS = 60


@dataclass(frozen=True)
class Milestone:
    """One place trials are judged: ``resource`` into a trial, ``reaching`` trials get there (expected),
    ``continuing`` of them go on."""

    resource: float
    reaching: float
    continuing: float


@dataclass(frozen=True)
class Schedule:
    """A pruning schedule over trials of ``max_resource`` each (epochs or steps: the caller's unit)."""

    pruner: str
    max_resource: float
    min_resource: float | None = None
    reduction_factor: int = 3
    prune_percent: float | None = None
    prune_at: float | None = None
    startup_trials: int = 1
    unit: str = "epochs"

    def __post_init__(self) -> None:
        if self.pruner not in PRUNERS:
            raise PlanInputError("pruner", f"{self.pruner!r} is not one of {', '.join(PRUNERS)}")
        if not (math.isfinite(self.max_resource) and self.max_resource > 0):
            raise PlanInputError(_flag("max", self.unit), f"a trial must be positive, got {self.max_resource!r}")
        if self.startup_trials < 0:
            raise PlanInputError("startup-trials", f"must be 0 or more, got {self.startup_trials}")
        if self.pruner in ("successive-halving", "hyperband"):
            self._check_halving()
        elif self.pruner == "percentile":
            self._check_percentile()

    def _check_halving(self) -> None:
        if isinstance(self.reduction_factor, bool) or not 2 <= self.reduction_factor <= MAX_REDUCTION_FACTOR:
            raise PlanInputError(
                "reduction-factor",
                f"must be a whole number from 2 to {MAX_REDUCTION_FACTOR:,}, got {self.reduction_factor:.6g}",
            )
        flag = _flag("min", self.unit)
        if self.min_resource is None:
            raise PlanInputError(flag, f"{self.pruner} needs the first milestone ({self.unit} before judging)")
        if not (math.isfinite(self.min_resource) and self.min_resource > 0):
            raise PlanInputError(flag, f"must be positive, got {self.min_resource!r}")
        if self.min_resource >= self.max_resource:
            raise PlanInputError(
                flag,
                f"the first milestone ({self.min_resource:g} {self.unit}) must come before the end of a trial "
                f"({self.max_resource:g} {self.unit}): the schedule cannot fit, nothing would be pruned",
            )
        rungs = math.floor(
            (math.log(self.max_resource) - math.log(self.min_resource)) / math.log(self.reduction_factor)
        )
        if rungs > MAX_RUNGS:
            raise PlanInputError(
                flag,
                f"the first milestone ({self.min_resource:g} {self.unit}) is so early that trials would be judged "
                f"at {rungs:,} milestones (at most {MAX_RUNGS}); give a later first milestone",
            )

    def _check_percentile(self) -> None:
        if self.prune_percent is None or not (0 < self.prune_percent < 100):
            raise PlanInputError(
                "prune-percent", f"must be a share in percent between 0 and 100, got {self.prune_percent!r}"
            )
        flag = _flag("prune_at", self.unit)
        if self.prune_at is None or not (math.isfinite(self.prune_at) and self.prune_at > 0):
            raise PlanInputError(flag, f"must be a positive number of {self.unit}, got {self.prune_at!r}")
        if self.prune_at >= self.max_resource:
            raise PlanInputError(
                flag,
                f"pruning at {self.prune_at:g} {self.unit} must come before the end of a trial "
                f"({self.max_resource:g} {self.unit}): the schedule cannot fit",
            )

    # ---------------------------------------------------------------------------------- structure

    def halving_milestones(self, first_rung: int = 0) -> tuple[float, ...]:
        """Successive-halving milestones ``min x eta^k`` (k >= first_rung) strictly below a full trial."""
        assert self.min_resource is not None
        out = []
        k = first_rung
        while self.min_resource * self.reduction_factor**k < self.max_resource * (1 - 1e-12):
            out.append(self.min_resource * self.reduction_factor**k)
            k += 1
        return tuple(out)

    def brackets(self) -> list[tuple[int, float]]:
        """Hyperband brackets as (first rung, share of the trials), Optuna's allocation."""
        assert self.min_resource is not None
        count = math.floor(math.log(self.max_resource / self.min_resource, self.reduction_factor) + 1e-9) + 1
        budgets = []
        for bracket in range(count):
            s = count - 1 - bracket
            budgets.append(math.ceil(count * self.reduction_factor**s / (s + 1)))
        total = sum(budgets)
        return [(bracket, budget / total) for bracket, budget in enumerate(budgets)]

    def milestones(self) -> tuple[float, ...]:
        """Every place trials may be judged, ascending (all brackets' for hyperband)."""
        if self.pruner == "successive-halving":
            return self.halving_milestones()
        if self.pruner == "hyperband":
            return self.halving_milestones()
        if self.pruner == "percentile":
            assert self.prune_at is not None
            return (float(self.prune_at),)
        return ()

    # ---------------------------------------------------------------------------------- expectations

    def expected(self, trials: int, parallel: int = 1) -> list[Milestone]:
        """Expected trials reaching and passing each milestone (hyperband: summed over brackets)."""
        if not 1 <= trials <= MAX_TRIALS:
            raise PlanInputError("trials", f"must be from 1 to {MAX_TRIALS:,}, got {trials:.6g}")
        if self.pruner == "successive-halving":
            return _halving(self.halving_milestones(), float(trials), self.reduction_factor)
        if self.pruner == "hyperband":
            merged: dict[float, list[float]] = {}
            for bracket, share in self.brackets():
                for stone in _halving(self.halving_milestones(bracket), trials * share, self.reduction_factor):
                    entry = merged.setdefault(stone.resource, [0.0, 0.0])
                    entry[0] += stone.reaching
                    entry[1] += stone.continuing
            # a bracket without a milestone at a resource passes all its trials through it
            out = []
            for resource in self.halving_milestones():
                reaching, continuing = merged.get(resource, (0.0, 0.0))
                passing = _passing(self, resource, trials)
                out.append(Milestone(resource, reaching + passing, continuing + passing))
            return out
        if self.pruner == "percentile":
            assert self.prune_at is not None and self.prune_percent is not None
            safe = min(trials, self.startup_trials + parallel - 1)
            going_on = safe + (trials - safe) * (1.0 - self.prune_percent / 100.0)
            return [Milestone(float(self.prune_at), float(trials), going_on)]
        return []

    def resource_used(self, trials: int, parallel: int = 1) -> tuple[float, float]:
        """(expected resource all trials use together, expected trials that run in full)."""
        stones = self.expected(trials, parallel)
        if self.pruner == "hyperband":
            total, full = 0.0, 0.0
            for bracket, share in self.brackets():
                part = _halving(self.halving_milestones(bracket), trials * share, self.reduction_factor)
                t, f = _used(part, trials * share, self.max_resource)
                total, full = total + t, full + f
            return total, full
        return _used(stones, float(trials), self.max_resource)


_FLAGS = {
    "epochs": {"min": "min-epochs", "max": "epochs", "prune_at": "prune-at-epoch"},
    "steps": {"min": "min-steps", "max": "max-steps", "prune_at": "prune-at-step"},
}


def _flag(name: str, unit: str) -> str:
    """The command-line flag (without dashes) of a schedule input in the caller's unit."""
    return _FLAGS["steps" if unit == "steps" else "epochs"][name]


def expected_promotions(n: float, reduction_factor: int) -> float:
    """Expected trials of ``n`` that Optuna's asynchronous successive halving promotes at one rung."""
    whole = math.floor(n + 1e-9)
    total = sum(max(1, i // reduction_factor) / i for i in range(1, whole + 1))
    if n > whole:  # a fractional trial (hyperband's share): interpolate to the next one
        total += (n - whole) * max(1, (whole + 1) // reduction_factor) / (whole + 1)
    return total


def _halving(milestones: tuple[float, ...], trials: float, reduction_factor: int) -> list[Milestone]:
    out, reaching = [], trials
    for resource in milestones:
        continuing = min(reaching, expected_promotions(reaching, reduction_factor))
        out.append(Milestone(resource, reaching, continuing))
        reaching = continuing
    return out


def _passing(schedule: Schedule, resource: float, trials: int) -> float:
    """Hyperband trials of brackets whose first rung comes after ``resource`` (they pass it untouched)."""
    total = 0.0
    for bracket, share in schedule.brackets():
        own = schedule.halving_milestones(bracket)
        if not own or own[0] > resource:
            total += trials * share
    return total


def _used(stones: list[Milestone], trials: float, max_resource: float) -> tuple[float, float]:
    total, reaching = 0.0, trials
    for stone in stones:
        total += (reaching - stone.continuing) * stone.resource
        reaching = stone.continuing
    return total + reaching * max_resource, reaching
