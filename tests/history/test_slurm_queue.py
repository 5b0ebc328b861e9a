"""A Slurm run's queue documents (``QueueSummary``, ``QueueState``) from real events in a real history file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlite_utils import Database

from gpuplanner.history.db import write_transaction
from gpuplanner.history.runs import create_run
from gpuplanner.history.slurm_queue import QueueAttempt, QueueState, QueueSummary, job_queue, queue_of, queue_text
from gpuplanner.launch.slurm_jobs import JobInfo


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def _slurm_job(db: Database, run_id: int, seq: int, t: float, detail: dict[str, Any]) -> None:
    with write_transaction(db):
        db.execute(
            "INSERT INTO events (run_id, seq, t, kind, step, detail_json) VALUES (?,?,?,?,?,?)",
            [run_id, seq, t, "slurm_job", None, json.dumps(detail)],
        )


def test_queue_of_two_attempts_is_a_queue_summary_with_each_wait(db: Database) -> None:
    run_id = create_run(db, name="slurm", host="cluster")
    # job 41 waited 125 s from its submit time, then a resume submitted job 42, still pending at ``now``
    _slurm_job(db, run_id, -1, 1000.0, {"job_id": 41, "restarts": 0, "state": "PENDING", "reason": "Resources",
                                        "submit_t": 900.0})  # fmt: skip
    _slurm_job(db, run_id, -2, 1025.0, {"job_id": 41, "restarts": 0, "state": "RUNNING", "queue_wait_s": 125.0})
    _slurm_job(db, run_id, -3, 2000.0, {"job_id": 42, "restarts": 0, "state": "PENDING", "reason": "Priority"})
    queue = queue_of(db, run_id, now=2300.0)
    assert queue is not None
    assert set(queue) == _keys(QueueSummary)
    assert [set(a) for a in queue["attempts"]] == [_keys(QueueAttempt)] * 2
    assert [(a["job_id"], a["queue_wait_s"]) for a in queue["attempts"]] == [(41, 125.0), (42, 300.0)]
    assert queue["queue_wait_s"] == pytest.approx(425.0) and queue["pending"] and queue["reason"] == "Priority"
    assert queue_of(db, create_run(db, name="not slurm")) is None


def test_job_queue_is_the_live_queue_state_and_keeps_the_pending_reason() -> None:
    pending = JobInfo(job_id=7, state="PENDING", reason="Resources", submit_t=100.0, start_t=None)
    before = job_queue(pending)
    assert set(before) == _keys(QueueState) and before["pending"] and before["reason"] == "Resources"
    running = job_queue(JobInfo(job_id=7, state="RUNNING", reason="None", submit_t=100.0, start_t=160.0), before)
    assert running == {"job_id": 7, "state": "RUNNING", "pending": False, "reason": "Resources",
                       "submit_t": 100.0, "start_t": 160.0}  # fmt: skip
    assert queue_text(running) == "waited 1m 00s (Resources) in the Slurm queue"
