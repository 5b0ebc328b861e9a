"""Runs pane details: after a restart the last run is selected (with its failure), the demo run's length is
a setting, the Spend plot says why it is empty, plots share one left-axis width, numbers read as people
write them."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSettings

from gpuplanner.ui.runs.live_plots import LEFT_AXIS_PX, LivePlots
from gpuplanner.ui.runs.run_telemetry import RunTelemetry


def test_after_a_restart_the_last_run_is_selected(qtbot: Any, tmp_services: Any) -> None:
    from gpuplanner.history.db import open_db
    from gpuplanner.history.failures import record_failure
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run
    from gpuplanner.ui.runs.runs_pane import RunsPane

    db = open_db(tmp_services.db_path)
    try:
        launch = {"launch": {"nodes": [{"host": "local", "run_dir": "/tmp/x", "tag": "node0", "pgid": None}]}}
        older = create_run(db, name="older", host="local", gpu_count=1, launch=launch, started_at=1000.0)
        ingest_records(
            db,
            older,
            [
                {"v": 1, "seq": 0, "t": 1000.0, "kind": "run_start", "config": {}},
                {"v": 1, "seq": 1, "t": 1010.0, "kind": "run_end", "status": "finished"},
            ],
        )
        newest = create_run(db, name="broke", host="local", gpu_count=1, launch=launch, started_at=2000.0)
        ingest_records(
            db,
            newest,
            [
                {"v": 1, "seq": 0, "t": 2000.0, "kind": "run_start", "config": {}},
                {
                    "v": 1,
                    "seq": 1,
                    "t": 2001.0,
                    "kind": "run_end",
                    "status": "failed",
                    "error": "IndexError: index out of range in self",
                    "exit_code": 1,
                },
            ],
        )
        record_failure(
            db,
            newest,
            {
                "error": "IndexError: index out of range in self",
                "exit_code": 1,
                "stderr_tail": "Traceback\nIndexError: index out of range in self",
            },
        )
    finally:
        db.close()
    pane = RunsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    try:
        qtbot.waitUntil(lambda: pane.current() is not None, timeout=10_000)
        entry = pane.current()
        assert entry.run_id == newest and entry.state == "failed"
        assert pane.title_label.text() == f"#{newest} broke"
        assert pane.failure_panel.isVisible() and "IndexError" in pane.failure_label.text()
        assert "Traceback" in pane.failure_text.toPlainText()
        assert not pane.resume_button.isEnabled()  # no checkpoint
    finally:
        pane.shutdown(stop_runs=False)


def test_demo_length_is_a_setting(qtbot: Any) -> None:
    from gpuplanner.ui.main_window import app_settings
    from gpuplanner.ui.runs.run_demo import DEMO_STEPS, demo_request

    args = demo_request().trainer_args
    assert args[args.index("--max-steps") + 1] == str(DEMO_STEPS)
    store: QSettings = app_settings()
    store.setValue("demo/steps", 600)
    store.sync()
    args = demo_request().trainer_args
    assert args[args.index("--max-steps") + 1] == "600"
    assert args[args.index("--checkpoint-every-steps") + 1] == "150"


def test_spend_plot_says_no_price_and_plots_line_up(qtbot: Any) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 700)
    plots.show()
    tel = RunTelemetry(1)
    tel.add_records(
        [
            {"seq": 0, "t": 10.0, "kind": "run_start", "config": {}},
            {"seq": 1, "t": 11.0, "kind": "step", "step": 1, "loss": 2.0, "tokens_per_s": 123456.0},
        ]
    )
    plots.redraw(tel, force=True)
    assert (
        plots.no_price_label.isVisible() and "No price set for this host" in plots.no_price_label.textItem.toPlainText()
    )
    assert "no price set" in plots.plots["spend"].titleLabel.text
    lefts = {key: plot.getViewBox().sceneBoundingRect().left() for key, plot in plots.plots.items()}
    assert lefts["util"] == lefts["tokens"] and lefts["mem"] == lefts["loss"] and lefts["power"] == lefts["spend"]
    assert all(plot.getAxis("left").width() == LEFT_AXIS_PX for plot in plots.plots.values())
    plots._set_title("util", "a title much longer than the memory plot's title, which pyqtgraph would widen")
    plots.resize(1001, 700)
    widths = lambda: {round(plots.plots[key].geometry().width()) for key in ("util", "mem", "power")}  # noqa: E731
    qtbot.waitUntil(lambda: len(widths()) == 1)
    assert min(widths()) > 300  # the three columns share the width equally
    tel.price_per_gpu_hour = 2.0
    tel.add_records(
        [{"seq": 2, "t": 12.0, "kind": "step", "step": 2, "loss": 1.9, "tokens_per_s": 1.0, "spend_usd": 0.5}]
    )
    plots.redraw(tel)
    assert not plots.no_price_label.isVisible()


def test_runs_pane_numbers_for_people(qtbot: Any, runs_pane: Any) -> None:
    from gpuplanner.ui.runs.run_status_text import duration_or_dash as _duration
    from gpuplanner.ui.runs.run_status_text import money_or_dash as _money

    assert _duration(72 * 60) == "1 h 12 min" and _duration(None) == "—"
    assert _money(1.115e-05) == "$0.0000112" and _money(1234.5) == "$1,234.50"
