"""The History pane over runs ingested into a temp database: numbers, filter, sort, compare, export, delete."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run, list_runs
from gpuplanner.ui.history.history_model import EXPORT_COLUMNS, SORT_ROLE
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.widgets.report_pdf import MARGIN_MM
from tests.history.streams import StreamBuilder, hand_computed_run
from tests.ui.helpers import wait_for_history
from tests.ui.pdf_check import missing_words, outside, overlaps, read_words


def preempted_run() -> StreamBuilder:
    """2 GPUs for 30 minutes with a checkpoint, a preemption and a resume; 90% utilisation."""
    s = StreamBuilder(t0=1_763_900_000.0)
    s.add("run_start", 0.0, config={"model_name": "llama-3.2-1b"}, host="spot1", gpus=2, resumed_from_step=None)
    for i in range(30):
        for g in range(2):
            s.gpu(i * 60.0 + 1.0, g, 90.0)
        s.step(i * 60.0 + 2.0, i * 10, samples_total=i * 100, tokens_total=i * 100 * 1024)
        if i == 10:
            s.add("checkpoint", i * 60.0 + 3.0, step=100, path="/ckpt/100", bytes=1000, seconds=2.0)
        if i == 15:
            s.add("preempted", i * 60.0 + 4.0, step=150)
            s.add("resumed", i * 60.0 + 30.0, step=100)
    s.add("run_end", 1800.0, status="failed", totals={})
    return s


def make_runs(db_path: Path) -> dict[str, int]:
    db = open_db(db_path)
    try:
        a = create_run(
            db,
            name="eight-gpu",
            host="h1",
            gpu_type="H100 SXM",
            gpu_count=8,
            price_usd_per_gpu_hour=8.0,
            model_name="gpt2",
            planned={"hours": 1.0, "cost_usd": 64.0},
        )
        ingest_records(db, a, hand_computed_run().records)
        b = create_run(
            db,
            name="spot-two",
            host="spot1",
            gpu_type="A100 80GB",
            gpu_count=2,
            price_usd_per_gpu_hour=1.5,
            pricing="spot",
            model_name="llama-3.2-1b",
        )
        ingest_records(db, b, preempted_run().records)
    finally:
        db.close()
    return {"eight": a, "spot": b}


@pytest.fixture
def runs(services: Any) -> dict[str, int]:
    return make_runs(services.db_path)


@pytest.fixture
def pane(qtbot: Any, services: Any, runs: dict[str, int]) -> Any:
    widget = HistoryPane(services)
    qtbot.addWidget(widget)
    widget.resize(1160, 760)
    widget.show()
    wait_for_history(qtbot, widget)
    yield widget
    widget.shutdown()


def cell(pane: HistoryPane, run_id: int, name: str) -> str:
    for row in range(pane.proxy.rowCount()):
        if pane.proxy.index(row, 0).data() == str(run_id):
            return pane.proxy.index(row, EXPORT_COLUMNS.index(name)).data()
    raise AssertionError(f"run {run_id} not shown")


def test_empty_history_says_so(qtbot: Any, services: Any) -> None:
    widget = HistoryPane(services)
    qtbot.addWidget(widget)
    widget.show()
    wait_for_history(qtbot, widget)
    assert widget.proxy.rowCount() == 0
    assert widget.empty_label.isVisibleTo(widget)
    assert widget.empty_label.text().startswith("No runs yet")
    assert not services.db_path.exists(), "looking at an empty history creates no database"
    widget.shutdown()


def test_runs_show_the_history_numbers(pane: HistoryPane, services: Any, runs: dict[str, int]) -> None:
    assert pane.proxy.rowCount() == 2
    assert not pane.empty_label.isVisibleTo(pane)
    eight = runs["eight"]
    # the example: 8 GPUs for 1.25 h at $8 = $80, 60% utilisation, $13.33 per effective GPU-hour
    assert cell(pane, eight, "hours") == "1 h 15 min"
    assert cell(pane, eight, "cost_usd") == "80.00"
    assert cell(pane, eight, "avg_util_pct") == "60"
    assert cell(pane, eight, "cost_per_effective_gpu_hour_usd") == "13.33"
    assert cell(pane, eight, "cost_vs_plan_pct") == "+25.0%"
    assert cell(pane, eight, "gpu") == "8 x H100 SXM"
    db = open_db(services.db_path)
    try:
        spot = summarize(db, runs["spot"])
    finally:
        db.close()
    assert cell(pane, runs["spot"], "status") == "failed"
    assert cell(pane, runs["spot"], "cost_usd") == f"{spot.cost_usd:,.2f}"


def test_filter_by_text_and_status(pane: HistoryPane, runs: dict[str, int]) -> None:
    pane.set_filter("llama")
    assert pane.proxy.rowCount() == 1 and pane.proxy.index(0, 0).data() == str(runs["spot"])
    pane.set_filter("", "finished")
    assert pane.proxy.rowCount() == 1 and pane.proxy.index(0, 0).data() == str(runs["eight"])
    pane.set_filter("nothing like this")
    assert pane.proxy.rowCount() == 0
    pane.set_filter("")
    assert pane.proxy.rowCount() == 2


def test_sorts_by_cost(pane: HistoryPane) -> None:
    col = EXPORT_COLUMNS.index("cost_usd")
    pane.table.sortByColumn(col, Qt.SortOrder.AscendingOrder)
    values = [pane.proxy.index(r, col).data(SORT_ROLE) for r in range(pane.proxy.rowCount())]
    assert values == sorted(values)
    pane.table.sortByColumn(col, Qt.SortOrder.DescendingOrder)
    values = [pane.proxy.index(r, col).data(SORT_ROLE) for r in range(pane.proxy.rowCount())]
    assert values == sorted(values, reverse=True)


def test_detail_shows_plots_and_events(qtbot: Any, pane: HistoryPane, runs: dict[str, int]) -> None:
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([runs["spot"]])
    assert pane.selected_run_ids() == [runs["spot"]]
    assert "Run " + str(runs["spot"]) in pane.summary_view.toPlainText()
    kinds = [pane.events_table.item(r, 2).text() for r in range(pane.events_table.rowCount())]
    assert kinds == ["run_start", "checkpoint", "preempted", "resumed", "run_end"]
    util_curves = pane.plots.plots["util"].listDataItems()
    assert len(util_curves) == 2
    markers = [i for i in pane.plots.plots["loss"].items if type(i).__name__ == "InfiniteLine"]
    assert len(markers) == 4  # checkpoint, preempted, resumed, and where the run failed (its run_end)
    assert "failed" in pane.plots.key_text
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([runs["eight"]])
    assert len(pane.plots.plots["util"].listDataItems()) == 8
    assert "Planned against actual" in pane.summary_view.toHtml()


def test_compare_runs_side_by_side(pane: HistoryPane, runs: dict[str, int], services: Any) -> None:
    pane.select_runs([runs["eight"], runs["spot"]])
    assert pane.detail_tabs.currentWidget() is pane.compare_table
    table = pane.compare_table
    assert table.columnCount() == 2
    labels = [table.verticalHeaderItem(r).text() for r in range(table.rowCount())]
    cost_row = labels.index("Cost $")
    headers = [table.horizontalHeaderItem(c).text() for c in range(2)]
    col = headers.index(f"Run {runs['eight']}")
    assert table.item(cost_row, col).text() == "80.00"
    shown = {labels[r]: [table.item(r, c).text() for c in range(2)] for r in range(len(labels))}
    assert "Hours" not in shown and all("min" in t or " h" in t for t in shown["Time held"])  # no "Hours: 2 min"
    assert not any("_" in t for t in shown["Pricing"])  # "on-demand", not "on_demand"
    # differences stand out: the cheaper run's cost is marked best, the dearer worst; equal rows stay plain
    costs = [float(table.item(cost_row, c).text().replace(",", "")) for c in range(2)]
    marks = [table.item(cost_row, c).toolTip() for c in range(2)]
    assert costs[0] != costs[1] and marks[costs.index(min(costs))] == "the best of the runs compared"
    assert marks[costs.index(max(costs))] == "the worst of the runs compared"
    for r in range(table.rowCount()):
        same = table.item(r, 0).text() == table.item(r, 1).text()
        assert same == (table.item(r, 0).toolTip() == "" == table.item(r, 1).toolTip()), labels[r]


def test_compare_cells_share_one_precision_per_metric() -> None:
    from gpuplanner.ui.history.compare_marks import same_precision

    assert same_precision([0.02, 0.0298], ["0.02", "0.0298"]) == ["0.0200", "0.0298"]
    assert same_precision([80.0, 3.5], ["80.00", "3.50"]) == ["80.00", "3.50"]
    assert same_precision([1.5, None], ["1.50", "–"]) == ["1.50", "–"]  # a missing figure: as shown
    assert same_precision([0.5, 0.25], ["30 min", "15 min"]) == ["30 min", "15 min"]  # durations stay words


def test_compare_marks_follow_each_metric_direction() -> None:
    from gpuplanner.ui.history.compare_marks import compare_marks

    attrs = ["cost_usd", "tokens_per_s", "host", "gpu_count", "final_loss"]
    rows = [[80.0, 40.0, 60.0], [1e4, 3e4, 2e4], ["a", "b", "a"], [8, 8, 8], [2.0, None, 1.5]]
    texts = [[str(v) for v in row] for row in rows]
    assert compare_marks(attrs, rows, texts) == [
        ["worst", "best", "differs"],  # lower cost is better
        ["worst", "best", "differs"],  # more tokens/s is better
        ["differs"] * 3,  # no direction: marked as a difference
        ["", "", ""],  # the same in every run
        ["differs"] * 3,  # a run without the figure: no best/worst
    ]


def test_export_csv_markdown_pdf(
    pane: HistoryPane, runs: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pane.export_table(tmp_path / "runs.csv", "csv")
    rows = list(csv.reader(io.StringIO((tmp_path / "runs.csv").read_text())))
    assert rows[0] == list(EXPORT_COLUMNS)
    assert len(rows) == 3
    by_id = {int(r[0]): r for r in rows[1:]}
    assert float(by_id[runs["eight"]][EXPORT_COLUMNS.index("cost_usd")]) == pytest.approx(80.0)

    pane.select_runs([runs["eight"], runs["spot"]])
    # one table per CSV file: the comparison goes beside the runs, and pandas reads both
    written = pane.export_table(tmp_path / "both.csv", "csv")
    assert written == [tmp_path / "both.csv", tmp_path / "both-compared.csv"]
    pandas = pytest.importorskip("pandas")
    assert list(pandas.read_csv(written[0]).columns) == list(EXPORT_COLUMNS)
    compared = pandas.read_csv(written[1])
    assert list(compared.columns)[0] == "metric" and len(compared.columns) == 3
    pane.export_table(tmp_path / "runs.md", "markdown")
    text = (tmp_path / "runs.md").read_text()
    # numbers as the Compare tab shows them, not 0.026996974349
    assert not re.search(r"\.\d{7,}", text.split("## Compared side by side")[1])
    assert "| " + " | ".join(EXPORT_COLUMNS) + " |" in text
    assert "## Compared side by side" in text
    assert (
        f"| metric | Run {runs['eight']} | Run {runs['spot']} |" in text
        or f"| metric | Run {runs['spot']} | Run {runs['eight']} |" in text
    )

    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "report"), ""))
    pane.select_runs([runs["eight"]])
    said: list[str] = []
    pane.exported.connect(said.append)
    path = pane.export_dialog("pdf")
    assert path == str(tmp_path / "report.pdf")
    assert said == [f"Saved {path}"]  # the status bar says where it went
    pages = read_words(Path(path))
    assert len(pages.sizes) == 1
    assert overlaps(pages) == []
    assert outside(pages, MARGIN_MM / 25.4 * 72) == []
    exported = {row[0] for row in pane.export_rows()[1]}  # the selected runs (or all shown)
    shown = [  # the runs as the History table shows them (hours "1 h 15 min", +6.6%, statuses in words)
        [pane.proxy.index(r, c).data() for c in range(len(EXPORT_COLUMNS))]
        for r in range(pane.proxy.rowCount())
        if int(pane.proxy.index(r, 0).data()) in exported
    ]
    assert not missing_words(pages, [text for row in shown for text in row if text])
    assert not any("…" in word for word in pages.texts())


def test_delete_asks_first(
    qtbot: Any, pane: HistoryPane, runs: dict[str, int], services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pane.select_runs([runs["spot"]])
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    pane.delete_button.click()
    assert pane.proxy.rowCount() == 2
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(pane.runsChanged, timeout=10_000):
        pane.delete_button.click()
    assert pane.proxy.rowCount() == 1
    db = open_db(services.db_path)
    try:
        assert [r.id for r in list_runs(db)] == [runs["eight"]]
    finally:
        db.close()


def test_run_finished_refreshes_and_selects(qtbot: Any, pane: HistoryPane, services: Any) -> None:
    db = open_db(services.db_path)
    try:
        new = create_run(db, name="just-ended", gpu_type="L4", gpu_count=1, price_usd_per_gpu_hour=0.8)
    finally:
        db.close()
    with qtbot.waitSignal(pane.runsChanged, timeout=10_000):
        pane.on_run_finished(new)
    assert pane.proxy.rowCount() == 3
    assert pane.selected_run_ids() == [new]


def test_runs_model_follows_the_model_view_rules(qtmodeltester: Any, pane: HistoryPane) -> None:
    qtmodeltester.check(pane.model)
    qtmodeltester.check(pane.proxy)


def test_loads_run_on_a_worker_and_stale_answers_are_dropped(
    qtbot: Any, pane: HistoryPane, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from gpuplanner.ui.history import history_pane as module

    threads: list[str] = []
    real = module.load_summaries

    def recording(path: Path, *settings: Any) -> Any:  # settings: the window's alert settings
        threads.append(threading.current_thread().name)
        return real(path, *settings)

    monkeypatch.setattr(module, "load_summaries", recording)
    shown: list[int] = []
    pane.runsChanged.connect(lambda: shown.append(pane.proxy.rowCount()))
    pane.refresh()
    pane.refresh()
    pane.refresh()
    wait_for_history(qtbot, pane)
    assert threads and threading.main_thread().name not in threads
    assert shown == [2], "only the newest of three loads reaches the table"
