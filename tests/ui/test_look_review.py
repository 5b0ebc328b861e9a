"""What a look at every pane's screenshot found (issue 16's review): statuses in words, empty plots that say
so, run names that wrap in the Runs list instead of running off it."""

from __future__ import annotations

from typing import Any

from gpuplanner.app.run_status import describe_event, status_text
from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_model import EXPORT_COLUMNS
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.history.history_summary import summary_html
from gpuplanner.ui.runs.live_plots import NO_GPU_SAMPLES, NO_STEPS, LivePlots
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from tests.history.streams import StreamBuilder
from tests.ui.helpers import wait_for_history


def test_history_says_statuses_in_words_and_still_filters_by_them(qtbot: Any, services: Any) -> None:
    db = open_db(services.db_path)
    try:
        run_id = create_run(db, name="early", host="h", gpu_type="L4", gpu_count=1, price_usd_per_gpu_hour=1.0)
        s = StreamBuilder(t0=1_763_900_000.0)
        s.add("run_start", 0.0, config={"model_name": "gpt2"}, host="h", gpus=1, resumed_from_step=None)
        for i in range(5):
            s.gpu(i * 60.0 + 1.0, 0, 80.0)
            s.step(i * 60.0 + 2.0, i * 10, samples_total=i * 10, tokens_total=i * 1024)
        s.add("run_end", 300.0, status="early_stop", totals={})
        ingest_records(db, run_id, s.records)
    finally:
        db.close()
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    column = EXPORT_COLUMNS.index("status")
    assert pane.proxy.index(0, column).data() == "stopped early"
    items = [pane.status_combo.itemText(i) for i in range(pane.status_combo.count())]
    assert "stopped early" in items and "stopped at the budget" in items
    assert not any("_" in item for item in items), items
    pane.set_filter("", "early_stop")  # the filter keeps the history's name underneath
    assert pane.proxy.rowCount() == 1
    pane.set_filter("stopped early")  # and the text filter finds the words the table shows
    assert pane.proxy.rowCount() == 1
    summary = pane._summary(run_id)
    html = summary_html(summary)
    assert "stopped early" in html and "early_stop" not in html
    assert describe_event("run_end", {"status": "budget_stop"}) == "stopped at the budget"
    assert status_text("failed") == "failed" and status_text(None) == "–"
    pane.shutdown()


def test_empty_live_plots_say_what_is_missing(qtbot: Any) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 600)
    plots.show()
    tel = RunTelemetry(1)
    tel.price_per_gpu_hour = 2.0  # priced: the spend plot is empty for want of steps, not of a price
    tel.add_records([{"seq": 0, "t": 100.0, "kind": "run_start", "steps_total": 100}])
    plots.redraw(tel)
    shown = {key: label.textItem.toPlainText() for key, label in plots.empty_labels.items() if label.isVisible()}
    assert shown == {
        "util": NO_GPU_SAMPLES,
        "mem": NO_GPU_SAMPLES,
        "power": NO_GPU_SAMPLES,
        "tokens": NO_STEPS,
        "loss": NO_STEPS,
        "spend": NO_STEPS,
    }
    for key, label in plots.empty_labels.items():  # in the middle of its plot, where the eye looks
        view = plots.plots[key].getViewBox().rect()
        assert abs(label.pos().x() - view.center().x()) < 1 and abs(label.pos().y() - view.center().y()) < 1
    gpu = {"kind": "gpu", "node": "n", "index": 0, "util_pct": 50.0, "mem_used_bytes": 1 << 30, "power_w": 90.0}
    tel.add_records([{**gpu, "seq": 1, "t": 101.0}])
    plots.redraw()
    shown = {key for key, label in plots.empty_labels.items() if label.isVisible()}
    assert shown == {"tokens", "loss", "spend"}
    tel.add_records([{"seq": 2, "t": 102.0, "kind": "step", "step": 1, "loss": 2.0, "tokens_per_s": 1e3}])
    plots.redraw()
    assert not any(label.isVisible() for label in plots.empty_labels.values())


def test_unpriced_empty_spend_plot_shows_one_message(qtbot: Any) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 600)
    plots.show()
    tel = RunTelemetry(1)
    tel.add_records([{"seq": 0, "t": 100.0, "kind": "run_start", "steps_total": 100}])
    plots.redraw(tel)
    assert plots.no_price_label.isVisible()
    assert not plots.empty_labels["spend"].isVisible()  # not two texts on top of each other


def test_a_long_run_name_wraps_in_the_runs_list(qtbot: Any, runs_pane: Any) -> None:
    name = "tiny GPT-2, sequences of 512 tokens on the demo data"
    entry = runs_pane._add_entry(42, name, "local")
    qtbot.wait(50)
    view = runs_pane.run_list
    rect = view.visualItemRect(entry.item)
    assert not view.horizontalScrollBar().isVisible()
    assert rect.right() <= view.viewport().width(), (rect, view.viewport().width())
    assert rect.height() > 2 * view.fontMetrics().lineSpacing()  # the name took more than its one line
    assert name in entry.item.toolTip()
