"""A small history for the metrics endpoint's tests: a live run, a finished Slurm run and an old run, on a
real SQLite file, with times relative to a chosen ``now``."""

from __future__ import annotations

import json
from pathlib import Path

from gpuplanner.history import ingest_records, open_db
from gpuplanner.history.db import write_transaction
from gpuplanner.history.runs import create_run
from tests.history.streams import GIB, StreamBuilder

LIVE_MINUTES = 30


def launcher_event(db_path: Path, run_id: int, t: float, kind: str, detail: dict[str, object]) -> None:
    """An event as the launcher records it (negative seq, beside the trainer's own records)."""
    with open_db(db_path) as db, write_transaction(db):
        low = db.execute("SELECT MIN(seq) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
        db.execute(
            "INSERT INTO events (run_id, seq, t, kind, step, detail_json) VALUES (?,?,?,?,?,?)",
            [run_id, min(-1, (low or 0) - 1), t, kind, None, json.dumps(detail)],
        )


def seed(db_path: Path, now: float) -> dict[str, int]:
    """Run ids by role: ``live`` (2 GPUs on h1 for the last 30 minutes, GPU 0 at 80 %, GPU 1 idle at 2 %,
    budget $50, tag project=search), ``slurm`` (finished 2 h ago, 1 GPU at 50 % for an hour, waited 90 s
    in the queue, tag project=vision) and ``old`` (ended 40 days ago, untagged)."""
    ids = {}
    with open_db(db_path) as db:
        live = StreamBuilder(t0=now - LIVE_MINUTES * 60.0)
        live.add("run_start", 0.0, config={"model_name": "gpt2", "budget_usd": 50.0}, host="h1", gpus=2)
        for i in range(LIVE_MINUTES):
            live.gpu(i * 60.0 + 1.0, 0, 80.0, mem_used=30 * GIB, power=410.0)
            live.gpu(i * 60.0 + 1.0, 1, 2.0, mem_used=1 * GIB, power=90.0)
            live.step(i * 60.0 + 2.0, i, samples_total=10 * i, tokens_total=5120 * i, tokens_per_s=900.0 + i)
        ids["live"] = create_run(
            db, gpu_count=2, price_usd_per_gpu_hour=3.0, gpu_type="H100", tags={"project": "search"}
        )
        ingest_records(db, ids["live"], live.records)

        slurm = StreamBuilder(t0=now - 3 * 3600.0)
        slurm.add("run_start", 0.0, config={"model_name": "gpt2"}, host="cluster", gpus=1)
        for i in range(60):
            slurm.gpu(i * 60.0 + 1.0, 0, 50.0)
            slurm.step(i * 60.0 + 2.0, i, samples_total=10 * i, tokens_total=2048 * i)
        slurm.add("run_end", 3600.0, status="finished", totals={})
        ids["slurm"] = create_run(
            db, gpu_count=1, price_usd_per_gpu_hour=2.0, gpu_type="A100", tags={"project": "vision"}
        )
        ingest_records(db, ids["slurm"], slurm.records)

        old = StreamBuilder(t0=now - 41 * 86400.0)
        old.add("run_start", 0.0, config={}, host="h1", gpus=4)
        old.gpu(1.0, 0, 90.0)
        old.add("run_end", 86400.0, status="finished", totals={})
        ids["old"] = create_run(db, gpu_count=4, price_usd_per_gpu_hour=1.0, gpu_type="L4")
        ingest_records(db, ids["old"], old.records)
    slurm_t = now - 3 * 3600.0 - 90.0
    launcher_event(
        db_path,
        ids["slurm"],
        slurm_t,
        "slurm_job",
        {"job_id": 7, "state": "PENDING", "reason": "Resources", "submit_t": slurm_t},
    )
    launcher_event(
        db_path,
        ids["slurm"],
        slurm_t + 90.0,
        "slurm_job",
        {"job_id": 7, "state": "RUNNING", "submit_t": slurm_t, "queue_wait_s": 90.0},
    )
    return ids
