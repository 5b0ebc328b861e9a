"""Saved plans: the planning engine's ``plan --json`` document stored as JSON (inputs and results)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction

GIB = 1 << 30


@dataclass(frozen=True)
class SavedPlan:
    id: int
    name: str
    created_at: float
    updated_at: float
    inputs: dict[str, Any]
    results: dict[str, Any]

    @property
    def document(self) -> dict[str, Any]:
        """The plan document as the engine printed it (``inputs`` plus the result keys)."""
        return {"inputs": self.inputs, **self.results}


def save_plan(db: Database, name: str, document: dict[str, Any], *, plan_id: int | None = None) -> int:
    """Store a plan document (keys inputs, memory, throughput, runtime, on_demand, spot, ...); with
    ``plan_id`` replace that plan's document and name. Returns the plan id."""
    if not name.strip():
        raise ValueError("a saved plan needs a name")
    if not isinstance(document, dict):
        raise ValueError("a plan document is a JSON object")
    inputs = document.get("inputs", {})
    results = {k: v for k, v in document.items() if k != "inputs"}
    now = time.time()
    with write_transaction(db):
        if plan_id is None:
            cursor = db.execute(
                "INSERT INTO plans (name, created_at, updated_at, inputs_json, results_json) VALUES (?,?,?,?,?)",
                [name, now, now, json.dumps(inputs), json.dumps(results)],
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid
        cursor = db.execute(
            "UPDATE plans SET name = ?, updated_at = ?, inputs_json = ?, results_json = ? WHERE id = ?",
            [name, now, json.dumps(inputs), json.dumps(results), plan_id],
        )
        if cursor.rowcount == 0:
            raise HistoryError(f"no plan with id {plan_id}")
        return plan_id


def _plan(row: tuple[Any, ...]) -> SavedPlan:
    return SavedPlan(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]))


def get_plan(db: Database, plan_id: int) -> SavedPlan:
    row = db.execute(
        "SELECT id, name, created_at, updated_at, inputs_json, results_json FROM plans WHERE id = ?", [plan_id]
    ).fetchone()
    if row is None:
        raise HistoryError(f"no plan with id {plan_id}")
    return _plan(row)


def list_plans(db: Database) -> list[SavedPlan]:
    """Saved plans, most recently updated first."""
    return [
        _plan(row)
        for row in db.execute(
            "SELECT id, name, created_at, updated_at, inputs_json, results_json FROM plans ORDER BY updated_at DESC, id DESC"
        ).fetchall()
    ]


def delete_plan(db: Database, plan_id: int) -> None:
    """Delete a saved plan; runs launched from it keep their planned figures."""
    with write_transaction(db):
        if db.execute("DELETE FROM plans WHERE id = ?", [plan_id]).rowcount == 0:
            raise HistoryError(f"no plan with id {plan_id}")


def planned_figures(document: dict[str, Any], pricing: str = "on_demand") -> dict[str, float | None]:
    """The figures a run is compared against, from a plan document (``create_run(planned=...)``)."""

    def pick(*path: str) -> float | None:
        value: Any = document
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    block = "spot" if pricing == "spot" else "on_demand"
    total_gib = pick("memory", "total_gib")
    samples_per_min = pick("throughput", "samples_per_min")
    return {
        "hours": pick(block, "hours") if pick(block, "hours") is not None else pick("runtime", "hours"),
        "cost_usd": pick(block, "cost_usd"),
        "peak_mem_bytes": round(total_gib * GIB) if total_gib is not None else None,
        "tokens_per_s": pick("throughput", "tokens_per_s"),
        "samples_per_s": samples_per_min / 60.0 if samples_per_min is not None else None,
    }
