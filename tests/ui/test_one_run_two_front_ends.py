"""One run, two front ends (issue 23, "Done means"): the CLI (`gpuplanner runs show`) and the window (History's
table and details, the Runs pane's ETA over the same records) show the same status, cost, interruption count
and ETA. The run: 2 GPUs at $3 per GPU-hour, stopped by its user and resumed (not an interruption), then
preempted by its host and resumed (one), and running now at one step a second toward 400 steps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuplanner.cli import main
from gpuplanner.export.human import human_duration, human_money
from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.launcher_events import record_launcher_event
from gpuplanner.history.runs import create_run
from gpuplanner.history.stops import record_user_stop
from gpuplanner.history.stored_records import stored_records
from gpuplanner.ui.history.history_model import EXPORT_COLUMNS, metric_text
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from tests.ui.helpers import wait_for_history

T0 = 1_763_900_000.0
MAX_STEPS = 400


def rec(seq: int, t: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "t": T0 + t, "kind": kind, **fields}


def steps(seq: int, t: float, first: int, n: int) -> list[dict[str, Any]]:
    return [
        rec(seq + i, t + i, "step", step=first + i, loss=2.0, tokens_total=512 * (first + i), samples_total=first + i)
        | {"step_time_s": 1.0, "spend_usd": None}
        for i in range(n)
    ]


def by_signal(seq: int, t: float, step: int) -> list[dict[str, Any]]:
    """What the trainer writes after any SIGTERM (it cannot tell the user's from the host's)."""
    return [
        rec(seq, t, "checkpoint", step=step, path="ckpt"),
        rec(seq + 1, t + 1, "preempted", step=step, reason="signal SIGTERM"),
        rec(seq + 2, t + 2, "run_end", status="preempted", exit_code=75),
    ]


@pytest.fixture
def run_id(services: Any) -> int:
    config = {"max_steps": MAX_STEPS, "price_per_gpu_hour": 3.0}
    db = open_db(services.db_path)
    try:
        run = create_run(db, name="two-ends", host="box", gpu_count=2, price_usd_per_gpu_hour=3.0)
        ingest_records(
            db, run, [rec(0, 0.0, "run_start", config=config, steps_total=MAX_STEPS, gpus=[{"index": 0}, {"index": 1}])]
        )
        ingest_records(db, run, steps(1, 1.0, 1, 50))
        record_user_stop(db, run, "window")  # the user's Stop: the next "preempted" is a stop
        ingest_records(db, run, by_signal(51, 51.0, 50))
        record_launcher_event(db, run, "restart", {"reason": "resumed by the user", "after": "stopped"})
        ingest_records(
            db, run, [rec(54, 600.0, "run_start", config=config, steps_total=MAX_STEPS, resumed_from_step=50)]
        )
        ingest_records(db, run, [*steps(55, 601.0, 51, 50), *by_signal(105, 651.0, 100)])  # the host's SIGTERM
        record_launcher_event(db, run, "restart", {"reason": "automatic resume", "after": "preempted"})
        ingest_records(
            db, run, [rec(108, 900.0, "run_start", config=config, steps_total=MAX_STEPS, resumed_from_step=100)]
        )
        ingest_records(db, run, steps(109, 901.0, 101, 60))  # running: step 160 of 400 at one a second
    finally:
        db.close()
    return run


def test_the_cli_and_the_window_show_the_same_run(
    qtbot: Any, services: Any, run_id: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "show", str(run_id), "--db", str(services.db_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert main(["runs", "show", str(run_id), "--db", str(services.db_path)]) == 0
    text = capsys.readouterr().out

    # the figures themselves: a stop is not an interruption, the host's preemption is one
    assert shown["status"] == "running"
    assert shown["interruptions"] == 1
    assert shown["cost_usd"] == pytest.approx(shown["hours"] * 2 * 3.0)
    assert shown["eta_s"] == pytest.approx(MAX_STEPS - 160, rel=0.01)

    # the window's History: the same status, cost and interruptions, in the same words
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1160, 760)
    pane.show()
    try:
        wait_for_history(qtbot, pane)
        row = next(r for r in range(pane.proxy.rowCount()) if pane.proxy.index(r, 0).data() == str(run_id))
        cells = {name: pane.proxy.index(row, c).data() for c, name in enumerate(EXPORT_COLUMNS)}
        summary = pane._summary(run_id)
        assert cells["status"] == shown["status"]
        assert float(cells["cost_usd"].replace(",", "")) == pytest.approx(shown["cost_usd"], abs=0.005)
        assert summary.interruptions == shown["interruptions"]
        assert metric_text(summary, "interruptions") == str(shown["interruptions"])
    finally:
        pane.shutdown()
    # the CLI's text says the same money the JSON holds, as the window's formatter writes it
    assert human_money(shown["cost_usd"]) in text

    # the Runs pane's ETA over the same stored records equals the CLI's
    db = open_db(services.db_path)
    try:
        telemetry = RunTelemetry(run_id=run_id)
        telemetry.add_records(sorted(stored_records(db, run_id), key=lambda r: (r["t"], r["seq"])))
    finally:
        db.close()
    assert telemetry.eta_s() == pytest.approx(shown["eta_s"])
    assert human_duration(telemetry.eta_s()) == human_duration(shown["eta_s"])
