"""Fixtures of the history tests: a fresh real SQLite file per test, and row dumps to compare stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlite_utils import Database

from gpuplanner.history import open_db


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


@pytest.fixture
def db(db_path: Path) -> Iterator[Database]:
    database = open_db(db_path)
    yield database
    database.close()


DUMPS = {
    "runs": "SELECT status, host, gpu_count, model_name, config_json, started_at, ended_at, first_t, last_t,"
    " price_usd_per_gpu_hour, compacted_before_seq FROM runs WHERE id = ?",
    "gpu_samples": "SELECT * FROM gpu_samples WHERE run_id = ? ORDER BY seq",
    "steps": "SELECT * FROM steps WHERE run_id = ? ORDER BY seq",
    "evals": "SELECT * FROM evals WHERE run_id = ? ORDER BY seq",
    "events": "SELECT * FROM events WHERE run_id = ? ORDER BY seq",
    "run_gpus": "SELECT * FROM run_gpus WHERE run_id = ? ORDER BY node, gpu_index",
    "gpu_intervals": "SELECT node, gpu_index, kind, start_t, end_t, n, peak FROM gpu_intervals WHERE run_id = ?"
    " ORDER BY kind, node, gpu_index, start_t",
    "stream_positions": "SELECT byte_offset, last_seq, malformed, unknown_kind FROM stream_positions WHERE run_id = ?",
}


def dump(db: Database, run_id: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every stored row of a run, ids that differ between stores left out."""
    out = {}
    for name, sql in DUMPS.items():
        cursor = db.execute(sql, [run_id])
        rows = cursor.fetchall()
        if name == "run_gpus":  # the run id and interval ids may differ
            keep = [
                k
                for k, d in enumerate(cursor.description)
                if d[0] not in ("run_id", "low_interval_id", "mem_interval_id")
            ]
            rows = [tuple(row[k] for k in keep) for row in rows]
        out[name] = rows
    return out
