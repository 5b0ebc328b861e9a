"""Run rows: create, find, list and delete runs (the telemetry itself arrives through ingest)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction

PRICING = ("on_demand", "spot")
RUN_COLUMNS = (
    "id",
    "name",
    "host_id",
    "host",
    "gpu_type",
    "gpu_count",
    "price_usd_per_gpu_hour",
    "pricing",
    "model_name",
    "config_json",
    "plan_id",
    "status",
    "started_at",
    "ended_at",
    "first_t",
    "last_t",
    "planned_hours",
    "planned_cost_usd",
    "planned_peak_mem_bytes",
    "planned_tokens_per_s",
    "planned_samples_per_s",
    "source",
    "created_at",
)


@dataclass(frozen=True)
class Run:
    id: int
    name: str | None
    host_id: int | None
    host: str | None
    gpu_type: str | None
    gpu_count: int | None
    price_usd_per_gpu_hour: float | None
    pricing: str
    model_name: str | None
    config_json: str | None
    plan_id: int | None
    status: str
    started_at: float | None
    ended_at: float | None
    first_t: float | None
    last_t: float | None
    planned_hours: float | None
    planned_cost_usd: float | None
    planned_peak_mem_bytes: int | None
    planned_tokens_per_s: float | None
    planned_samples_per_s: float | None
    source: str | None
    created_at: float

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json) if self.config_json else {}


def create_run(
    db: Database,
    *,
    name: str | None = None,
    host: str | None = None,
    gpu_type: str | None = None,
    gpu_count: int | None = None,
    price_usd_per_gpu_hour: float | None = None,
    pricing: str = "on_demand",
    model_name: str | None = None,
    config: dict[str, Any] | None = None,
    plan_id: int | None = None,
    source: str | None = None,
    started_at: float | None = None,
    planned: dict[str, float | None] | None = None,
) -> int:
    """Insert a run (status ``running``) and return its id. ``planned`` keys: hours, cost_usd,
    peak_mem_bytes, tokens_per_s, samples_per_s."""
    if pricing not in PRICING:
        raise ValueError(f"pricing must be one of {PRICING}, not {pricing!r}")
    if gpu_count is not None and gpu_count < 1:
        raise ValueError("gpu_count must be at least 1")
    if price_usd_per_gpu_hour is not None and price_usd_per_gpu_hour < 0:
        raise ValueError("price must not be negative")
    planned = planned or {}
    with write_transaction(db):
        host_id = None
        if host:
            row = db.execute("SELECT id FROM hosts WHERE name = ?", [host]).fetchone()
            host_id = row[0] if row else None
        cursor = db.execute(
            "INSERT INTO runs (name, host_id, host, gpu_type, gpu_count, price_usd_per_gpu_hour, pricing, model_name,"
            " config_json, plan_id, status, started_at, planned_hours, planned_cost_usd, planned_peak_mem_bytes,"
            " planned_tokens_per_s, planned_samples_per_s, source, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,'running',?,?,?,?,?,?,?,?)",
            [
                name,
                host_id,
                host,
                gpu_type,
                gpu_count,
                price_usd_per_gpu_hour,
                pricing,
                model_name,
                json.dumps(config) if config is not None else None,
                plan_id,
                started_at,
                planned.get("hours"),
                planned.get("cost_usd"),
                planned.get("peak_mem_bytes"),
                planned.get("tokens_per_s"),
                planned.get("samples_per_s"),
                source,
                time.time(),
            ],
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def get_run(db: Database, run_id: int) -> Run:
    row = db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        raise HistoryError(f"no run with id {run_id}")
    return Run(*row)


def find_run_by_source(db: Database, source: str) -> Run | None:
    row = db.execute(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE source = ? ORDER BY id DESC LIMIT 1", [source]
    ).fetchone()
    return Run(*row) if row else None


def list_runs(db: Database, *, limit: int | None = None, status: str | None = None) -> list[Run]:
    """Runs, newest first."""
    sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"
    params: list[Any] = []
    if status:
        sql += " WHERE status = ?"
        params.append(status)
    sql += " ORDER BY COALESCE(started_at, first_t, created_at) DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [Run(*row) for row in db.execute(sql, params).fetchall()]


def update_run(db: Database, run_id: int, **values: Any) -> None:
    """Set columns of a run (names from :data:`RUN_COLUMNS`, ``config`` as a dict)."""
    if "config" in values:
        values["config_json"] = json.dumps(values.pop("config"))
    bad = [k for k in values if k not in RUN_COLUMNS or k == "id"]
    if bad:
        raise ValueError(f"unknown run columns: {', '.join(bad)}")
    if not values:
        return
    with write_transaction(db):
        cursor = db.execute(
            f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", [*values.values(), run_id]
        )
        if cursor.rowcount == 0:
            raise HistoryError(f"no run with id {run_id}")


def delete_run(db: Database, run_id: int) -> None:
    """Delete a run and everything recorded for it."""
    with write_transaction(db):
        if db.execute("DELETE FROM runs WHERE id = ?", [run_id]).rowcount == 0:
            raise HistoryError(f"no run with id {run_id}")
