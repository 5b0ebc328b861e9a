"""Run rows: create, find, list and delete runs (the telemetry itself arrives through ingest).

An events file belongs to one run (``run_streams``, keyed by the file's resolved path):
:func:`run_for_stream` finds or creates that run in one ``BEGIN IMMEDIATE`` transaction, so any number
of processes importing one file at once end up with one run, and importing the run directory of a run
that ``gpuplanner run`` launched finds that run instead of making a copy.

A run's ``config`` is the trainer's own ``run_start`` config (what it really ran; a user command's run
also keeps the plan facts it was launched with); ``launch`` is what GPU Planner launched
(:class:`LaunchDocument`), None for an imported run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction
from gpuplanner.history.tags import check_tags, insert_tags

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
    "launch_json",
)


class LaunchDocument(TypedDict, total=False):
    """What GPU Planner launched (``runs.launch_json``): the bundled trainer's flags or the user's own
    command with its working directory, and ``launch`` (nodes, process groups, restarts, price, budget ...:
    ``gpuplanner.launch.manager``'s launch record)."""

    trainer_args: list[str]
    command: list[str]
    workdir: str | None
    launch: dict[str, Any]


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
    launch_json: str | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The trainer's ``run_start`` config ({} until it arrives)."""
        return json_object(self.config_json)

    @property
    def launch(self) -> LaunchDocument | None:
        """What GPU Planner launched; None for an imported run."""
        value = json_object(self.launch_json)
        return LaunchDocument(**value) if value else None  # type: ignore[typeddict-item]


def json_object(text: str | None) -> dict[str, Any]:
    """A JSON object stored in a text column; {} for nothing, damage or another JSON type."""
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):  # damaged outside the app: nothing rather than a crash
        return {}
    return value if isinstance(value, dict) else {}


# The next run id: above every id the history holds or ever held (schema v9 keeps deleted ids), so a deleted
# run's id, and the folder named after it, never come back. One statement: a concurrent writer waits.
NEXT_RUN_ID = (
    "SELECT 1 + MAX(COALESCE((SELECT MAX(id) FROM runs), 0), COALESCE((SELECT MAX(id) FROM deleted_run_ids), 0))"
)


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
    tags: Mapping[str, str] | None = None,
    launch: LaunchDocument | None = None,
) -> int:
    """Insert a run (status ``running``) and return its id. ``planned`` keys: hours, cost_usd,
    peak_mem_bytes, tokens_per_s, samples_per_s; ``tags`` (``key: value``) are stored with it, in the same
    transaction (bad tags raise :class:`~gpuplanner.history.tags.TagError` and store nothing)."""
    tags = check_tags(tags)
    with write_transaction(db):
        run_id = _insert_run(
            db,
            name=name,
            host=host,
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            price_usd_per_gpu_hour=price_usd_per_gpu_hour,
            pricing=pricing,
            model_name=model_name,
            config=config,
            plan_id=plan_id,
            source=source,
            started_at=started_at,
            planned=planned,
            launch=launch,
        )
        insert_tags(db, run_id, tags)
        return run_id


def _insert_run(
    db: Database,
    *,
    name: str | None,
    host: str | None,
    gpu_type: str | None,
    gpu_count: int | None,
    price_usd_per_gpu_hour: float | None,
    pricing: str,
    model_name: str | None,
    config: dict[str, Any] | None,
    plan_id: int | None,
    source: str | None,
    started_at: float | None,
    planned: dict[str, float | None] | None,
    launch: LaunchDocument | None = None,
) -> int:
    """The INSERT of :func:`create_run`, inside the caller's write transaction."""
    if pricing not in PRICING:
        raise ValueError(f"pricing must be one of {PRICING}, not {pricing!r}")
    if gpu_count is not None and gpu_count < 1:
        raise ValueError("gpu_count must be at least 1")
    if price_usd_per_gpu_hour is not None and not 0 <= price_usd_per_gpu_hour < float("inf"):
        raise ValueError("price must be a finite number, 0 or more")
    planned = planned or {}
    host_id = None
    if host:
        row = db.execute("SELECT id FROM hosts WHERE name = ?", [host]).fetchone()
        host_id = row[0] if row else None
    cursor = db.execute(
        "INSERT INTO runs (id, name, host_id, host, gpu_type, gpu_count, price_usd_per_gpu_hour, pricing, model_name,"
        " config_json, plan_id, status, started_at, planned_hours, planned_cost_usd, planned_peak_mem_bytes,"
        " planned_tokens_per_s, planned_samples_per_s, source, created_at, launch_json)"
        f" VALUES (({NEXT_RUN_ID}),?,?,?,?,?,?,?,?,?,?,'running',?,?,?,?,?,?,?,?,?)",
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
            json.dumps(launch) if launch is not None else None,
        ],
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


