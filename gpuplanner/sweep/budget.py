"""The live budget of a search: what is spent, what running trials may still spend, what a new trial gets.

Two caps (dollars and GPU-hours) are handled alike as a pair. Every trial runs with an *allowance*
that the trainer enforces itself (its ``--budget-usd`` and ``--max-gpu-hours``), so it checkpoints and
stops at that spend even when nothing watches it (the search process was killed). A running trial
reserves its whole allowance and an ended one its spend; a new trial's allowance must fit in what the
cap has left after those, so the sum can never pass the cap. The trainer is given 90% of the
allowance: it stops after the step that crosses its budget, and the rest covers that step.

A new trial's allowance is the cost of the furthest point of its schedule (a milestone, or the end)
that fits, from the cost of a step (measured, or ``--step-seconds`` before anything is measured) with a
safety factor for step times that wander; a trial whose whole run fits gets up to 1.5 times that (as
far as the room goes once the other free slots keep a first milestone each), so an underestimated step
cost does not cut it short. A trial that cannot pay for its
first milestone is not started. Before any step cost is known, a trial gets the room left divided by
the free slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplanner.export.human import human_money

# Step costs are inflated by this factor (step times wander with load, evaluations and warm-up).
SAFETY = 1.25
# A trial whose full run fits gets this many times its estimated cost (as far as the caps allow).
FULL_TRIAL_HEADROOM = 1.5
# Optimizer steps added to each stop (the evaluation and checkpoint at a milestone take time too).
STEP_SLACK = 2
# Share of an allowance given to the trainer as its budget; the rest pays for the step that crosses it.
TRAINER_SHARE = 0.9


@dataclass(frozen=True)
class Amount:
    """Dollars and GPU-hours together."""

    usd: float = 0.0
    gpu_hours: float = 0.0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.usd + other.usd, self.gpu_hours + other.gpu_hours)

    def __sub__(self, other: Amount) -> Amount:
        return Amount(self.usd - other.usd, self.gpu_hours - other.gpu_hours)

    def scaled(self, factor: float) -> Amount:
        return Amount(self.usd * factor, self.gpu_hours * factor)

    def fits_in(self, room: Amount, caps: Caps) -> bool:
        return (caps.usd is None or self.usd <= room.usd + 1e-12) and (
            caps.gpu_hours is None or self.gpu_hours <= room.gpu_hours + 1e-12
        )


@dataclass(frozen=True)
class Caps:
    usd: float | None = None
    gpu_hours: float | None = None

    def room(self, used: Amount) -> Amount:
        """What is left under each cap (infinite where there is no cap)."""
        return Amount(
            math.inf if self.usd is None else self.usd - used.usd,
            math.inf if self.gpu_hours is None else self.gpu_hours - used.gpu_hours,
        )

    def first_crossed(self, used: Amount) -> str | None:
        if self.usd is not None and used.usd > self.usd + 1e-12:
            return "budget_usd"
        if self.gpu_hours is not None and used.gpu_hours > self.gpu_hours + 1e-12:
            return "max_gpu_hours"
        return None


@dataclass(frozen=True)
class TrialBudget:
    """One trial's spend so far and its allowance; ``active`` while its process may still spend."""

    spent: Amount
    allowance: Amount
    active: bool
    steps_done: int = 0


def reservation(trial: TrialBudget) -> Amount:
    """What a trial may come to in total: its spend once it ended, else its whole allowance."""
    return trial.allowance if trial.active else trial.spent


def committed(trials: Sequence[TrialBudget]) -> Amount:
    total = Amount()
    for trial in trials:
        total = total + reservation(trial)
    return total


def spent(trials: Sequence[TrialBudget]) -> Amount:
    total = Amount()
    for trial in trials:
        total = total + trial.spent
    return total


@dataclass(frozen=True)
class Allowance:
    """A new trial's allowance, the step it reaches within it, or why none can start."""

    amount: Amount | None
    reach_step: int | None
    reason: str | None


def stop_cost(step_cost: Amount, step: int) -> Amount:
    """The allowance that pays for ``step`` optimizer steps (with slack, safety and the trainer's share)."""
    return step_cost.scaled((step + STEP_SLACK) * SAFETY / TRAINER_SHARE)


def new_trial_allowance(
    caps: Caps,
    trials: Sequence[TrialBudget],
    step_cost: Amount | None,
    stops: Sequence[int],
    max_steps: int,
    free_slots: int = 1,
) -> Allowance:
    """The allowance of a trial started now: the cost of the furthest of ``stops`` (milestones, then
    ``max_steps``) that fits in the room left; without a step cost, the room divided by ``free_slots``."""
    room = caps.room(committed(trials))
    if room.usd <= 0 or room.gpu_hours <= 0:
        return Allowance(None, None, _no_room(caps, room))
    if step_cost is None:
        return Allowance(room.scaled(1.0 / max(1, free_slots)), None, None)
    best: tuple[Amount, int] | None = None
    for step in sorted(set([*stops, max_steps])):
        need = stop_cost(step_cost, step)
        if need.fits_in(room, caps):
            best = (need, step)
    if best is None:
        first = min([*stops, max_steps])
        need = stop_cost(step_cost, first)
        which = "budget_usd" if caps.usd is not None and need.usd > room.usd else "max_gpu_hours"
        left = (
            f"{human_money(max(0.0, room.usd), 4)}"
            if which == "budget_usd"
            else f"{max(0.0, room.gpu_hours):,.6f} GPU-hours"
        )
        cost = f"{human_money(need.usd, 4)}" if which == "budget_usd" else f"{need.gpu_hours:,.6f} GPU-hours"
        return Allowance(None, None, f"{which}: a trial's first milestone (step {first}) costs {cost}, {left} left")
    amount, step = best
    if step >= max_steps:
        # a whole trial fits: headroom for a step cost that was underestimated, as far as the room goes once
        # the other free slots keep a first milestone each
        generous = amount.scaled(FULL_TRIAL_HEADROOM)
        spare = room - stop_cost(step_cost, min([*stops, max_steps])).scaled(max(0, free_slots - 1))
        amount = Amount(
            max(amount.usd, min(generous.usd, spare.usd)),
            max(amount.gpu_hours, min(generous.gpu_hours, spare.gpu_hours)),
        )
    # otherwise whole milestones only: the search stops the trial at the last one it can pay for
    return Allowance(amount, step, None)


def trial_budget(allowance: Amount, overshoot: Amount) -> Amount:
    """What a trial is told to stop at (``--budget-usd``, ``--max-gpu-hours``): :data:`TRAINER_SHARE` of its
    allowance, and less where an ended trial's spend passed its own budget by more than the rest (``overshoot``:
    its stop latency at its price, measured), so that the trial's spend stays within its allowance."""
    return Amount(
        min(allowance.usd * TRAINER_SHARE, allowance.usd - overshoot.usd),
        min(allowance.gpu_hours * TRAINER_SHARE, allowance.gpu_hours - overshoot.gpu_hours),
    )


def _no_room(caps: Caps, room: Amount) -> str:
    if caps.usd is not None and room.usd <= 0:
        return "budget_usd: nothing left to start a trial with"
    return "max_gpu_hours: nothing left to start a trial with"
