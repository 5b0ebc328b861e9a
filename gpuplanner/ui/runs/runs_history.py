"""What the Runs pane reads from the history, as jobs for the controller's worker thread (no Qt): the
runs a previous session left running (backfilled and reattached) and the newest one that ended, and a
run's alerts, plan and time breakdown. Each job opens its own connection and closes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplanner.app.run_status import ENDED_STATES
from gpuplanner.ui.runs.run_telemetry import RunTelemetry

# a run to show: id, name, host, its telemetry backfilled from the history
Found = tuple[int, str, str, RunTelemetry]
# the newest ended run launched from here: Found's fields, then its state and failure (or None)
LastEnded = tuple[int, str, str, RunTelemetry, str, dict[str, Any] | None]


def _backfilled(db: Any, run: Any) -> RunTelemetry:
    tel = RunTelemetry(run.id)
    tel.planned_cost_usd = run.planned_cost_usd
    tel.price_per_gpu_hour = run.price_usd_per_gpu_hour
    tel.backfill_from_history(db, run.id)
    return tel


def runs_to_reattach(
    db_path: Path, manager: Any, on_records: Callable[..., Any], on_status: Callable[..., Any]
) -> tuple[list[Found], LastEnded | None]:
    """The runs launched from here that are still running, each attached to ``manager`` (records and status
    go to the callbacks; one that cannot be attached is left out), and the newest one that ended."""
    from gpuplanner.history.db import connect
    from gpuplanner.history.failures import load_failure
    from gpuplanner.history.runs import list_runs
    from gpuplanner.history.stops import stopped_by_user

    db = connect(db_path)
    try:
        last: LastEnded | None = None  # the newest run launched from here that ended: shown when none runs
        for run in list_runs(db):
            if run.status == "running" or not (run.launch or {}).get("launch"):
                continue
            tel = _backfilled(db, run)
            state = ENDED_STATES.get(run.status, run.status)
            if run.status == "preempted" and stopped_by_user(db, run.id):  # recorded by an older version
                state = "stopped"
            failure = load_failure(db, run.id) if run.status == "failed" else None
            last = (run.id, run.name or f"Run {run.id}", run.host or "?", tel, state, failure)
            break
        found: list[Found] = []
        for run in list_runs(db, status="running"):
            if not (run.launch or {}).get("launch"):
                continue
            tel = _backfilled(db, run)
            try:
                manager.attach(run.id, on_records=on_records, on_status=on_status)
            except Exception:
                continue
            found.append((run.id, run.name or f"Run {run.id}", run.host or "?", tel))
        return found, last
    finally:
        db.close()


def run_alerts(db_path: Path, run_id: int, settings: Any) -> tuple[list[tuple[str, ...]], float | None, Any]:
    """The run's alerts under the window's alert ``settings`` (stored with the run) as ``(kind, message,
    diagnosis text)``, its planned cost and its time breakdown."""
    from gpuplanner.history.alerts import refresh_alerts
    from gpuplanner.history.analytics import summarize
    from gpuplanner.history.db import connect
    from gpuplanner.history.runs import get_run
    from gpuplanner.history.time_breakdown import from_dict

    db = connect(db_path)
    try:  # evaluated under the window's alert settings and stored with the run
        alerts: list[tuple[str, ...]] = [
            (a.kind, a.message, (a.diagnosis or {}).get("text", "")) for a in refresh_alerts(db, run_id, settings)
        ]
        planned = get_run(db, run_id).planned_cost_usd
        breakdown = from_dict(summarize(db, run_id, with_alerts=False).time_breakdown)
    finally:
        db.close()
    return alerts, planned, breakdown