LAUNCH_SOURCE_PREFIX = "launch:"  # runs.source of runs started by `gpuplanner run` / the window


def run_for_stream(db: Database, events_path: str | os.PathLike[str], **create: Any) -> tuple[int, str, bool]:
    """The run that owns an events file, created (``create``: :func:`create_run`'s keywords) if none does.

    Returns ``(run_id, stream source name, created)``. The owner is, in order: the run that claimed
    the file before (``run_streams``), a run launched by GPU Planner whose node wrote that file (its
    recorded run directory resolves to the file's folder; the stream name is then the one its live
    watcher uses, so offsets and counts are shared), or a new run. Lookup, insert and claim are one
    ``BEGIN IMMEDIATE`` transaction.
    """
    source = str(Path(events_path).resolve())
    with write_transaction(db):
        row = db.execute("SELECT run_id FROM run_streams WHERE source = ?", [source]).fetchone()
        if row is not None:
            return int(row[0]), _stream_name(db, int(row[0]), source), False
        launched = _launched_run(db, source)
        if launched is not None:
            run_id, stream = launched
            created = False
        else:
            run_id, stream = _insert_run(db, **{**_CREATE_DEFAULTS, **create, "source": source}), source
            created = True
        db.execute("INSERT INTO run_streams (source, run_id) VALUES (?, ?)", [source, run_id])
        return run_id, stream, created


_CREATE_DEFAULTS: dict[str, Any] = {
    "name": None,
    "host": None,
    "gpu_type": None,
    "gpu_count": None,
    "price_usd_per_gpu_hour": None,
    "pricing": "on_demand",
    "model_name": None,
    "config": None,
    "plan_id": None,
    "started_at": None,
    "planned": None,
}


def _node_streams(launch_json: str | None) -> list[tuple[str, str]]:
    """(host, run_dir) of each node a launched run recorded; nothing for anything unreadable."""
    try:
        nodes = json.loads(launch_json or "{}").get("launch", {}).get("nodes", [])
        return [(str(n["host"]), str(n["run_dir"])) for n in nodes if n.get("run_dir")]
    except (ValueError, TypeError, AttributeError, KeyError):
        return []


def _launched_run(db: Database, source: str) -> tuple[int, str] | None:
    folder = str(Path(source).parent)
    name = Path(source).name
    rows = db.execute(
        "SELECT id, launch_json FROM runs WHERE source LIKE ? AND launch_json LIKE '%\"run_dir\"%' ORDER BY id",
        [LAUNCH_SOURCE_PREFIX + "%"],
    ).fetchall()
    for run_id, launch_json in rows:
        for host, run_dir in _node_streams(launch_json):
            try:
                same = Path(run_dir).resolve() == Path(folder)
            except (OSError, RuntimeError, ValueError):
                same = False
            if same:
                # the live watcher's stream name (gpuplanner.launch.streaming.source_name)
                return int(run_id), f"{host}:{run_dir}/{name}"
    return None


def _stream_name(db: Database, run_id: int, source: str) -> str:
    """The stream name under which the run reads ``source``: its watcher's, for a launched run."""
    row = db.execute("SELECT source FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None or not str(row[0] or "").startswith(LAUNCH_SOURCE_PREFIX):
        return source
    found = _launched_run(db, source)
    return found[1] if found is not None and found[0] == run_id else source


def get_run(db: Database, run_id: int) -> Run:
    row = db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        raise HistoryError(f"no run with id {run_id}")
    return Run(*row)


def find_run_by_source(db: Database, source: str) -> Run | None:
    """The run that owns a stream (see :func:`run_for_stream`), else the oldest run with that source."""
    row = db.execute(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = (SELECT run_id FROM run_streams WHERE source = ?)",
        [source],
    ).fetchone()
    if row is None:
        row = db.execute(
            f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE source = ? ORDER BY id LIMIT 1", [source]
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
    """Set columns of a run (names from :data:`RUN_COLUMNS`, ``config`` as a dict, ``launch`` as a
    :class:`LaunchDocument`)."""
    if "config" in values:
        values["config_json"] = json.dumps(values.pop("config"))
    if "launch" in values:
        values["launch_json"] = json.dumps(values.pop("launch"))
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
