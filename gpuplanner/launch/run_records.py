"""What the run manager keeps of a run in the history, so that another process can attach to it, stop
it or resume it, and so that History tells the same story whichever front end launched it.

The run row's ``launch`` column holds ``trainer_args`` (or the user's ``command`` and ``workdir``) and
``launch``, the :meth:`ManagedRun.launch_doc <gpuplanner.launch.run_state.ManagedRun.launch_doc>`
(:func:`save_launch`; :func:`load_run` reads it back). Launcher events
(:mod:`gpuplanner.history.launcher_events`, negative ``seq``): ``restart`` (what it cost, and after a
resume by hand what it resumed from), ``user_stop`` before a user's stop is signalled
(:mod:`gpuplanner.history.stops`), ``failure`` with the stderr tail of a failed process
(:mod:`~gpuplanner.launch.run_failure`). :func:`record_final_state` writes the final state the trainer
could not (it was lost, or killed before its ``run_end``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import connect, write_transaction
from gpuplanner.history.launcher_events import insert_launcher_event, record_launcher_event
from gpuplanner.history.runs import LaunchDocument, get_run, update_run
from gpuplanner.history.stops import record_user_stop
from gpuplanner.launch import supervisor
from gpuplanner.launch.backend import Backend
from gpuplanner.launch.run_failure import collect_failure
from gpuplanner.launch.run_state import ManagedNode, ManagedRun, RunError, log
from trainer.telemetry import NODE_SEQ_STRIDE

# A stored run status -> the state a run loaded from the history starts in
_LOADED_STATE = {
    "running": "detached",
    "finished": "finished",
    "budget_stop": "finished",
    "early_stop": "finished",
    "preempted": "preempted",
    "killed": "killed",
    "stopped": "stopped",
}


def load_run(db_path: Path, run_id: int) -> ManagedRun:
    """A run launched earlier (maybe by another process), from what its row recorded."""
    db = connect(db_path)
    try:
        row = get_run(db, run_id)
        last = db.execute(
            "SELECT MAX(last_seq) FROM stream_positions WHERE run_id = ? AND last_seq < ?",
            [run_id, NODE_SEQ_STRIDE],
        ).fetchone()[0]
        lanes = db.execute(  # the other nodes' lanes (events.nodeN.jsonl)
            "SELECT last_seq / ?, MAX(last_seq) FROM stream_positions WHERE run_id = ? AND last_seq >= ?"
            " GROUP BY last_seq / ?",
            [NODE_SEQ_STRIDE, run_id, NODE_SEQ_STRIDE, NODE_SEQ_STRIDE],
        ).fetchall()
    except Exception as exc:
        raise RunError(str(exc)) from exc
    finally:
        db.close()
    launched = row.launch or LaunchDocument()
    doc = launched.get("launch")
    if not doc:
        raise RunError(f"run {run_id} was not launched by GPU Planner (imported); it cannot be controlled")
    nodes = [ManagedNode(n["host"], n["run_dir"], n["tag"], n.get("pgid"), n.get("command", [])) for n in doc["nodes"]]
    orphans = [ManagedNode(n["host"], n["run_dir"], n["tag"], n.get("pgid")) for n in doc.get("orphans", [])]
    return ManagedRun(
        run_id,
        launched.get("trainer_args", []),
        nodes,
        gpus=doc.get("gpus", 1),
        env=doc.get("env", {}),
        auto_resume=doc.get("auto_resume", False),
        fallback_hosts=doc.get("fallback_hosts", []),
        max_restarts=doc.get("max_restarts", 3),
        budget_usd=doc.get("budget_usd"),
        price=doc.get("price_usd_per_gpu_hour"),
        rdzv_port=doc.get("rdzv_port"),
        command=doc.get("user_command") or [],
        workdir=doc.get("workdir"),
        max_gpu_hours=doc.get("max_gpu_hours"),
        launched_at=doc.get("launched_at"),
        restarts=doc.get("restarts", 0),
        state=_LOADED_STATE.get(row.status, "failed"),
        last_seq=last,
        lane_seq={int(lane): int(seq) for lane, seq in lanes},
        orphans=orphans,
    )


def save_launch(db_path: Path, run: ManagedRun) -> None:
    """Store the run's launch document (and its current first host) in its row."""
    db = connect(db_path)
    try:
        launch = get_run(db, run.run_id).launch or LaunchDocument()
        if not run.command:
            launch["trainer_args"] = run.trainer_args
        launch["launch"] = run.launch_doc()
        update_run(db, run.run_id, launch=launch, host=run.nodes[0].host)
    finally:
        db.close()


