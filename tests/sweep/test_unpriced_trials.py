"""A search's look-back with a trial whose run has no price: its spend is unknown (JSON null, "no price"),
never $0, and the search's spent figure counts it in ``unpriced_trials``. Real SQLite runs, hand-made
trial rows for the words."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.commands.sweep_show import summary_lines
from gpuplanner.history import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.sweep.lookback import SearchReview, TrialRow, run_spend, trial_table
from gpuplanner.ui.sweep.sweep_text import trial_cells
from tests.history.streams import StreamBuilder


def steps_run(spends: list[float | None]) -> StreamBuilder:
    s = StreamBuilder()
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, host="box", gpus=1, resumed_from_step=None)
    for i, spend in enumerate(spends):
        s.step(60.0 * (i + 1), i + 1, samples_total=10 * (i + 1), tokens_total=640 * (i + 1), spend_usd=spend)
    return s


def test_run_spend_is_unknown_without_a_price(tmp_path: Path) -> None:
    with open_db(tmp_path / "h.sqlite") as db:
        free = create_run(db, name="free", gpu_count=2)
        ingest_records(db, free, steps_run([None, None, None]).records)
        paid = create_run(db, name="paid", gpu_count=1, price_usd_per_gpu_hour=3.0)
        ingest_records(db, paid, steps_run([0.05, 0.1, 0.15]).records)
        empty = create_run(db, name="not started", gpu_count=1)
        assert run_spend(db, free) == (None, pytest.approx(2 * 120.0 / 3600.0), 3)  # GPUs x time, no dollars
        assert run_spend(db, paid) == (pytest.approx(0.15), pytest.approx(0.05), 3)  # $0.15 at $3 = 0.05 GPU-h
        assert run_spend(db, empty) == (None, 0.0, 0)


def row(number: int, run_id: int | None, spend: float | None) -> TrialRow:
    return TrialRow(number, "complete", "complete", "finished", run_id, "box", {"lr": 0.1}, 1.0 + number, 1.0, 6,
                    spend, 0.01, 0.0, 1.0)  # fmt: skip


def review(rows: list[TrialRow]) -> SearchReview:
    counts = {"trials": len(rows), "finished": len(rows), "pruned": 0, "stopped": 0, "failed": 0, "running": 0}
    return SearchReview("s", "eval_loss", "done", None, 1.0, {}, rows, [], [], rows[0], None, counts)


def test_the_look_back_says_no_price_and_counts_the_trial() -> None:
    mixed = review([row(0, 10, 0.25), row(1, 11, None), row(2, None, 0.0)])  # trial 2 never ran
    assert (mixed.spent_usd, mixed.unpriced_trials, mixed.unpriced) == (0.25, 1, False)
    doc = mixed.document()
    assert doc["unpriced_trials"] == 1 and [t["spend_usd"] for t in doc["trials"]] == [0.25, None, 0.0]
    assert "spent $0.2500 (1 trial(s) without a price, not in it)" in summary_lines(mixed)[1]
    assert [trial_cells(r)[6] for r in trial_table(mixed)] == ["$0.25", "no price", "$0.00"]

    unpriced = review([row(0, 10, None), row(1, 11, None)])
    assert unpriced.unpriced and unpriced.spent_usd == 0.0
    assert summary_lines(unpriced)[1].startswith("spent no price, ")
    assert "cost no price" in "\n".join(summary_lines(unpriced))
