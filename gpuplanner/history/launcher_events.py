"""Launcher events: what this machine's launcher (not the trainer) records about a run.

They live in the history's ``events`` table beside the trainer's records, with negative ``seq``
(each new one one lower than the lowest so far), so they never collide with the trainer's seq >= 0.
Their ``t`` is this machine's clock. Kinds written: ``restart``, ``user_stop``, ``failure``,
``preflight``, ``billed``, ``slurm_job``, ``orphan_stopped``, ``relabelled`` (``runs import --relabel``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import write_transaction


def insert_launcher_event(db: Database, run_id: int, kind: str, detail: dict[str, Any]) -> int:
    """Add one launcher event inside the caller's transaction; returns its (negative) seq."""
    low = db.execute("SELECT MIN(seq) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
    seq = min(-1, int(low or 0) - 1)
    db.execute(
        "INSERT INTO events (run_id, seq, t, kind, step, detail_json) VALUES (?,?,?,?,?,?)",
        [run_id, seq, time.time(), kind, None, json.dumps(detail)],
    )
    return seq


def record_launcher_event(db: Database, run_id: int, kind: str, detail: dict[str, Any]) -> int:
    """Add one launcher event in its own write transaction; returns its (negative) seq."""
    with write_transaction(db):
        return insert_launcher_event(db, run_id, kind, detail)


def load_detail(raw: object) -> dict[str, Any]:
    """An event's stored ``detail_json`` as a dict ({} for anything else)."""
    try:
        doc = json.loads(raw) if isinstance(raw, (str, bytes)) and raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