def mark_ended(db_path: Path, run_id: int, status: str) -> None:
    """Store ``status`` as the run's final state, ended now."""
    db = connect(db_path)
    try:
        update_run(db, run_id, status=status, ended_at=time.time())
    finally:
        db.close()


def record_final_state(db: Database, run: ManagedRun, state: str) -> None:
    """Record a final state when the trainer could not (it was lost, or killed before its run_end):
    the history never stays at "running" for a process that ended."""
    row = db.execute("SELECT status FROM runs WHERE id = ?", [run.run_id]).fetchone()
    stored = row[0] if row else None
    # A user's stop is "stopped" also when it cancelled an automatic resume after a real preemption.
    if state == "killed" or (
        (state in ("failed", "stopped", "preempted") and stored == "running")
        or (state == "stopped" and stored == "preempted")
    ):
        with write_transaction(db):
            db.execute("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?", [state, time.time(), run.run_id])
    elif state == "finished" and stored == "running":
        # Exit 0 without a run_end in the history: the job deleted its own run folder (and the events file the
        # end was written to), or the file was lost. It succeeded; its hours and cost are those of the records
        # that arrived and its billed span, and the reason is kept (issue 27 item 12).
        with write_transaction(db):
            insert_launcher_event(
                db,
                run.run_id,
                "end_unrecorded",
                {
                    "exit_code": run.exit_code,
                    "reason": "the process exited 0 but its run_end record never arrived (was the run folder "
                    f"{run.nodes[0].run_dir} deleted?): hours and cost are those of the records received",
                },
            )
            db.execute("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?", [state, time.time(), run.run_id])


def record_event(db_path: Path, run: ManagedRun, kind: str, detail: dict[str, Any]) -> None:
    """A launcher event (:mod:`gpuplanner.history.launcher_events`)."""
    db = connect(db_path)
    try:
        record_launcher_event(db, run.run_id, kind, detail)
    finally:
        db.close()


def record_restart(
    db_path: Path, run: ManagedRun, from_host: str, to_host: str, reason: str, cost_s: float, after: str | None = None
) -> None:
    """A ``restart`` event; ``after``: the state a resume by hand started from (stopped, preempted, ...)."""
    detail: dict[str, Any] = {
        "from_host": from_host,
        "to_host": to_host,
        "reason": reason,
        "cost_s": round(cost_s, 3),
        "attempt": run.restarts,
    }
    if after is not None:
        detail["after"] = after
    record_event(db_path, run, "restart", detail)


def record_stop_request(db_path: Path, run_id: int, by: str, reason: str | None) -> None:
    """A ``user_stop`` (:func:`gpuplanner.history.stops.record_user_stop`), before the stop is signalled."""
    db = connect(db_path)
    try:
        record_user_stop(db, run_id, by, reason)
    finally:
        db.close()


def record_failure(db_path: Path, backend_of: Callable[[str], Backend], run: ManagedRun, code: int | None) -> None:
    """Keep a failed run's error and the stderr tail of its failed process (node 0 unless another node
    failed; read through ``backend_of(host)``) in the history; never raises (the failure itself must
    still be announced)."""
    failed = next((n for n in run.nodes if n.done and n.exit_code not in (0, supervisor.EXIT_RESUME)), run.nodes[0])
    db = connect(db_path)
    try:
        collect_failure(
            backend_of,
            db,
            run.run_id,
            failed.host,
            failed.run_dir,
            failed.exit_code if failed.exit_code is not None else code,
            tag=failed.tag,
            error=run.error,
        )
    except Exception:
        log.exception("run %s: could not record the failure", run.run_id)
    finally:
        db.close()
