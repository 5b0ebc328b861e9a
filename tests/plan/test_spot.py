"""Spot model: closed forms against hand-computed cases, and the Monte Carlo against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuplanner.plan.setup import PlanInputError
from gpuplanner.plan.spot import SpotTerms, estimate_spot, simulate_wall_hours


def test_flat_overhead_is_a_percentage_of_wall_time() -> None:
    estimate = estimate_spot(10.0, SpotTerms(0.0, overhead_pct=10.0), deadline_hours=10.5)
    assert estimate.model == "flat overhead"
    assert estimate.hours == pytest.approx(11.0)
    assert estimate.overhead_hours == pytest.approx(1.0)
    assert estimate.p50_hours == estimate.p90_hours == pytest.approx(11.0)
    assert estimate.p_meet_deadline == 0.0


def test_notice_long_enough_means_no_lost_work() -> None:
    # 0.1 interruptions/h over 10 h of work: 1 expected; each costs a 10 min restart and a 36 s stop checkpoint.
    terms = SpotTerms(
        0.1, restart_hours=10 / 60, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.01, notice_s=120
    )
    assert terms.graceful_stop
    estimate = estimate_spot(10.0, terms)
    work = 10.0 * (1 + 0.01 / 0.5)  # 20 periodic checkpoints of 36 s each
    assert estimate.expected_interruptions == pytest.approx(0.1 * work)
    assert estimate.hours == pytest.approx(work + 0.1 * work * (10 / 60 + 0.01))
    assert estimate.lost_work_hours == pytest.approx(0.0, abs=1e-9)
    assert estimate.checkpoint_hours == pytest.approx(0.2 + 0.1 * work * 0.01)


def test_short_notice_loses_work_since_the_last_checkpoint() -> None:
    # Two one-hour segments, 0.2 interruptions/h, free restarts: each segment takes (e^0.2 - 1) / 0.2 hours.
    terms = SpotTerms(0.2, restart_hours=0.0, checkpoint_interval_hours=1.0, notice_s=30, checkpoint_write_hours=0.1)
    assert not terms.graceful_stop  # a 6 minute write does not fit in a 30 s notice
    terms = SpotTerms(0.2, restart_hours=0.0, checkpoint_interval_hours=1.0, notice_s=None)
    estimate = estimate_spot(2.0, terms)
    assert estimate.hours == pytest.approx(2 * math.expm1(0.2) / 0.2)
    assert estimate.expected_interruptions == pytest.approx(2 * math.expm1(0.2))
    # For rare interruptions each one loses about half a checkpoint interval.
    rare = estimate_spot(100.0, SpotTerms(0.001, restart_hours=0.0, checkpoint_interval_hours=1.0))
    assert rare.lost_work_hours / rare.expected_interruptions == pytest.approx(0.5, rel=1e-3)


@pytest.mark.parametrize(
    "terms",
    [
        SpotTerms(0.1, restart_hours=1 / 6, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.01, notice_s=30),
        SpotTerms(0.1, restart_hours=1 / 6, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.001, notice_s=120),
        SpotTerms(3.0, restart_hours=1 / 6, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.01),
    ],
)
def test_monte_carlo_mean_matches_the_closed_form(terms: SpotTerms) -> None:
    expected = estimate_spot(10.0, terms).hours
    simulated = simulate_wall_hours(10.0, terms, runs=40_000)
    assert simulated.mean() == pytest.approx(expected, rel=0.01)


def test_monte_carlo_is_reproducible_and_ordered() -> None:
    terms = SpotTerms(0.3, checkpoint_interval_hours=0.5)
    first = estimate_spot(20.0, terms, deadline_hours=22.0)
    second = estimate_spot(20.0, terms, deadline_hours=22.0)
    assert first == second
    assert 20.0 <= first.p50_hours <= first.p90_hours
    later = estimate_spot(20.0, terms, deadline_hours=30.0)
    assert first.p_meet_deadline is not None and later.p_meet_deadline is not None
    assert later.p_meet_deadline >= first.p_meet_deadline


def test_one_history_serves_every_work_size() -> None:
    terms = SpotTerms(0.5, checkpoint_interval_hours=0.25)
    small, large = simulate_wall_hours(1.0, terms), simulate_wall_hours(50.0, terms)
    assert np.all(large >= small)
    assert np.all(small >= 1.0)


def test_interruptions_faster_than_checkpoints_never_finish() -> None:
    estimate = estimate_spot(10.0, SpotTerms(800.0, checkpoint_interval_hours=1.0))
    assert not estimate.finishes
    assert math.isinf(estimate.hours)


def test_no_interruptions_is_the_work_itself() -> None:
    estimate = estimate_spot(5.0, SpotTerms(0.0, checkpoint_interval_hours=1.0, checkpoint_write_hours=0.05))
    assert estimate.hours == pytest.approx(5.25)
    assert estimate.p90_hours == pytest.approx(5.25)


@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("interruptions-per-hour", {"interruptions_per_hour": -1.0}),
        ("checkpoint-minutes", {"interruptions_per_hour": 0.1, "checkpoint_interval_hours": 0.0}),
        ("spot-overhead-pct", {"interruptions_per_hour": 0.1, "overhead_pct": -5.0}),
    ],
)
def test_bad_terms_name_the_flag(field: str, kwargs: dict) -> None:
    with pytest.raises(PlanInputError) as info:
        SpotTerms(**kwargs)
    assert info.value.field == field


def test_a_vanishing_interruption_rate_is_no_interruption() -> None:
    estimate = estimate_spot(2.0, SpotTerms(1e-308, checkpoint_interval_hours=1 / 60))
    assert estimate.p90_hours == pytest.approx(2.0)
    assert estimate.hours == pytest.approx(2.0)


def _reference_wall_hours(rate, per_interruption, segment, lose_work, runs, seed, work, columns=4096):
    """Each simulated run replayed interruption by interruption with the same draws."""
    from gpuplanner.plan.spot import MAX_INTERRUPTIONS

    gaps = np.random.default_rng(seed).standard_exponential((columns, runs)).T / rate
    out = []
    for row in gaps:
        progress = wall = 0.0
        for k in range(MAX_INTERRUPTIONS):
            if progress + row[k] >= work:
                out.append(wall + work - progress)
                break
            wall += row[k] + per_interruption
            reached = progress + row[k]
            progress = math.floor(reached / segment) * segment if lose_work else reached
        else:
            out.append(math.inf)
    return np.array(out)


@pytest.mark.parametrize(
    ("rate", "segment", "lose_work", "work"),
    [
        (0.03, 0.5, True, 23.5),  # a few interruptions: the first 8 columns answer
        (0.5, 0.5, True, 40.0),  # many: the histories grow
        (2.0, 0.75, False, 30.0),  # graceful stops keep all work
        (6.0, 2.0, True, 3.0),  # hardly any run gets 2 h without a stop: some never finish
    ],
)
def test_simulated_wall_hours_match_a_run_by_run_replay(rate, segment, lose_work, work) -> None:
    from gpuplanner.plan.spot import _Simulation

    simulation = _Simulation(rate, 1 / 6, segment, lose_work, 60, 7)
    got = simulation.wall_hours(work)
    expected = _reference_wall_hours(rate, 1 / 6, segment, lose_work, 60, 7, work)
    assert np.array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-12)
    # the same simulation answers a smaller work size afterwards (no regrowth needed)
    np.testing.assert_allclose(
        simulation.wall_hours(work / 2),
        _reference_wall_hours(rate, 1 / 6, segment, lose_work, 60, 7, work / 2),
        rtol=1e-12,
    )


@pytest.mark.parametrize(
    "terms",
    [
        SpotTerms(0.2, restart_hours=1 / 6, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.01),
        SpotTerms(1.5, restart_hours=0.25, checkpoint_interval_hours=0.25, checkpoint_write_hours=0.02),
        SpotTerms(0.2, restart_hours=1 / 6, checkpoint_interval_hours=0.5, checkpoint_write_hours=0.01, notice_s=120),
    ],
)
def test_closed_form_moments_match_the_simulation(terms: SpotTerms) -> None:
    from gpuplanner.plan.spot import _Simulation, wall_hours_moments

    work = 60.0
    simulation = _Simulation(
        terms.interruptions_per_hour,
        terms.restart_hours + terms.stop_checkpoint_hours,
        terms.checkpoint_interval_hours + terms.checkpoint_write_hours,
        not terms.graceful_stop,
        40_000,
        11,
    )
    simulated = simulation.wall_hours(work)
    mean, var = wall_hours_moments(work, terms)
    assert mean == pytest.approx(simulated.mean(), rel=0.005)
    assert math.sqrt(var) == pytest.approx(simulated.std(), rel=0.03)


@pytest.mark.parametrize(("graceful", "compute"), [(False, 55.0), (True, 66.0)])
def test_long_jobs_use_the_closed_form_and_agree_with_the_simulation_at_the_switch(
    graceful: bool, compute: float
) -> None:
    """Just past the switch the normal approximation's P50/P90 are within 2% of the simulation's."""
    from gpuplanner.plan.spot import CLOSED_FORM_MIN_INTERRUPTIONS, _order_statistics, _Simulation

    terms = SpotTerms(0.5, restart_hours=1 / 6, checkpoint_interval_hours=0.5, notice_s=120 if graceful else None)
    estimate = estimate_spot(compute, terms)
    assert CLOSED_FORM_MIN_INTERRUPTIONS <= estimate.expected_interruptions < 1.2 * CLOSED_FORM_MIN_INTERRUPTIONS
    simulated = _Simulation(0.5, 1 / 6, 0.5, not graceful, 40_000, 3).wall_hours(compute)
    p50, p90 = _order_statistics(simulated, (0.5, 0.9))
    assert estimate.p50_hours == pytest.approx(p50, rel=0.02)
    assert estimate.p90_hours == pytest.approx(p90, rel=0.02)
    assert estimate.hours == pytest.approx(simulated.mean(), rel=0.01)


def test_a_very_long_job_is_estimated_without_simulating() -> None:
    from gpuplanner.plan import spot

    spot._simulation.cache_clear()
    estimate = estimate_spot(20_000.0, SpotTerms(0.1, checkpoint_interval_hours=0.5), deadline_hours=25_000.0)
    assert spot._simulation.cache_info().currsize == 0  # no history was simulated
    assert estimate.finishes and estimate.expected_interruptions == pytest.approx(2000, rel=0.05)
    assert estimate.hours < estimate.p90_hours < estimate.hours * 1.05
    assert estimate.p_meet_deadline == 1.0
