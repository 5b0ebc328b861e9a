"""A user's stop is stored as a stop: the trainer's "preempted" records of a process the user stopped
become "stopped" (status, events), are not counted as interruptions, and a real preemption stays one;
the stop holds when its run_end is imported later by another process (another connection here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlite_utils import Database

from gpuplanner.history import open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.launcher_events import record_launcher_event
from gpuplanner.history.runs import create_run
from gpuplanner.history.stops import pending_stop, record_user_stop


def rec(seq: int, t: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "t": t, "kind": kind, **fields}


def steps(first_seq: int, t0: float, first_step: int, n: int) -> list[dict[str, Any]]:
    return [
        rec(first_seq + i, t0 + i, "step", step=first_step + i, loss=1.0, tokens_total=64 * (first_step + i))
        | {"samples_total": first_step + i, "step_time_s": 1.0}
        for i in range(n)
    ]


def stop_by_signal(seq: int, t: float, step: int) -> list[dict[str, Any]]:
    """What the trainer writes after any SIGTERM: it cannot tell the user's from the host's."""
    return [
        rec(seq, t, "checkpoint", step=step, path="ckpt"),
        rec(seq + 1, t + 1, "preempted", step=step, reason="signal SIGTERM"),
        rec(seq + 2, t + 2, "run_end", status="preempted", exit_code=75),
    ]


def kinds(db: Database, run_id: int) -> list[str]:
    return [r[0] for r in db.execute("SELECT kind FROM events WHERE run_id = ? AND seq >= 0 ORDER BY seq", [run_id])]


def status(db: Database, run_id: int) -> str:
    return str(db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()[0])


def test_stop_then_resume_is_no_interruption_and_a_later_preemption_is_one(db: Database) -> None:
    run_id = create_run(db, name="r", host="h", gpu_count=2, price_usd_per_gpu_hour=2.0)
    ingest_records(db, run_id, [rec(0, 1000.0, "run_start", config={}), *steps(1, 1001.0, 1, 10)])
    stop_seq = record_user_stop(db, run_id, "cli")
    assert pending_stop(db, run_id) == stop_seq
    ingest_records(db, run_id, stop_by_signal(11, 1011.0, 10))
    assert status(db, run_id) == "stopped"
    assert kinds(db, run_id)[-2:] == ["stopped", "run_end"]
    end = json.loads(db.execute("SELECT detail_json FROM events WHERE run_id = ? AND seq = 13", [run_id]).fetchone()[0])
    assert end["status"] == "stopped" and end["trainer_status"] == "preempted" and end["exit_code"] == 75
    assert pending_stop(db, run_id) is None  # answered by that run_end
    stop = json.loads(
        db.execute("SELECT detail_json FROM events WHERE run_id = ? AND seq = ?", [run_id, stop_seq]).fetchone()[0]
    )
    assert stop == {"by": "cli", "answered_seq": 13, "trainer_status": "preempted"}
    summary = summarize(db, run_id, with_alerts=False)
    assert (summary.status, summary.interruptions, summary.interruption_hours) == ("stopped", 0, 0.0)

    # resumed an hour later: the hour stopped is neither held (billed) time nor an interruption
    record_launcher_event(db, run_id, "restart", {"reason": "resumed by the user", "after": "stopped"})
    ingest_records(db, run_id, [rec(14, 4613.0, "run_start", config={}, resumed_from_step=10)])
    ingest_records(db, run_id, [*steps(15, 4614.0, 11, 10), *stop_by_signal(25, 4624.0, 20)])  # the host's SIGTERM
    assert status(db, run_id) == "preempted"
    assert kinds(db, run_id).count("preempted") == 1 and kinds(db, run_id).count("stopped") == 1
    summary = summarize(db, run_id, with_alerts=False)
    assert summary.interruptions == 1
    # wall, minus the hour stopped, minus the last second (preempted at 4625, the run_end at 4626)
    assert summary.hours * 3600 == pytest.approx(4626.0 - 1000.0 - (4613.0 - 1012.0) - 1.0)
    assert summary.cost_usd == pytest.approx(24.0 / 3600 * 2 * 2.0)


def test_the_run_end_imported_later_by_another_process_is_still_a_stop(db_path: Path) -> None:
    sender = open_db(db_path)  # the process that sent the stop (gpuplanner run stop) ...
    run_id = create_run(sender, name="r", host="h", gpu_count=1)
    ingest_records(sender, run_id, [rec(0, 100.0, "run_start", config={}), *steps(1, 101.0, 1, 3)])
    record_user_stop(sender, run_id, "cli")
    sender.close()
    importer = open_db(db_path)  # ... and the one that reads the events file afterwards
    try:
        ingest_records(importer, run_id, stop_by_signal(4, 104.0, 3))
        assert status(importer, run_id) == "stopped"
        assert summarize(importer, run_id, with_alerts=False).interruptions == 0
    finally:
        importer.close()


def test_a_stop_that_came_too_late_or_was_followed_by_a_restart_changes_nothing(db: Database) -> None:
    run_id = create_run(db, name="r", host="h", gpu_count=1)
    ingest_records(db, run_id, [rec(0, 100.0, "run_start", config={}), *steps(1, 101.0, 1, 3)])
    record_user_stop(db, run_id, "window")
    ingest_records(db, run_id, [rec(4, 104.0, "run_end", status="finished", exit_code=0)])  # it finished first
    assert status(db, run_id) == "finished" and pending_stop(db, run_id) is None
    other = create_run(db, name="o", host="h", gpu_count=1)
    ingest_records(db, other, [rec(0, 100.0, "run_start", config={})])
    record_user_stop(db, other, "window")
    record_launcher_event(db, other, "restart", {"reason": "resumed by the user", "after": "killed"})
    ingest_records(db, other, stop_by_signal(1, 101.0, 0))  # the resumed process, preempted by its host
    assert status(db, other) == "preempted" and "stopped" not in kinds(db, other)
    assert summarize(db, other, with_alerts=False).interruptions == 1
