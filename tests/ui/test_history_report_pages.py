"""History > Export > PDF over many runs: a heading never ends a page apart from what it heads (Qt's rich
text has no keep-with-next; ``report_pdf`` keeps a heading with the start of what follows it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_pane import HistoryPane
from tests.history.streams import StreamBuilder
from tests.ui.helpers import wait_for_history
from tests.ui.pdf_check import page_lines, read_words

HEADING = "Where the billed time went"


def five_minute_run() -> StreamBuilder:
    """One GPU for 5 minutes with its phases recorded (so the report has its time breakdown)."""
    s = StreamBuilder()
    a = {"phases_start": s.t0}
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, host="h1", gpus=1, resumed_from_step=None)
    for k in range(5):
        s.gpu(k * 60.0 + 1.0, 0, 70.0)
        phases = {"startup": 20.0, "data": 5.0 * k, "train": 40.0 * k}
        s.step(k * 60.0 + 2.0, k * 10, samples_total=k * 100, tokens_total=k * 100 * 512, phases=phases, **a)
    phases = {"startup": 20.0, "data": 30.0, "train": 230.0, "checkpoint": 20.0}
    s.add("run_end", 300.0, status="finished", totals={}, phases=phases, **a)
    return s


def test_the_time_breakdowns_heading_stays_with_its_table(qtbot: Any, services: Any, tmp_path: Path) -> None:
    # 56 runs fill the first page's table to its last lines: the heading fits below it, its table does not
    # (without the rule, page 1 ends with the heading; measured: 55 to 57 runs do it)
    db = open_db(services.db_path)
    try:
        for i in range(56):
            run = create_run(
                db, name=f"run-{i}", host="h1", gpu_type="A100 80GB", gpu_count=1, price_usd_per_gpu_hour=1.5
            )
            ingest_records(db, run, five_minute_run().records)
    finally:
        db.close()
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1160, 760)
    pane.show()
    wait_for_history(qtbot, pane)
    try:
        pane.select_runs([])
        assert len(pane.export_rows()[1]) == 56  # no selection: every run is exported
        path = tmp_path / "history.pdf"
        pane.export_pdf(path)
    finally:
        pane.shutdown()

    pages = page_lines(path)
    assert len(pages) == 2
    for number, lines in enumerate(pages):
        assert lines[-1] != HEADING, (number, lines[-3:])
    on = [number for number, lines in enumerate(pages) if HEADING in lines]
    assert on == [1], pages  # moved to page 2, printed once (no copy hidden past page 1's foot)
    at = pages[1].index(HEADING)
    assert pages[1][at + 1].split() == ["phase", "share", "cost", "time"]
    assert pages[1][at + 2].startswith("start-up and model load")
    words = read_words(path).texts()
    assert all(f"run-{i}" in words for i in range(56))  # every run's row, each once
    assert sum(w.startswith("run-") for w in words) == 56
