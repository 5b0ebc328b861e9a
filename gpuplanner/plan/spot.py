"""Spot (preemptible) capacity: cheaper per hour, but interrupted.

Interruptions arrive as a Poisson process of rate ``lambda`` per hour of running. Each one costs a
restart ``R`` (new machine, load the checkpoint, warm up) and the work done since the last
checkpoint, unless the provider's stop notice leaves time to write a final checkpoint (then it costs
that write instead). Writing the periodic checkpoints takes time too, and is shown with the rest of
the overhead. Expected figures come from closed forms of this process (see :func:`_expected_lossy`).
P50/P90 and the chance of meeting a deadline come from a Monte Carlo simulation of the same process
with a fixed seed, so they are reproducible, while a run expects few interruptions. A long run's wall
time is a sum of many independent segments (a renewal process), so past
``CLOSED_FORM_MIN_INTERRUPTIONS`` expected interruptions its distribution is taken as normal with the
closed-form mean and variance of that sum (:func:`wall_hours_moments`): the cost of an estimate then
does not grow with the length of the job.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from gpuplanner.plan.setup import PlanInputError

MONTE_CARLO_RUNS = 2000
MONTE_CARLO_SEED = 20261122
# Seconds of notice needed beyond the checkpoint write itself (signal delivery, finishing a step).
NOTICE_MARGIN_S = 10.0
# A run that would need more interruptions than this is treated as never finishing (also the
# simulation's longest history).
MAX_INTERRUPTIONS = 4096
# From this many expected interruptions on, P50/P90 come from the normal approximation of the
# renewal sum (checked against the simulation in tests/plan/test_spot.py), not from the simulation.
CLOSED_FORM_MIN_INTERRUPTIONS = 30.0


@dataclass(frozen=True)
class SpotTerms:
    """How a spot run is interrupted and recovers. Times in hours unless named otherwise."""

    interruptions_per_hour: float
    restart_hours: float = 10.0 / 60.0
    checkpoint_interval_hours: float = 0.5
    checkpoint_write_hours: float = 0.0
    notice_s: float | None = None
    overhead_pct: float | None = None

    def __post_init__(self) -> None:
        checks = (
            ("interruptions-per-hour", self.interruptions_per_hour, True),
            ("restart-minutes", self.restart_hours, True),
            ("checkpoint-minutes", self.checkpoint_interval_hours, False),
            ("checkpoint-write-s", self.checkpoint_write_hours, True),
        )
        for name, value, zero_ok in checks:
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                allowed = "zero or a positive number" if zero_ok else "a positive number"
                raise PlanInputError(name, f"must be {allowed}, got {value!r}")
        if self.overhead_pct is not None and not (math.isfinite(self.overhead_pct) and self.overhead_pct >= 0):
            raise PlanInputError(
                "spot-overhead-pct", f"must be zero or a positive percentage, got {self.overhead_pct!r}"
            )

    @property
    def graceful_stop(self) -> bool:
        """True when the stop notice leaves time to write a checkpoint, so no work is lost."""
        if self.notice_s is None:
            return False
        return self.notice_s >= self.checkpoint_write_hours * 3600.0 + NOTICE_MARGIN_S

    @property
    def stop_checkpoint_hours(self) -> float:
        return self.checkpoint_write_hours if self.graceful_stop else 0.0


@dataclass(frozen=True)
class SpotEstimate:
    hours: float
    expected_interruptions: float | None
    overhead_hours: float
    checkpoint_hours: float
    restart_hours: float
    lost_work_hours: float
    p50_hours: float
    p90_hours: float
    p_meet_deadline: float | None
    finishes: bool
    model: str  # "interruptions" or "flat overhead"


def _work_with_checkpoints(compute_hours: float, terms: SpotTerms) -> float:
    return compute_hours * (1.0 + terms.checkpoint_write_hours / terms.checkpoint_interval_hours)


class _Simulation:
    """Simulated interruption histories for one set of terms, reusable for any amount of work.

    Where a run stands after its k-th interruption does not depend on how much work it has to do,
    only on when the interruptions came, so one set of histories answers every work size: a run with
    ``work`` hours finishes in the first segment whose reach (progress at its start + time until the
    next interruption) covers ``work``. Histories are drawn column by column with one seed, so a
    longer history extends a shorter one with the same draws.
    """

    def __init__(
        self, rate: float, per_interruption: float, segment: float, lose_work: bool, runs: int, seed: int
    ) -> None:
        self.rate, self.per_interruption, self.segment, self.lose_work = rate, per_interruption, segment, lose_work
        self.runs, self.seed = runs, seed
        self.columns = 0
        self._grow(8)

    def _grow(self, columns: int) -> None:
        # A vanishing rate gives infinite gaps (never interrupted); inf flows through correctly.
        with np.errstate(over="ignore"):
            self._simulate(columns)

    def _simulate(self, columns: int) -> None:
        rng = np.random.default_rng(self.seed)
        gaps = rng.standard_exponential((columns, self.runs)).T / self.rate
        start = np.zeros((self.runs, columns))  # progress at the start of each segment
        progress = np.zeros(self.runs)
        for k in range(columns):
            start[:, k] = progress
            reached = progress + gaps[:, k]
            progress = np.floor(reached / self.segment) * self.segment if self.lose_work else reached
        start_wall = np.ascontiguousarray(
            np.concatenate([np.zeros((self.runs, 1)), np.cumsum(gaps[:, :-1] + self.per_interruption, axis=1)], axis=1)
        )  # row by row in memory, as wall_hours reads it flattened
        best_reach = np.maximum.accumulate(start + gaps, axis=1)
        final_reach = np.ascontiguousarray(best_reach[:, -1])  # the reach only grows along a history
        # one assignment, so a thread reading while another grows the histories sees one consistent set
        self._state = _Histories(
            columns,
            start,
            start_wall,
            best_reach,
            final_reach,
            float(final_reach.min()),
            np.arange(self.runs) * columns,
        )
        self.columns = columns

    def wall_hours(self, work: float) -> np.ndarray:
        state = self._state
        while state.least_reach < work and state.columns < MAX_INTERRUPTIONS:
            self._grow(min(state.columns * 4, MAX_INTERRUPTIONS))
            state = self._state
        # first segment whose reach covers the work (0 for a run none covers, set to inf below)
        index = (state.best_reach >= work).argmax(axis=1) + state.row_offsets
        wall: np.ndarray = state.start_wall.take(index) + work - state.start_progress.take(index)
        wall[state.final_reach < work] = np.inf
        return wall


@dataclass(frozen=True)
class _Histories:
    """One set of simulated histories, as :meth:`_Simulation.wall_hours` reads them."""

    columns: int
    start_progress: np.ndarray  # progress at the start of each segment
    start_wall: np.ndarray  # wall hours at the start of each segment
    best_reach: np.ndarray  # furthest progress reached by the end of each segment
    final_reach: np.ndarray  # each run's furthest reach over its whole history
    least_reach: float  # the smallest of those: a work size beyond it needs longer histories
    row_offsets: np.ndarray  # where each run's segments begin in the flattened arrays


@functools.lru_cache(maxsize=64)
def _simulation(
    rate: float, per_interruption: float, segment: float, lose_work: bool, runs: int, seed: int
) -> _Simulation:
    return _Simulation(rate, per_interruption, segment, lose_work, runs, seed)


@functools.lru_cache(maxsize=8)
def _standard_normals(runs: int, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(runs)
    values.flags.writeable = False
    return values


def _truncated_exponential_moments(rate: float, length: float) -> tuple[float, float]:
    """Mean and variance of the time to an interruption, given that it comes within ``length`` hours."""
    rl = rate * length
    if rl < 1e-4:  # nearly uniform on [0, length); the exact forms cancel catastrophically here
        return length / 2.0 - rate * length * length / 12.0, length * length / 12.0
    odds = 1.0 / math.expm1(rl)  # e^(-rl) / (1 - e^(-rl))
    mean = 1.0 / rate - length * odds
    second = 2.0 / (rate * rate) - (length * length + 2.0 * length / rate) * odds
    return mean, max(second - mean * mean, 0.0)


def _segment_moments(rate: float, restart: float, length: float) -> tuple[float, float]:
    """Mean and variance of the wall hours to get ``length`` hours done without an interruption.

    The failed tries before the first success are geometric in number (``N``, success chance
    ``e^(-rate length)``); each costs its truncated-exponential running time ``X`` plus the restart:
    ``Y = length + sum(X_i + restart)``, a compound sum with ``Var = E[N] Var X + Var N (E X + restart)^2``.
    """
    if length <= 0.0:
        return 0.0, 0.0
    fails_mean = math.expm1(rate * length)
    fails_var = fails_mean * math.exp(rate * length)
    try_mean, try_var = _truncated_exponential_moments(rate, length)
    cost = try_mean + restart
    return length + fails_mean * cost, fails_mean * try_var + fails_var * cost * cost


def wall_hours_moments(work: float, terms: SpotTerms) -> tuple[float, float]:
    """Closed-form mean and variance of a spot run's wall hours for ``work`` hours (checkpoints included)."""
    rate = terms.interruptions_per_hour
    per_interruption = terms.restart_hours + terms.stop_checkpoint_hours
    if terms.graceful_stop:  # Poisson interruptions over the work, each costing a fixed time
        return work + rate * work * per_interruption, rate * work * per_interruption**2
    segment = terms.checkpoint_interval_hours + terms.checkpoint_write_hours
    full_segments = math.floor(work / segment)
    mean, var = _segment_moments(rate, per_interruption, segment)
    last_mean, last_var = _segment_moments(rate, per_interruption, work - full_segments * segment)
    return full_segments * mean + last_mean, full_segments * var + last_var


