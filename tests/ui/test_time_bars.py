"""The time breakdown drawn: stacked bars whose segments follow the phases, a legend with shares and
dollars, the History pane's bar per run and sum over runs, and the Runs pane's bar for a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QListWidgetItem

from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.history.time_breakdown import NOT_RECORDED, from_dict
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.widgets.time_bars import COLORS, TimeBars
from tests.history.test_time_breakdown import old_run, resumed_run
from tests.ui.helpers import wait_for_history


def make_runs(db_path: Path) -> dict[str, int]:
    with open_db(db_path) as db:
        new = create_run(db, name="resumed", gpu_count=2, price_usd_per_gpu_hour=3.0)
        ingest_records(db, new, resumed_run().records)
        old = create_run(db, name="old", gpu_count=1, price_usd_per_gpu_hour=2.0)
        ingest_records(db, old, old_run().records)
    return {"new": new, "old": old}


def breakdown_of(db_path: Path, run_id: int) -> Any:
    with open_db(db_path) as db:
        return from_dict(summarize(db, run_id).time_breakdown)


def test_the_bar_shows_each_phase_in_proportion_with_its_numbers(qtbot: Any, tmp_path: Path) -> None:
    db_path = tmp_path / "h.sqlite"
    ids = make_runs(db_path)
    widget = TimeBars()
    qtbot.addWidget(widget)
    widget.resize(700, 200)
    widget.show()
    widget.set_bars([("#1 resumed", breakdown_of(db_path, ids["new"]))])
    (bar,) = widget.bars
    qtbot.waitUntil(lambda: bar.width() > 100)
    segments = bar.segments()
    assert [phase for phase, _ in segments] == ["startup", "data", "train", "checkpoint", "eval", "idle_after"]
    widths = {phase: rect.width() / bar.width() for phase, rect in segments}
    assert widths["startup"] == pytest.approx(132 / 660) and widths["train"] == pytest.approx(358 / 660)
    assert widget.legend_texts[0] == "start-up and model load 20% of spend, $0.22 (2 min)"
    assert "idle after the job 9% of spend, $0.10 (1 min)" in widget.legend_texts
    # hovering a segment names it (its tooltip is that phase's text)
    assert bar.phase_at(bar.width() * 0.5) == "train" and bar.phase_at(bar.width() * 0.1) == "startup"
    # what is on screen: the start-up segment is painted in its colour
    image = bar.grab().toImage()
    x = int(segments[0][1].center().x() / 2)
    assert image.pixelColor(x, 2) == QColor(COLORS["startup"])
    # an old run: one grey bar that says so, and no legend entries
    widget.set_bars([("#2 old", breakdown_of(db_path, ids["old"]))])
    assert widget.bars[0].segments() == [] and widget.legend_texts == []
    assert NOT_RECORDED in widget.legend.text()


def test_history_shows_a_bar_per_run_and_the_sum(qtbot: Any, services: Any) -> None:
    ids = make_runs(services.db_path)
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    titles = lambda: [title for title, _ in pane.time_bar_rows()[0]]  # noqa: E731
    assert titles() == ["All 2 runs"]
    assert len(pane.time_bars.bars) == 1
    assert pane.time_bars.legend_texts[0] == "start-up and model load 20% of spend, $0.22 (2 min)"
    legend = pane.time_bars.legend.text()
    assert "20% of spend, $0.22 (2 min)" in legend and "1 of 2 runs not recorded" in legend
    pane.select_runs([ids["new"]])
    assert titles() == ["#1 resumed", "All 2 runs"]
    legend = pane.time_bars.legend.text()  # a column for the run and one for the sum
    assert "#1 resumed: $1.10" in legend and "All 2 runs: $1.10" in legend
    assert "Where the billed time went" in pane.summary_view.toHtml()
    assert "start-up and model load 20% of spend, $0.22" in pane.summary_view.toPlainText()
    pane.select_runs([ids["new"], ids["old"]])
    rows = pane.time_bar_rows()[0]
    assert sorted(title for title, _ in rows[:2]) == ["#1 resumed", "#2 old"] and rows[2][0] == "Selected 2 runs"
    drawn = {title: len(bar.segments()) > 0 for (title, _), bar in zip(rows, pane.time_bars.bars)}
    assert drawn == {"#1 resumed": True, "#2 old": False, "Selected 2 runs": True}
    pane.select_runs([ids["old"]])
    assert NOT_RECORDED in pane.summary_view.toPlainText()
    pane.select_runs([])
    pane.set_filter("old")
    assert titles() == ["The run shown"]
    pane.shutdown()


def test_the_runs_pane_shows_the_run_s_bar(runs_pane: Any, tmp_path: Path) -> None:
    from gpuplanner.ui.runs.run_entry import RunEntry
    from gpuplanner.ui.runs.run_telemetry import RunTelemetry

    db_path = tmp_path / "other.sqlite"
    ids = make_runs(db_path)
    entry = RunEntry(1, RunTelemetry(1), "resumed", "local", QListWidgetItem(), state="finished")
    runs_pane._update_time_bars(entry)
    assert not runs_pane.time_bars.isVisible()  # nothing read from the history yet
    entry.time_breakdown = breakdown_of(db_path, ids["new"])
    runs_pane._update_time_bars(entry)
    assert runs_pane.time_bars.isVisible()
    assert runs_pane.time_bars.legend_texts[0] == "start-up and model load 20% of spend, $0.22 (2 min)"


def test_the_history_report_says_where_the_money_went(qtbot: Any, services: Any, tmp_path: Path) -> None:
    from gpuplanner.ui.widgets.report_pdf import MARGIN_MM
    from tests.ui.pdf_check import missing_words, outside, overlaps, read_words

    make_runs(services.db_path)
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    pane.export_pdf(tmp_path / "report.pdf")
    pages = read_words(tmp_path / "report.pdf")
    assert overlaps(pages) == [] and outside(pages, MARGIN_MM / 25.4 * 72) == []
    assert not missing_words(pages, ["Where", "billed", "start-up", "model", "load", "20%", "$0.22", "idle"])
    pane.shutdown()


def test_without_a_price_the_shares_are_of_the_time(qtbot: Any) -> None:
    from gpuplanner.history.time_breakdown import breakdown_from_phases

    free = breakdown_from_phases(
        {"startup": 30.0, "train": 90.0}, billed_s=120.0, idle_after_s=0.0, gpus=1, price_usd_per_gpu_hour=0.0
    )
    widget = TimeBars(compact=True)
    qtbot.addWidget(widget)
    widget.set_bars([("demo", free)])
    assert widget.legend_texts == ["start-up and model load 25% of the time (30 s)", "training 75% of the time (2 min)"]
