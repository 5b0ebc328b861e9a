"""Calibration for the planner: measured throughput and peak memory per (GPU type, model).

Sources, in order of trust: finished runs in the history (``source="run"``), then ``trainer bench``
results (``source="bench"``). Throughput is the run's median step throughput (tokens/s and
samples/min for the whole run, and per GPU); peak memory is the largest ``peak_mem_bytes`` a step
reported (per GPU, as the trainer measures on its own device). The planner should prefer these over its
defaults and name the source. Plain data only: this module does not import the planning engine.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import write_transaction

FINISHED = ("finished", "budget_stop", "early_stop")


@dataclass(frozen=True)
class Calibration:
    gpu_type: str
    model_name: str
    source: str  # "run" (measured in finished runs) or "bench" (trainer bench)
    tokens_per_s: float | None  # for the whole run (all its GPUs)
    samples_per_min: float | None
    tokens_per_s_per_gpu: float | None
    samples_per_min_per_gpu: float | None
    peak_mem_bytes: int | None  # per GPU
    gpu_count: int
    n: int  # runs or bench results combined (median)
    ids: tuple[int, ...]  # run ids or bench result ids
    seq_len: int | None
    micro_batch: int | None
    measured_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def record_bench(db: Database, *, gpu_type: str, model_name: str, result: Mapping[str, Any],
                 host: str | None = None, measured_at: float | None = None) -> int:
    """Store one ``trainer bench`` JSON result (keys tokens_per_s, samples_per_s, peak memory, mfu, ...)."""
    def num(*keys: str) -> float | None:
        for key in keys:
            value = result.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        return None

    peak = num("peak_mem_reserved_bytes", "peak_mem_bytes", "peak_mem_allocated_bytes")
    seq_len, micro_batch = num("seq_len"), num("micro_batch")
    with write_transaction(db):
        cursor = db.execute(
            "INSERT INTO bench_results (gpu_type, model_name, host, seq_len, micro_batch, tokens_per_s, samples_per_s,"
            " peak_mem_bytes, mfu, result_json, measured_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [gpu_type, model_name, host, int(seq_len) if seq_len else None, int(micro_batch) if micro_batch else None,
             num("tokens_per_s"), num("samples_per_s"), int(peak) if peak is not None else None, num("mfu"),
             json.dumps(dict(result)), measured_at if measured_at is not None else time.time()])
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _from_runs(db: Database, gpu_type: str | None, model_name: str | None) -> list[Calibration]:
    sql = ("SELECT r.id, r.gpu_type, r.model_name, COALESCE(r.gpu_count, 1), r.config_json, r.ended_at,"
           " (SELECT MAX(peak_mem_bytes) FROM steps s WHERE s.run_id = r.id) FROM runs r"
           f" WHERE r.status IN ({', '.join('?' * len(FINISHED))}) AND r.gpu_type IS NOT NULL AND r.model_name IS NOT NULL")
    params: list[Any] = list(FINISHED)
    if gpu_type:
        sql += " AND r.gpu_type = ?"
        params.append(gpu_type)
    if model_name:
        sql += " AND r.model_name = ?"
        params.append(model_name)
    groups: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in db.execute(sql + " ORDER BY r.id", params).fetchall():
        run_id = row[0]
        throughput = db.execute("SELECT tokens_per_s, samples_per_s FROM steps WHERE run_id = ?", [run_id]).fetchall()
        tps = _median([r[0] for r in throughput])
        sps = _median([r[1] for r in throughput])
        if tps is None and sps is None:
            continue
        groups.setdefault((row[1], row[2]), []).append((*row, tps, sps))
    out = []
    for (gpu, model), rows in groups.items():
        tps = _median([r[7] for r in rows])
        spm = _median([r[8] * 60.0 if r[8] is not None else None for r in rows])
        per_gpu_t = _median([r[7] / r[3] if r[7] is not None else None for r in rows])
        per_gpu_s = _median([r[8] * 60.0 / r[3] if r[8] is not None else None for r in rows])
        peaks = [r[6] for r in rows if r[6] is not None]
        config = json.loads(rows[-1][4]) if rows[-1][4] else {}
        out.append(Calibration(gpu, model, "run", tps, spm, per_gpu_t, per_gpu_s, max(peaks) if peaks else None,
                               int(statistics.median(r[3] for r in rows)), len(rows), tuple(r[0] for r in rows),
                               _int_or_none(_num(config.get("seq_len"))), _int_or_none(_num(config.get("micro_batch"))),
                               max((r[5] or 0.0) for r in rows)))
    return out


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_bench(db: Database, gpu_type: str | None, model_name: str | None) -> list[Calibration]:
    sql = "SELECT id, gpu_type, model_name, seq_len, micro_batch, tokens_per_s, samples_per_s, peak_mem_bytes," \
          " measured_at FROM bench_results WHERE 1"
    params: list[Any] = []
    if gpu_type:
        sql += " AND gpu_type = ?"
        params.append(gpu_type)
    if model_name:
        sql += " AND model_name = ?"
        params.append(model_name)
    groups: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in db.execute(sql + " ORDER BY id", params).fetchall():
        groups.setdefault((row[1], row[2]), []).append(row)
    out = []
    for (gpu, model), rows in groups.items():
        tps = _median([r[5] for r in rows])
        spm = _median([r[6] * 60.0 if r[6] is not None else None for r in rows])
        peaks = [r[7] for r in rows if r[7] is not None]
        out.append(Calibration(gpu, model, "bench", tps, spm, tps, spm, max(peaks) if peaks else None, 1, len(rows),
                               tuple(r[0] for r in rows), rows[-1][3], rows[-1][4], max(r[8] for r in rows)))
    return out


def measurements(db: Database, *, gpu_type: str | None = None,
                 model_name: str | None = None) -> dict[tuple[str, str], Calibration]:
    """The best calibration per (gpu_type, model_name): finished runs first, else bench results."""
    best: dict[tuple[str, str], Calibration] = {}
    for cal in _from_bench(db, gpu_type, model_name) + _from_runs(db, gpu_type, model_name):
        best[(cal.gpu_type, cal.model_name)] = cal  # runs come last and win
    return best


def lookup(db: Database, gpu_type: str, model_name: str) -> Calibration | None:
    """The calibration for one GPU type and model, or None when nothing was measured."""
    return measurements(db, gpu_type=gpu_type, model_name=model_name).get((gpu_type, model_name))