def _expected_interruptions(work: float, terms: SpotTerms) -> float:
    if terms.graceful_stop:
        return terms.interruptions_per_hour * work
    return _expected_lossy(work, terms)[1]


def simulate_wall_hours(
    compute_hours: float, terms: SpotTerms, runs: int = MONTE_CARLO_RUNS, seed: int = MONTE_CARLO_SEED
) -> np.ndarray:
    """Wall hours of ``runs`` spot runs (``inf`` for one that never finishes).

    Simulated while the run expects fewer than ``CLOSED_FORM_MIN_INTERRUPTIONS`` interruptions;
    beyond that, ``runs`` fixed normal quantiles of the closed-form mean and variance (never below
    the work itself), so the cost is the same for any length of job.
    """
    work = _work_with_checkpoints(compute_hours, terms)
    if terms.interruptions_per_hour == 0.0 or work == 0.0:
        return np.full(runs, work)
    interruptions = _expected_interruptions(work, terms)
    if not interruptions < MAX_INTERRUPTIONS:
        return np.full(runs, math.inf)
    if interruptions >= CLOSED_FORM_MIN_INTERRUPTIONS:
        mean, var = wall_hours_moments(work, terms)
        return np.maximum(mean + math.sqrt(var) * _standard_normals(runs, seed), work)
    simulation = _simulation(
        terms.interruptions_per_hour,
        terms.restart_hours + terms.stop_checkpoint_hours,
        terms.checkpoint_interval_hours + terms.checkpoint_write_hours,
        not terms.graceful_stop,
        runs,
        seed,
    )
    return simulation.wall_hours(work)


