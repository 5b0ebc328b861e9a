"""A trial's spend is what its run really spent (issue 27 item 1): a trial that ended before its first step
(its start-up used its allowance) spent its start-up, not $0, and the search's total counts it; a trial with
steps counts the time after its last step too (its run_end totals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.sweep.lookback import run_spend

T0 = 1_763_900_000.0
PRICE = 36_000.0  # $ per GPU-hour: $10 a second


def rec(seq: int, t: float, kind: str, **fields: object) -> dict[str, object]:
    return {"v": 1, "seq": seq, "t": T0 + t, "kind": kind, **fields}


def test_a_trial_stopped_in_its_start_up_spent_its_start_up(tmp_path: Path) -> None:
    with open_db(tmp_path / "h.sqlite") as db:
        run = create_run(db, name="trial 0", gpu_count=1, price_usd_per_gpu_hour=PRICE)
        ingest_records(
            db,
            run,
            [
                rec(0, 0.0, "run_start", config={"price_per_gpu_hour": PRICE}),
                rec(1, 3.64, "run_end", status="budget_stop", exit_code=75, totals={
                    "elapsed_s": 3.64, "gpu_hours": 3.64 / 3600, "spend_usd": 36.4}),
            ],
        )  # fmt: skip
        usd, gpu_hours, step = run_spend(db, run)
    assert (usd, step) == (pytest.approx(36.4), 0)
    assert gpu_hours == pytest.approx(3.64 / 3600)


def test_the_time_after_the_last_step_counts_too(tmp_path: Path) -> None:
    with open_db(tmp_path / "h.sqlite") as db:
        run = create_run(db, name="trial 1", gpu_count=1, price_usd_per_gpu_hour=PRICE)
        ingest_records(
            db,
            run,
            [
                rec(0, 0.0, "run_start", config={"price_per_gpu_hour": PRICE}),
                rec(1, 2.0, "step", step=1, loss=1.0, tokens_total=64, samples_total=1, step_time_s=1.0, spend_usd=20.0),
                rec(2, 5.0, "run_end", status="finished", exit_code=0, totals={
                    "elapsed_s": 5.0, "gpu_hours": 5.0 / 3600, "spend_usd": 50.0}),
            ],
        )  # fmt: skip
        usd, _, step = run_spend(db, run)
        assert (usd, step) == (pytest.approx(50.0), 1)
        unpriced = create_run(db, name="trial 2", gpu_count=1)
        ingest_records(db, unpriced, [rec(0, 0.0, "run_start", config={}), rec(1, 1.0, "run_end", status="failed")])
        assert run_spend(db, unpriced)[0] is None  # no price: unknown, not $0
