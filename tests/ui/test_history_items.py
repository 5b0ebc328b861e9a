"""History details: planned against actual in people's units with both GPUs (flagged when they differ),
numbers without exponents."""

from __future__ import annotations

from gpuplanner.ui.history.history_model import format_value
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.history.history_summary import planned_html

GIB = 1024**3


def test_planned_against_actual_reads_as_people_write() -> None:
    planned = {
        "hours": {"planned": 1.2, "actual": 1.5, "diff_pct": 25.0},
        "cost_usd": {"planned": 2.9876, "actual": 3.6, "diff_pct": 20.5},
        "peak_mem_bytes": {"planned": 40 * GIB, "actual": 38.5 * GIB, "diff_pct": -3.75},
        "tokens_per_s": {"planned": None, "actual": None, "diff_pct": None},
    }
    html = planned_html(planned, "1 x H100 SXM", "2 x A100 80GB")
    assert "1 h 12 min" in html and "1 h 30 min" in html and "$2.99" in html and "$3.60" in html
    assert "40.0 GiB" in html and "38.5 GiB" in html and "+25.0 %" in html
    assert "different hardware" in html and "Tokens/s" not in html  # nothing to compare: no row
    same = planned_html(planned, "1 x H100 SXM", "1 x H100 SXM")
    assert "different hardware" not in same and ">same<" in same
    # the history judged it (an RTX 4090 plan, a CPU run): labelled, no percentages
    cpu = {**planned, "hardware": {"planned_gpu": "RTX 4090", "actual_gpu": "CPU", "comparable": False, "note": "x"}}
    html = planned_html(cpu, None, "1 x RTX 4090")
    assert "different hardware" in html and ">CPU<" in html and ">RTX 4090<" in html
    assert "%" not in html and html.count("other hardware") == 3


def test_no_exponents() -> None:
    assert format_value(1.115e-05) == "0.0000112"
    assert format_value(0.5) == "0.5"
    assert format_value(12345.0) == "12,345"


def test_history_overlays_the_selected_runs_with_a_legend(qtbot, services) -> None:
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run
    from tests.history.streams import hand_computed_run
    from tests.ui.helpers import wait_for_history
    from tests.ui.test_history_pane import preempted_run

    db = open_db(services.db_path)
    try:
        ids = []
        for name, stream in (
            ("alpha", hand_computed_run()),
            ("beta", preempted_run()),
            ("gamma", hand_computed_run(120.0)),
        ):
            run_id = create_run(db, name=name, host="h", gpu_count=2, price_usd_per_gpu_hour=2.0)
            ingest_records(db, run_id, stream.records)
            ids.append(run_id)
    finally:
        db.close()
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    with qtbot.waitSignal(pane.overlayShown, timeout=10_000) as shown:
        pane.select_runs(ids)
    assert shown.args == [3]
    pane.detail_tabs.setCurrentWidget(pane.plots_page)
    assert pane.plots_page.currentWidget() is pane.overlay
    assert sorted(pane.overlay.legend_names()) == [f"#{ids[0]} alpha", f"#{ids[1]} beta", f"#{ids[2]} gamma"]
    assert len(pane.overlay.plots["loss"].listDataItems()) == 3
    assert len(pane.overlay.plots["util"].listDataItems()) == 3
    assert len(pane.overlay.plots["spend"].listDataItems()) == 3
    spend = pane.overlay.plots["spend"].listDataItems()[0].getData()[1]
    assert spend[-1] > spend[0]  # cumulative spend (price x GPUs x time when the trainer gave none)
    beta = [s.run_id for s in pane.overlay.series].index(ids[1])
    x_time = pane.overlay.plots["loss"].listDataItems()[beta].getData()[0]
    pane.overlay.set_x_axis("step")
    x_step = pane.overlay.plots["loss"].listDataItems()[beta].getData()[0]
    assert pane.overlay.plots["loss"].getAxis("bottom").labelText == "optimizer step"
    assert list(x_step) != list(x_time) and x_step[-1] >= 100  # beta trained 290 steps
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([ids[0]])  # one run again: its own plots, not the overlay
    assert pane.plots_page.currentWidget() is pane.plots
    pane.shutdown()
