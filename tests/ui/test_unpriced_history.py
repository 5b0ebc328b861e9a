"""History shows a run without a price as "no price" (table, details, report), never $0 or
$0/effective GPU-hour, and its totals count it as unpriced. The real pane over a real SQLite file."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_model import EXPORT_COLUMNS
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.history.history_summary import summary_html
from tests.history.streams import StreamBuilder
from tests.ui.helpers import wait_for_history


def one_hour_run(price_in_config: float | None) -> StreamBuilder:
    """2 GPUs for one hour at 50% utilisation, as the trainer writes it for a host without a price."""
    s = StreamBuilder(t0=1_763_900_000.0)
    config = {"model_name": "gpt2", "price_per_gpu_hour": price_in_config}
    s.add("run_start", 0.0, config=config, host="box", gpus=2, resumed_from_step=None)
    for i in range(7):
        for g in range(2):
            s.gpu(i * 600.0, g, 50.0)
    s.step(3599.0, 10, samples_total=1000, tokens_total=1000 * 256)
    s.add("run_end", 3600.0, status="finished", totals={})
    return s


@pytest.fixture(params=[0.0, None], ids=["older-trainer-0.0", "null"])
def runs(request: pytest.FixtureRequest, services: Any) -> dict[str, int]:
    db = open_db(services.db_path)
    try:
        free = create_run(db, name="free", host="box", gpu_count=2)  # launched on a host without a price
        ingest_records(db, free, one_hour_run(request.param).records)
        paid = create_run(db, name="paid", host="cloud", gpu_count=2, price_usd_per_gpu_hour=3.0)
        ingest_records(db, paid, one_hour_run(3.0).records)
    finally:
        db.close()
    return {"free": free, "paid": paid}


@pytest.fixture
def pane(qtbot: Any, services: Any, runs: dict[str, int]) -> Any:
    widget = HistoryPane(services)
    qtbot.addWidget(widget)
    widget.resize(1160, 760)
    widget.show()
    wait_for_history(qtbot, widget)
    yield widget
    widget.shutdown()


def row_texts(pane: HistoryPane, run_id: int) -> dict[str, str]:
    for row in range(pane.proxy.rowCount()):
        if pane.proxy.index(row, 0).data() == str(run_id):
            return {name: pane.proxy.index(row, c).data() for c, name in enumerate(EXPORT_COLUMNS)}
    raise AssertionError(f"run {run_id} not shown")


def test_the_table_says_no_price_and_the_priced_run_keeps_its_dollars(pane: HistoryPane, runs: dict[str, int]) -> None:
    free, paid = row_texts(pane, runs["free"]), row_texts(pane, runs["paid"])
    assert free["cost_usd"] == "no price" and free["cost_per_effective_gpu_hour_usd"] == "no price"
    assert paid["cost_usd"] == "6.00" and paid["cost_per_effective_gpu_hour_usd"] == "6.00"  # $3 x 2 GPUs x 1 h


def test_details_and_report_say_no_price_and_count_the_unpriced_run(pane: HistoryPane, runs: dict[str, int]) -> None:
    summary = pane._summary(runs["free"])
    assert summary is not None and summary.cost_usd is None and summary.price_usd_per_gpu_hour is None
    html = summary_html(summary)
    assert "no price" in html and "$0" not in html
    for label in ("Cost", "Cost per effective GPU-hour", "Cost per sample", "Cost per 1M tokens"):
        assert f"{label}</td><td>no price</td>" in html
    pane.select_runs([runs["free"], runs["paid"]])
    report = pane.report()
    texts = [block[1][0] for block in report.blocks if block[0] == "text"]
    totals = next(text for text in texts if "in total" in text)
    assert totals.startswith("2 runs, 4.0 GPU-hours, $6.00 in total (1 without a price, not in it)")
    columns, rows, _, _ = next(block[1] for block in report.blocks if block[0] == "table")
    cost = {row[0]: row[columns.index("Cost $")] for row in rows}
    assert cost == {str(runs["free"]): "no price", str(runs["paid"]): "6.00"}


def test_the_compare_tab_says_no_price(pane: HistoryPane, runs: dict[str, int]) -> None:
    pane.show_compare([runs["free"], runs["paid"]])
    table = pane.compare_table
    labels = [table.verticalHeaderItem(r).text() for r in range(table.rowCount())]
    for label, expected in (("Cost $", ["no price", "6.00"]), ("$/GPU-hour", ["no price", "3.00"])):
        row = labels.index(label)
        assert [table.item(row, c).text() for c in range(2)] == expected
