"""How long a Slurm run waited in the queue, and why, from its ``slurm_job`` events.

The launcher records a ``slurm_job`` event whenever a job's state, pending reason or restart count
changes (``gpuplanner.launch.slurm_backend``): ``job_id``, ``state``, ``reason``, ``restarts``,
``submit_t`` and, once the job started, ``queue_wait_s`` (its start minus its submit time). A run may
be several jobs (a resume submits a new one; a requeue restarts the same one): each attempt's wait
counts once, and an attempt still pending has waited from its submit time until ``now``.
"""

from __future__ import annotations

import json
import time
from typing import Any, TypedDict

from sqlite_utils import Database

from gpuplanner.export.human import human_clock

SLURM_JOB = "slurm_job"
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})


class QueueState(TypedDict):
    """A live Slurm job in the queue (``RunStatus.queue``, ``job_queue``): ``reason`` is the last pending
    reason, kept once the job started; the times are Unix seconds (``start_t`` None while pending)."""

    job_id: int
    state: str
    pending: bool
    reason: str | None
    submit_t: float | None
    start_t: float | None


class QueueAttempt(TypedDict):
    """One attempt of a run's Slurm job (a resume submits a new job; a requeue restarts the same one)."""

    job_id: int
    restarts: int
    reason: str | None
    queue_wait_s: float | None
    state: str


class QueueSummary(TypedDict):
    """A run's time in the Slurm queue from its events (``queue_of``; ``RunSummary.queue``)."""

    state: str
    pending: bool
    reason: str | None  # the latest pending reason of any attempt
    queue_wait_s: float | None  # all attempts together
    attempts: list[QueueAttempt]


def queue_of(db: Database, run_id: int, now: float | None = None) -> QueueSummary | None:
    """``state``, ``reason`` (the latest pending reason), ``pending``, ``queue_wait_s`` (all attempts) and
    ``attempts`` (job id, restarts, reason, wait each); None for a run that never was a Slurm job."""
    attempts: dict[tuple[int, int], QueueAttempt] = {}
    since: dict[tuple[int, int], float] = {}  # each attempt's submit time (its first event's until known)
    last: QueueAttempt | None = None
    for t, text in db.execute(
        "SELECT t, detail_json FROM events WHERE run_id = ? AND kind = ? ORDER BY t, seq DESC", [run_id, SLURM_JOB]
    ).fetchall():
        try:
            detail = json.loads(text) if text else None
        except ValueError:
            continue
        if not isinstance(detail, dict) or not isinstance(detail.get("job_id"), int):
            continue
        key = (detail["job_id"], int(detail.get("restarts") or 0))
        attempt = attempts.setdefault(
            key, {"job_id": key[0], "restarts": key[1], "reason": None, "queue_wait_s": None, "state": ""}
        )
        since.setdefault(key, float(t))
        submit = detail.get("submit_t")
        if isinstance(submit, (int, float)):
            since[key] = float(submit)
        state = str(detail.get("state") or "")
        if state in WAITING_STATES and detail.get("reason"):
            attempt["reason"] = detail["reason"]
        wait = detail.get("queue_wait_s")
        if isinstance(wait, (int, float)):
            attempt["queue_wait_s"] = float(wait)
        attempt["state"] = state
        last = attempt
    if last is None:
        return None
    now = time.time() if now is None else now
    for key, attempt in attempts.items():  # still waiting (or ended before it started): until now / unknown
        if attempt["queue_wait_s"] is None and attempt["state"] in WAITING_STATES:
            attempt["queue_wait_s"] = max(0.0, now - since[key])
    waits = [a["queue_wait_s"] for a in attempts.values() if a["queue_wait_s"] is not None]
    return {
        "state": last["state"],
        "pending": last["state"] in WAITING_STATES,
        "reason": next((a["reason"] for a in reversed(attempts.values()) if a["reason"]), None),
        "queue_wait_s": sum(waits) if waits else None,
        "attempts": list(attempts.values()),
    }


def job_queue(job: Any, before: QueueState | None = None) -> QueueState:
    """A live job's queue state (``RunStatus.queue``) from what Slurm says of it (a ``JobInfo``); the
    pending reason is kept once the job starts (Slurm then says "None")."""
    reason = job.reason if job.state in WAITING_STATES else None
    if reason is None and before and before.get("job_id") == job.job_id:
        reason = before.get("reason")
    return {
        "job_id": job.job_id,
        "state": job.state,
        "pending": job.state in WAITING_STATES,
        "reason": reason,
        "submit_t": job.submit_t,
        "start_t": job.start_t,
    }


def queue_text(queue: QueueState, now: float | None = None) -> str:
    """How long a live job waited or has been waiting, and why: "queued 2m 05s · Resources"."""
    submit, start = queue.get("submit_t"), queue.get("start_t")
    if queue.get("pending"):
        wait = max(0.0, (time.time() if now is None else now) - submit) if submit is not None else None
        head = "pending"
    else:
        wait = max(0.0, start - submit) if submit is not None and start is not None else None
        head = "waited"
    text = head if wait is None else f"{head} {human_clock(wait)}"
    if queue.get("reason"):
        text += f" ({queue['reason']})"
    return text + " in the Slurm queue"
