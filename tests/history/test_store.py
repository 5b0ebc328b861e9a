"""The database file: where it lives, its settings, and migrations that keep every row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database

from gpuplanner.history import db as db_mod
from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import HistoryError, connect, open_db, resolve_db_path, schema_version
from gpuplanner.history.schema import MIGRATIONS, SCHEMA_VERSION
from tests.history.conftest import dump
from tests.history.streams import hand_computed_run


def test_db_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = Path(str(tmp_path / "data"))
    monkeypatch.setenv("GPUPLANNER_DATA_DIR", str(data))
    assert resolve_db_path() == data / "history.sqlite"
    monkeypatch.setenv("GPUPLANNER_DB", str(tmp_path / "env.sqlite"))
    assert resolve_db_path() == tmp_path / "env.sqlite"
    assert resolve_db_path(tmp_path / "flag.sqlite") == tmp_path / "flag.sqlite"


def test_open_creates_file_with_wal_and_foreign_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANNER_DATA_DIR", str(tmp_path / "deep" / "data"))
    with open_db() as db:
        assert db.journal_mode == "wal"
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert schema_version(db) == SCHEMA_VERSION == 10
        assert {
            "runs",
            "gpu_samples",
            "steps",
            "evals",
            "events",
            "stream_positions",
            "plans",
            "hosts",
            "run_gpus",
            "gpu_intervals",
            "gpu_samples_1m",
            "bench_results",
            "run_phases",
        } <= set(db.table_names())
    assert (tmp_path / "deep" / "data" / "history.sqlite").is_file()
    assert not list((tmp_path / "deep" / "data").glob("*.bak"))  # nothing to back up in a new file


def test_open_without_create_refuses_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history database"):
        open_db(tmp_path / "missing.sqlite", create=False)


def _v1_database(path: Path) -> Database:
    """A database at schema version 1 holding a run with telemetry, a plan and a host."""
    db = connect(path)
    MIGRATIONS.apply(db, stop_before="m002_rollups_pricing_downsampling")
    db.execute("PRAGMA user_version = 1")
    with db_mod.write_transaction(db):
        db.execute("INSERT INTO hosts (name, created_at) VALUES ('box', 1)")
        db.execute(
            "INSERT INTO plans (name, created_at, updated_at, inputs_json, results_json) VALUES ('p', 1, 1, '{}', '{}')"
        )
        db.execute(
            "INSERT INTO runs (id, gpu_count, price_per_gpu_hour, spot, status, created_at, plan_id)"
            " VALUES (1, 8, 8.0, 1, 'running', 1, 1)"
        )
        db.execute(
            "INSERT INTO runs (id, gpu_count, price_per_gpu_hour, spot, status, created_at)"
            " VALUES (2, 1, 2.5, 0, 'running', 1)"
        )
        for record in hand_computed_run().records:  # v1 rows written as the v1 ingester did
            kind, seq, t = record["kind"], record["seq"], record["t"]
            if kind == "gpu":
                db.execute(
                    "INSERT INTO gpu_samples VALUES (1,?,?,?,?,?,?,?,?,?,?,?,0)",
                    [
                        seq,
                        t,
                        record["node"],
                        record["index"],
                        record["util_pct"],
                        record["mem_used_bytes"],
                        record["mem_total_bytes"],
                        record["power_w"],
                        record["temp_c"],
                        record["sm_clock_mhz"],
                        record["throttle_reasons"],
                    ],
                )
            elif kind == "step":
                db.execute(
                    "INSERT INTO steps (run_id, seq, t, step, samples_total, tokens_total, step_time_s,"
                    " data_wait_s, tokens_per_s, samples_per_s) VALUES (1,?,?,?,?,?,?,?,?,?)",
                    [
                        seq,
                        t,
                        record["step"],
                        record["samples_total"],
                        record["tokens_total"],
                        record["step_time_s"],
                        record["data_wait_s"],
                        record["tokens_per_s"],
                        record["samples_per_s"],
                    ],
                )
            else:
                db.execute("INSERT INTO events (run_id, seq, t, kind) VALUES (1,?,?,?)", [seq, t, kind])
        db.execute(
            "UPDATE runs SET first_t = ?, last_t = ?, status = 'finished' WHERE id = 1",
            [hand_computed_run().records[0]["t"], hand_computed_run().records[-1]["t"]],
        )
    return db


def test_migration_from_v1_keeps_every_row_and_backs_up(db_path: Path) -> None:
    old = _v1_database(db_path)
    counts = {
        t: old.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("hosts", "plans", "runs", "gpu_samples", "steps", "events")
    }
    assert counts["gpu_samples"] == 600 and counts["runs"] == 2
    assert "pricing" not in old["runs"].columns_dict
    old.close()

    with open_db(db_path) as db:
        assert schema_version(db) == 10
        assert [m.name for m in MIGRATIONS.applied(db)] == [
            "m001_initial",
            "m002_rollups_pricing_downsampling",
            "m003_run_streams",
            "m004_gpu_metrics",
            "m005_alerts",
            "m006_time_breakdown",
            "m008_tags",
            "m009_launch_document",
            "m010_run_ids_never_reused",
            "m011_run_logs",
        ]
        # the alerts' per-minute rows were backfilled from the raw samples (each counted once)
        assert db.execute("SELECT SUM(n), SUM(util_sum) / SUM(util_n) FROM gpu_minutes").fetchone() == (
            600,
            pytest.approx(60.0),
        )
        for table, n in counts.items():
            assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == n, table
        assert db.execute("SELECT id, pricing, price_usd_per_gpu_hour, plan_id FROM runs ORDER BY id").fetchall() == [
            (1, "spot", 8.0, 1),
            (2, "on_demand", 2.5, None),
        ]
        assert "spot" not in db["runs"].columns_dict
        # the rollups were backfilled from the raw samples: the summary is right at once
        summary = summarize(db, 1)
        assert summary.gpu_hours == pytest.approx(10.0)
        assert summary.avg_util_pct == pytest.approx(60.0)
        assert summary.cost_usd == pytest.approx(80.0)
        assert sum(summary.util_histogram) == 600
        # samples stored before v4 carry none of the deeper metrics: missing, never 0
        assert summary.effective_gpu_hours_sm is None and summary.avg_sm_active_pct is None
        assert all(gpu["sm_active_pct"] is None and "sm_active_pct" in gpu["missing"] for gpu in summary.gpus)
    backups = list(db_path.parent.glob("history.sqlite.v1-*.bak"))
    assert len(backups) == 1
    with sqlite3.connect(backups[0]) as conn:  # the backup is the untouched v1 database
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0] == 600
    with open_db(db_path) as db:  # opening again migrates nothing and backs up nothing
        assert len(dump(db, 1)["gpu_samples"]) == 600
    assert len(list(db_path.parent.glob("*.bak"))) == 1


def test_newer_schema_is_refused(db_path: Path) -> None:
    open_db(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(HistoryError, match="newer"):
        open_db(db_path)