def _order_statistics(samples: np.ndarray, shares: tuple[float, ...]) -> tuple[float, ...]:
    """Empirical quantiles without interpolation (a pair of never-finishing runs stays inf, not NaN);
    a partial sort is several times faster than np.quantile on a few thousand samples."""
    ranks = [max(math.ceil(share * samples.size) - 1, 0) for share in shares]
    ordered = np.partition(samples, ranks)
    return tuple(float(ordered[rank]) for rank in ranks)


def _expected_lossy(work: float, terms: SpotTerms) -> tuple[float, float]:
    """Expected (wall hours, interruptions) when an interruption loses the work since the last checkpoint.

    Work proceeds in segments (a checkpoint interval plus its write); a segment of length ``s`` has
    to run ``s`` hours without interruption. Each failed try costs the time until the interruption
    plus the restart, and there are ``e^(lambda s) - 1`` failed tries on average, which gives
    ``(e^(lambda s) - 1)(1/lambda + R)`` hours per segment, the successful try included. For rare interruptions this is the
    familiar first-order rule: each interruption loses half a checkpoint interval.
    """
    rate = terms.interruptions_per_hour
    segment = terms.checkpoint_interval_hours + terms.checkpoint_write_hours
    full_segments = math.floor(work / segment)
    last = work - full_segments * segment
    if rate * segment > 700.0:
        return math.inf, math.inf
    fails = full_segments * math.expm1(rate * segment) + math.expm1(rate * last)
    return fails * (1.0 / rate + terms.restart_hours), fails


def estimate_spot(
    compute_hours: float, terms: SpotTerms, deadline_hours: float | None = None, runs: int = MONTE_CARLO_RUNS
) -> SpotEstimate:
    """Expected spot wall time with its overhead split out, plus P50/P90 and P(meet deadline)."""
    if terms.overhead_pct is not None:
        hours = compute_hours * (1.0 + terms.overhead_pct / 100.0)
        meets = None if deadline_hours is None else float(hours <= deadline_hours)
        return SpotEstimate(
            hours, None, hours - compute_hours, 0.0, 0.0, 0.0, hours, hours, meets, True, "flat overhead"
        )
    work = _work_with_checkpoints(compute_hours, terms)
    rate = terms.interruptions_per_hour
    if rate == 0.0:
        hours, interruptions = work, 0.0
    elif terms.graceful_stop:
        interruptions = rate * work
        hours = work + interruptions * (terms.restart_hours + terms.stop_checkpoint_hours)
    else:
        hours, interruptions = _expected_lossy(work, terms)
    finishes = math.isfinite(hours) and interruptions < MAX_INTERRUPTIONS
    if not finishes:
        hours = interruptions = math.inf
    stop_checkpoints = interruptions * terms.stop_checkpoint_hours if finishes else math.inf
    restarts = interruptions * terms.restart_hours if finishes else math.inf
    if finishes:
        samples = simulate_wall_hours(compute_hours, terms, runs=runs)
        p50, p90 = _order_statistics(samples, (0.5, 0.9))
        meets = None if deadline_hours is None else np.count_nonzero(samples <= deadline_hours) / samples.size
    else:
        p50 = p90 = math.inf
        meets = None if deadline_hours is None else 0.0
    return SpotEstimate(
        hours=hours,
        expected_interruptions=interruptions,
        overhead_hours=hours - compute_hours,
        checkpoint_hours=work - compute_hours + stop_checkpoints,
        restart_hours=restarts,
        lost_work_hours=max(hours - work - restarts - stop_checkpoints, 0.0) if finishes else math.inf,
        p50_hours=p50,
        p90_hours=p90,
        p_meet_deadline=meets,
        finishes=finishes,
        model="interruptions",
    )
