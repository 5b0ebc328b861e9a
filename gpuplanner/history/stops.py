"""A user's stop is a stop, not a preemption.

The trainer cannot tell a user's SIGTERM from a host's (a spot notice, Slurm's signal before the time
limit): either way it checkpoints, writes ``preempted`` and a ``run_end`` with status ``preempted``
and exits 75. What tells them apart is recorded here, durably, by whoever sends the stop:

- Before signalling, the launcher (:meth:`RunManager.stop`, whichever front end asked: ``gpuplanner
  run stop``, the window, a sweep ending a trial) records a ``user_stop`` launcher event
  (:func:`record_user_stop`, ``detail``: ``{"by": "cli" | "window" | "sweep" | ..., "reason"}``;
  a sweep's pruned or capped trial is stopped this way too: it is the search's decision, not an
  interruption).
- The stop is *pending* until it is answered: the newest launcher event among ``user_stop`` and
  ``restart`` is that ``user_stop`` and it holds no ``answered_seq`` yet (a restart, e.g. the user's
  resume, ends it unanswered).
- When the history stores the trainer's ``preempted`` / ``run_end`` records while a stop is pending
  (:func:`apply_pending_stop`, called by the ingest in the records' own transaction, by whichever
  process reads them: the watcher that sent the stop, another one, or an import later), they are
  stored as kind ``stopped`` and status ``stopped`` (the trainer's word kept as ``trainer_kind`` /
  ``trainer_status``), and the ``run_end`` answers the stop (``answered_seq``, ``trainer_status``).
  A ``run_end`` with any other status (the run finished or failed before the stop arrived) answers
  it too, unchanged.

So ``runs.status`` is ``stopped``, the run's events say ``stopped`` (the interruption counts in
:mod:`gpuplanner.history.analytics` count only ``preempted``), and a run resumed after a stop is not
a preempted run. A simulated or real preemption writes no ``user_stop`` and stays ``preempted``.
"""

from __future__ import annotations

import json
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.launcher_events import load_detail, record_launcher_event

USER_STOP = "user_stop"
STOPPED = "stopped"
RESTART = "restart"


def record_user_stop(db: Database, run_id: int, by: str, reason: str | None = None) -> int:
    """Record that the user asked ``run_id`` to stop (before the signal is sent); returns the event's seq."""
    detail: dict[str, Any] = {"by": by}
    if reason is not None:
        detail["reason"] = reason
    return record_launcher_event(db, run_id, USER_STOP, detail)


def _latest_stop(db: Database, run_id: int) -> tuple[int, dict[str, Any]] | None:
    """The run's newest ``user_stop`` (seq, detail) when no ``restart`` came after it, else None."""
    row = db.execute(
        "SELECT seq, kind, detail_json FROM events WHERE run_id = ? AND seq < 0 AND kind IN (?, ?)"
        " ORDER BY seq LIMIT 1",
        [run_id, USER_STOP, RESTART],
    ).fetchone()
    if row is None or row[1] != USER_STOP:
        return None
    return int(row[0]), load_detail(row[2])


def pending_stop(db: Database, run_id: int) -> int | None:
    """The seq of the run's unanswered ``user_stop`` (see the module docstring), or None."""
    latest = _latest_stop(db, run_id)
    return latest[0] if latest is not None and "answered_seq" not in latest[1] else None


def stopped_since_start(db: Database, run_id: int) -> bool:
    """Whether the user asked the run's current process to stop (answered or not): a ``user_stop`` with no
    ``restart`` after it. The launcher's supervisor reads it when the stop was sent by another process."""
    return _latest_stop(db, run_id) is not None


def apply_pending_stop(db: Database, run_id: int, record: dict[str, Any]) -> None:
    """Inside the ingest's transaction: a trainer ``preempted`` or ``run_end`` record of a process the
    user stopped becomes ``stopped`` (changed in place, so whoever is handed the record sees what was
    stored); a ``run_end`` answers the pending stop."""
    kind = record.get("kind")
    if kind not in ("preempted", "run_end"):
        return
    stop_seq = pending_stop(db, run_id)
    if stop_seq is None:
        return
    if kind == "preempted":
        record["kind"], record["trainer_kind"] = STOPPED, "preempted"
        return
    status = record.get("status")
    if status == "preempted":
        record["status"], record["trainer_status"] = STOPPED, "preempted"
    row = db.execute("SELECT detail_json FROM events WHERE run_id = ? AND seq = ?", [run_id, stop_seq]).fetchone()
    detail = load_detail(row[0] if row else None)
    detail.update(answered_seq=record.get("seq"), trainer_status=status)
    db.execute("UPDATE events SET detail_json = ? WHERE run_id = ? AND seq = ?", [json.dumps(detail), run_id, stop_seq])


def stopped_by_user(db: Database, run_id: int) -> bool:
    """Whether a run stored as ``preempted`` before stops were stored as ``stopped`` was in fact the user's
    Stop (a ``user_stop`` at or after its newest ``run_start``). Only for histories written by older versions."""
    row = db.execute(
        "SELECT MAX(CASE WHEN kind = ? THEN t END), MAX(CASE WHEN kind = 'run_start' THEN t END)"
        " FROM events WHERE run_id = ?",
        [USER_STOP, run_id],
    ).fetchone()
    return bool(row and row[0] is not None and (row[1] is None or row[0] >= row[1]))


__all__ = [
    "RESTART",
    "STOPPED",
    "USER_STOP",
    "apply_pending_stop",
    "pending_stop",
    "record_user_stop",
    "stopped_since_start",
    "stopped_by_user",
]
