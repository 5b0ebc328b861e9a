"""Why a run failed, as the history keeps it: the trainer's error and the tail of its stderr.

Storage (no schema change): one launcher event of kind ``failure`` (see
:mod:`gpuplanner.history.launcher_events`) per failed attempt, whose ``detail_json`` holds
``{"error", "exit_code", "stderr_tail", "host", "run_dir"}`` (and ``stderr_problem`` when the tail
could not be read). The trainer's own ``run_end`` keeps its ``error`` field; the failure event adds
what only the host's ``TAG.err`` file had (tracebacks, import errors, a bad flag before telemetry
started). :class:`~gpuplanner.launch.manager.RunManager` records it for every run it launched, whichever
front end launched it (:mod:`gpuplanner.launch.run_failure` reads the tail).
"""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database

from gpuplanner.history.launcher_events import load_detail, record_launcher_event

FAILURE_KIND = "failure"


def run_end_error(db: Database, run_id: int) -> tuple[str | None, int | None]:
    """The trainer's ``run_end`` error and exit code, when it wrote one."""
    row = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    detail = load_detail(row[0]) if row else {}
    code = detail.get("exit_code")
    return (str(detail["error"]) if detail.get("error") else None), (code if isinstance(code, int) else None)


def load_failure(db: Database, run_id: int) -> dict[str, Any] | None:
    """The stored failure of a run (its newest ``failure`` event), else the ``run_end`` error, else None."""
    row = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = ? ORDER BY seq LIMIT 1", [run_id, FAILURE_KIND]
    ).fetchone()
    if row:
        return load_detail(row[0])
    error, code = run_end_error(db, run_id)
    if error:
        return {"error": error, "exit_code": code, "stderr_tail": ""}
    return None


def record_failure(db: Database, run_id: int, detail: dict[str, Any]) -> None:
    """Keep ``detail`` as the run's ``failure`` event (one per failed attempt: a resumed run may fail again)."""
    record_launcher_event(db, run_id, FAILURE_KIND, detail)
