"""Billed time, idle cost and a Slurm run's queue wait: in History's Summary, in ``runs show`` and in the
Runs pane, from the ``billed`` and ``slurm_job`` events the launcher records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplanner import cli
from gpuplanner.history.billing import billed_span
from gpuplanner.history.db import open_db, write_transaction
from gpuplanner.history.slurm_queue import job_queue, queue_of, queue_text
from gpuplanner.launch.manager import RunStatus
from gpuplanner.launch.slurm_jobs import JobInfo
from gpuplanner.ui.history.history_pane import HistoryPane
from tests.ui.helpers import wait_for_history
from tests.ui.test_history_pane import make_runs

T0 = 1_763_900_000.0  # hand_computed_run's start (tests/history/streams.py)


def launcher_event(db_path: Path, run_id: int, t: float, kind: str, detail: dict[str, Any]) -> None:
    db = open_db(db_path)
    try:
        with write_transaction(db):
            low = db.execute("SELECT MIN(seq) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
            db.execute(
                "INSERT INTO events (run_id, seq, t, kind, step, detail_json) VALUES (?,?,?,?,?,?)",
                [run_id, min(-1, (low or 0) - 1), t, kind, None, json.dumps(detail)],
            )
    finally:
        db.close()


@pytest.fixture
def runs(services: Any) -> dict[str, int]:
    made = make_runs(services.db_path)
    # "eight": 8 GPUs at $8 whose records span 1.25 h; billed 1.5 h from launch to the instance's stop
    launched = T0 - 600.0
    span = billed_span(launched, launched + 1.5 * 3600, 8, 8.0)
    launcher_event(services.db_path, made["eight"], launched + 1.5 * 3600, "billed", span)
    # "spot" as a Slurm job: pending on Resources from submit, started 125 s later, completed
    spot, submit = made["spot"], T0 - 125.0
    for t, doc in (
        (submit, {"state": "PENDING", "reason": "Resources"}),
        (T0, {"state": "RUNNING", "reason": None, "queue_wait_s": 125.0}),
        (T0 + 1800, {"state": "COMPLETED", "reason": None, "queue_wait_s": 125.0, "exit_code": 0,
                     "billed_s": 1800.0, "gpus": 2, "spend_usd": 1.5, "spend_source": "scontrol"}),
    ):  # fmt: skip
        launcher_event(services.db_path, spot, t, "slurm_job", {"job_id": 41, "restarts": 0, "submit_t": submit, **doc})
    return made


def test_history_summary_shows_billed_time_idle_cost_and_queue_wait(
    qtbot: Any, services: Any, runs: dict[str, int]
) -> None:
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([runs["eight"]])
    text = pane.summary_view.toPlainText()
    assert "Time held\n1 h 15 min" in text  # the training time the records span
    assert "Billed time\n1 h 30 min · $96.00 (launch to end)" in text  # 1.5 h x 8 GPUs x $8
    assert "Idle (billed − training)\n15 min · $16.00" in text  # 0.25 h x 8 x $8
    assert "Queue wait" not in text  # not a Slurm run
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([runs["spot"]])
    text = pane.summary_view.toPlainText()
    assert "Queue wait\n2 min (was Resources)" in text
    assert "Billed time\n30 min · $1.50 (Slurm scontrol)" in text
    pane.shutdown()


def test_runs_show_prints_billed_idle_and_queue(services: Any, runs: dict[str, int], capsys: Any) -> None:
    db = str(services.db_path)
    assert cli.main(["runs", "show", str(runs["eight"]), "--json", "--db", db]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["billed_hours"] == pytest.approx(1.5) and shown["billed_cost_usd"] == pytest.approx(96.0)
    assert shown["idle_billed_hours"] == pytest.approx(0.25) and shown["idle_cost_usd"] == pytest.approx(16.0)
    assert shown["hours"] == pytest.approx(1.25) and shown["queue"] is None
    assert cli.main(["runs", "show", str(runs["spot"]), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "queue wait" in out and "125.0 s (pending reason was Resources)" in out
    assert cli.main(["runs", "show", str(runs["spot"]), "--json", "--db", db]) == 0
    queue = json.loads(capsys.readouterr().out)["queue"]
    assert (queue["state"], queue["pending"], queue["queue_wait_s"], queue["reason"]) == (
        "COMPLETED",
        False,
        125.0,
        "Resources",
    )


def test_a_job_still_pending_has_waited_until_now(services: Any, runs: dict[str, int]) -> None:
    run_id, submit = runs["eight"], T0
    launcher_event(
        services.db_path,
        run_id,
        submit + 1,
        "slurm_job",
        {"job_id": 7, "restarts": 0, "state": "PENDING", "reason": "Priority", "submit_t": submit},
    )
    db = open_db(services.db_path)
    try:
        queue = queue_of(db, run_id, now=submit + 300)
    finally:
        db.close()
    assert queue is not None and queue["pending"] and queue["reason"] == "Priority"
    assert queue["queue_wait_s"] == pytest.approx(300.0)


def test_runs_pane_shows_the_live_queue_wait(qtbot: Any, runs_pane: Any) -> None:
    pending = JobInfo(9, "PENDING", "Resources", submit_t=1000.0)
    queue = job_queue(pending)
    assert queue_text(queue, now=1125.0) == "pending 2m 05s (Resources) in the Slurm queue"
    entry = runs_pane._add_entry(5, "queued", "cluster")
    runs_pane._on_status(RunStatus(5, "starting", 9, None, None, "cluster", "/r", 0, queue=queue))
    assert (
        "pending" in runs_pane.state_label.text() and "(Resources) in the Slurm queue" in runs_pane.state_label.text()
    )
    running = job_queue(JobInfo(9, "RUNNING", None, submit_t=1000.0, start_t=1042.0), queue)
    assert queue_text(running) == "waited 42 s (Resources) in the Slurm queue"  # the reason it waited for is kept
    runs_pane._on_status(RunStatus(5, "running", 9, None, None, "cluster", "/r", 0, queue=running))
    assert entry.state == "running"
    assert "waited 42 s (Resources) in the Slurm queue" in runs_pane.state_label.text()
