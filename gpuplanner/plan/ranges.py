"""Likely ranges of a plan's hours and cost: the speed's own uncertainty, with spot's interruptions.

A speed from the step model is off by about its leave-one-source-out error (``uncertainty_pct``, the
mean absolute % error on published runs the model was not fitted on); a calibrated speed by less; a
measured speed is exact. The error is taken as log-normal with that mean absolute deviation, and the
likely range is its 10th to 90th percentile. On spot, every simulated interruption history (the spot
Monte Carlo) is paired with a drawn speed error, and the range is the P10-P90 of their product.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpuplanner.plan.spot import MONTE_CARLO_RUNS, SpotTerms, _order_statistics, simulate_wall_hours

LOW_Q, HIGH_Q = 0.1, 0.9
Z90 = 1.2815515655446004  # standard normal 90th percentile
SPEED_ERROR_SEED = 20261123
# mean |X| of a standard normal: a log-normal error with sigma s has mean absolute log deviation s x this
MEAN_ABS_NORMAL = math.sqrt(2.0 / math.pi)


def speed_sigma(uncertainty_pct: float | None) -> float:
    """Sigma of the log of the speed error whose mean absolute value is ``uncertainty_pct`` percent."""
    if not uncertainty_pct:
        return 0.0
    return math.log1p(uncertainty_pct / 100.0) / MEAN_ABS_NORMAL


def hours_range(hours: float, uncertainty_pct: float | None) -> tuple[float, float]:
    """P10-P90 of the hours when the speed is off by ``uncertainty_pct`` on average (exact when None)."""
    if not math.isfinite(hours):
        return (hours, hours)
    sigma = speed_sigma(uncertainty_pct)
    return (hours * math.exp(-Z90 * sigma), hours * math.exp(Z90 * sigma))


@functools.lru_cache(maxsize=256)
def _speed_errors(sigma: float, runs: int) -> np.ndarray:
    rng = np.random.default_rng(SPEED_ERROR_SEED)
    return np.exp(sigma * rng.standard_normal(runs))


@functools.lru_cache(maxsize=256)
def spot_hours_range(
    compute_hours: float, terms: SpotTerms, uncertainty_pct: float | None, runs: int = MONTE_CARLO_RUNS
) -> tuple[float, float]:
    """P10-P90 of spot wall hours: simulated interruptions x the speed's error, drawn independently.

    Spot overhead grows with the compute hours about proportionally, so each simulated history is
    scaled by its drawn speed error rather than simulated again.
    """
    if terms.overhead_pct is not None:
        return hours_range(compute_hours * (1.0 + terms.overhead_pct / 100.0), uncertainty_pct)
    samples = simulate_wall_hours(compute_hours, terms, runs=runs)
    sigma = speed_sigma(uncertainty_pct)
    if sigma:
        samples = samples * _speed_errors(sigma, runs)
    low, high = _order_statistics(samples, (LOW_Q, HIGH_Q))
    return (low, high)


def uncertainty_for_band(band_pct: float) -> float:
    """The ``uncertainty_pct`` whose P10-P90 band reaches ``band_pct`` percent either side: the inverse of
    :func:`hours_range`'s width, for a band set from the errors it must contain (speed_model.toml's
    per-regime uncertainty, ``tests/benchmarks/planner_accuracy.py``)."""
    sigma = math.log1p(band_pct / 100.0) / Z90
    return math.expm1(sigma * MEAN_ABS_NORMAL) * 100.0
