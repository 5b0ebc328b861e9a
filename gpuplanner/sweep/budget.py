"""The live budget of a search: what is spent, what running trials may still spend, what a new trial gets.

Two caps (dollars and GPU-hours) are handled alike as a pair. Every trial runs with an *allowance*:
the trainer's own ``--budget-usd`` and ``--max-gpu-hours``, so it checkpoints and stops by itself at
that spend even when nothing watches it (the search process was killed). A new trial's allowance is
the cost of the furthest point of its schedule (a milestone or the end), with a safety factor for step
times that wander, that fits in what the cap has
left after the ended trials' spend and the running trials' reservations (a trial whose whole run fits
gets 3 times that, as far as the caps allow, so an underestimated step cost does not cut it short); a
trial that cannot reach its first milestone is not started. A running trial reserves its allowance, or, once the cost of a step is
measured, no more than its spend plus the rest of a full trial (with a safety factor): a trial never
needs more than that. The sum of spend and reservations therefore never passes the cap, up to the one
optimizer step a trainer finishes after crossing its allowance, which ``step_slack`` reserves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Reservations of measured trials are inflated by this factor (step times wander with load and evals).
SAFETY = 1.25
# A trial whose full run fits gets this many times its estimated cost (as far as the caps allow).
FULL_TRIAL_HEADROOM = 3.0
# Optimizer steps reserved on top of each allowance: a trainer stops after the step that crosses it.
STEP_SLACK = 2


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


def reservation(trial: TrialBudget, step_cost: Amount | None, max_steps: int) -> Amount:
    """What a trial may still come to in total: its spend when it ended, else its allowance, lowered to
    spend + the rest of a full trial once a step's cost is known."""
    if not trial.active:
        return trial.spent
    if step_cost is None:
        return trial.allowance
    rest = step_cost.scaled((max(0, max_steps - trial.steps_done) + STEP_SLACK) * SAFETY)
    capped = trial.spent + rest
    return Amount(min(trial.allowance.usd, capped.usd), min(trial.allowance.gpu_hours, capped.gpu_hours))


def committed(trials: Sequence[TrialBudget], step_cost: Amount | None, max_steps: int) -> Amount:
    total = Amount()
    for trial in trials:
        total = total + reservation(trial, step_cost, max_steps)
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


def new_trial_allowance(
    caps: Caps,
    trials: Sequence[TrialBudget],
    step_cost: Amount | None,
    stops: Sequence[int],
    max_steps: int,
) -> Allowance:
    """The allowance of a trial started now: the cost of the furthest of ``stops`` (milestones, then
    ``max_steps``) that fits in the room left. Without a measured step cost the whole room is given
    (only when no other trial is running: the first trial measures the cost for the rest)."""
    room = caps.room(committed(trials, step_cost, max_steps))
    if step_cost is None:
        if any(t.active for t in trials):
            return Allowance(None, None, "waiting for the first trial to measure the cost of a step")
        if room.usd <= 0 or room.gpu_hours <= 0:
            return Allowance(None, None, _no_room(caps, room))
        return Allowance(room, None, None)
    best: tuple[Amount, int] | None = None
    for step in sorted(set([*stops, max_steps])):
        need = step_cost.scaled((step + STEP_SLACK) * SAFETY)
        if need.fits_in(room, caps):
            best = (need, step)
    if best is None:
        first = min([*stops, max_steps])
        need = step_cost.scaled((first + STEP_SLACK) * SAFETY)
        which = "budget_usd" if caps.usd is not None and need.usd > room.usd else "max_gpu_hours"
        left = f"${max(0.0, room.usd):,.4f}" if which == "budget_usd" else f"{max(0.0, room.gpu_hours):,.6f} GPU-hours"
        cost = f"${need.usd:,.4f}" if which == "budget_usd" else f"{need.gpu_hours:,.6f} GPU-hours"
        return Allowance(None, None, f"{which}: a trial's first milestone (step {first}) costs {cost}, {left} left")
    amount, step = best
    if step >= max_steps:
        # a whole trial fits: leave room for a step cost that was underestimated (--step-seconds, or a busy
        # host); the reservation drops to spend + the rest of the trial once the cost is measured
        generous = amount.scaled(FULL_TRIAL_HEADROOM)
        amount = Amount(min(generous.usd, room.usd), min(generous.gpu_hours, room.gpu_hours))
    # otherwise whole milestones only: the search stops the trial at the last one it can pay for
    return Allowance(amount, step, None)


def _no_room(caps: Caps, room: Amount) -> str:
    if caps.usd is not None and room.usd <= 0:
        return "budget_usd: nothing left"
    return "max_gpu_hours: nothing left"
