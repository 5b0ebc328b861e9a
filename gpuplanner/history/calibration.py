"""Calibration for the planner: measured throughput and peak memory per GPU type, model, training
method and sequence length.

Sources, in order of trust: finished runs in the history (``source="run"``), then ``trainer bench``
results (``source="bench"``). A run that trained on the CPU or whose GPU samples are all simulated does
not count (its speed is no GPU's); :func:`calibration_of` says of any run whether it calibrates and why not. Throughput is the run's median step throughput (tokens/s and
samples/min for the whole run, and per GPU); peak memory is the largest ``peak_mem_bytes`` a step
reported (per GPU, as the trainer measures on its own device). Measurements are only combined when
they share the GPU type, the model, the method ("full" or "lora": LoRA skips most weight gradients
and optimizer work, so its speed says little about full training), the sequence length and the
arithmetic ("fp32" or "16-bit": tensor cores make 16-bit several times faster). The
planner should prefer these over its defaults and name the source. Plain data only: this module does
not import the planning engine.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction
from gpuplanner.history.runs import json_object
from trainer.reports import BenchReport
from trainer.settings import METHODS, TrainSettings

FINISHED = ("finished", "budget_stop", "early_stop")
# (gpu_type, model_name, method, seq_len, arithmetic): what must match for measurements to be combined
Key = tuple[str, str, str, int | None, str]
FP32, HALF = "fp32", "16-bit"


@dataclass(frozen=True)
class Calibration:
    gpu_type: str
    model_name: str
    method: str  # "full" or "lora" (or what an imported run's config names)
    arithmetic: str  # "fp32" or "16-bit"
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

    @property
    def key(self) -> Key:
        return (self.gpu_type, self.model_name, self.method, self.seq_len, self.arithmetic)


def arithmetic_of(precision: Any) -> str:
    """ "fp32" for an fp32 run or plan, else "16-bit": the trainer's bf16, fp16 and auto (which picks a
    16-bit type on every GPU) and the planner's bf16-mixed, fp16-mixed and bf16."""
    return FP32 if isinstance(precision, str) and precision.strip().lower() in ("fp32", "float32") else HALF


def method_of(config: Mapping[str, Any]) -> str:
    """The training method a run's config or a bench result describes, read by the settings contract
    (:class:`trainer.settings.TrainSettings`: ``lora_rank`` > 0 is lora, with ``qlora`` qlora; an older
    row's explicit ``method``), else "lora" when fewer parameters were trainable than there are."""
    method = config.get("method")
    if isinstance(method, str) and method.strip() and method.strip().lower() not in METHODS:
        return method.strip().lower()  # a method the contract does not know, named by an imported run
    settings = TrainSettings.from_config(config)
    if settings.method != "full":
        return settings.method
    trainable, total = _num(config.get("trainable_params")), _num(config.get("params"))
    if trainable is not None and total is not None and 0 < trainable < total:
        return "lora"
    return "full"


def record_bench(
    db: Database,
    *,
    gpu_type: str,
    model_name: str,
    result: BenchReport,
    host: str | None = None,
    measured_at: float | None = None,
) -> int:
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
            [
                gpu_type,
                model_name,
                host,
                int(seq_len) if seq_len else None,
                int(micro_batch) if micro_batch else None,
                num("tokens_per_s"),
                num("samples_per_s"),
                int(peak) if peak is not None else None,
                num("mfu"),
                json.dumps(dict(result)),
                measured_at if measured_at is not None else time.time(),
            ],
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def delete_bench(db: Database, bench_id: int) -> None:
    """Forget one stored bench result (e.g. one recorded under the wrong GPU); HistoryError if there is none."""
    with write_transaction(db):
        if db.execute("DELETE FROM bench_results WHERE id = ?", [bench_id]).rowcount == 0:
            raise HistoryError(f"no bench result {bench_id} in the history")


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True)
class CalibrationUse:
    """Whether one run calibrates the planner and, when it does not, why (``runs show``'s ``calibration``)."""

    calibrates: bool
    reason: str | None  # not_finished, no_gpu_type, no_model, cpu, simulated, too_few_steps; None when it does
    detail: str  # in words, for runs show, History and the plan's source line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _hardware_problem(db: Database, run_id: int) -> tuple[str, str] | None:
    """Why a run's speed is not its GPU type's: it trained on the CPU (the trainer's ``device``), or every
    GPU sample was simulated (no NVML where it ran: a CPU-only host, or nvidia-ml-py missing)."""
    row = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    start = json_object(row[0]) if row else {}
    device = start.get("device")
    if isinstance(device, str) and device.strip().lower().startswith("cpu"):
        return "cpu", "it trained on the CPU (device cpu), so its speed is no GPU's"
    n, simulated = db.execute(
        "SELECT COALESCE(SUM(n), 0), COALESCE(SUM(simulated_n), 0) FROM run_gpus WHERE run_id = ?", [run_id]
    ).fetchone()
    if (n and simulated == n) or start.get("gpu_source") == "simulated":
        return (
            "simulated",
            "its GPU samples are simulated (no NVML where it ran: a CPU-only host, or nvidia-ml-py missing),"
            " so its speed is not known to be its GPU type's",
        )
    return None


def calibration_of(db: Database, run_id: int) -> CalibrationUse:
    """Whether the run calibrates the planner (what :func:`measurements` uses it for) and why not: not
    finished, no GPU type or model, a CPU run or simulated GPU samples, or no step that measured a speed."""
    row = db.execute("SELECT status, gpu_type, model_name FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        raise HistoryError(f"no run with id {run_id}")
    status, gpu_type, model = row
    if status not in FINISHED:
        return CalibrationUse(False, "not_finished", f"the run is {status}: only finished runs calibrate")
    if not gpu_type:
        return CalibrationUse(
            False,
            "no_gpu_type",
            "its GPU type is unknown (probe the host with gpuplanner hosts probe, or give runs import --gpu-type)",
        )
    if not model:
        return CalibrationUse(
            False, "no_model", "its model is unknown (launch it with --plan, or give runs import --model)"
        )
    problem = _hardware_problem(db, run_id)
    if problem is not None:
        return CalibrationUse(False, problem[0], problem[1])
    steps, timed = db.execute(
        "SELECT COUNT(*), COUNT(tokens_per_s) + COUNT(samples_per_s) FROM steps WHERE run_id = ?", [run_id]
    ).fetchone()
    if not timed:
        return CalibrationUse(
            False,
            "too_few_steps",
            f"too few steps: {steps} step record(s), none with a measured speed (a speed needs two logged steps)",
        )
    relabel = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'relabelled' ORDER BY seq LIMIT 1", [run_id]
    ).fetchone()
    was = json_object(relabel[0]).get("from") if relabel else None
    note = f" (relabelled from {was} with runs import --relabel)" if isinstance(was, str) else ""
    return CalibrationUse(True, None, f"calibrates the planner's speed of {model} on {gpu_type}{note}")


def not_calibrating(db: Database, model_name: str) -> list[tuple[int, CalibrationUse]]:
    """The finished runs of ``model_name`` that do not calibrate the planner, with why (newest first), for
    the plan's source line."""
    ids = db.execute(
        f"SELECT id FROM runs WHERE model_name = ? AND status IN ({', '.join('?' * len(FINISHED))}) ORDER BY id DESC",
        [model_name, *FINISHED],
    ).fetchall()
    out = []
    for (run_id,) in ids:
        use = calibration_of(db, run_id)
        if not use.calibrates:
            out.append((run_id, use))
    return out


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _from_runs(db: Database, gpu_type: str | None, model_name: str | None) -> list[Calibration]:
    sql = (
        "SELECT r.id, r.gpu_type, r.model_name, COALESCE(r.gpu_count, 1), r.config_json, r.ended_at,"
        " (SELECT MAX(peak_mem_bytes) FROM steps s WHERE s.run_id = r.id) FROM runs r"
        f" WHERE r.status IN ({', '.join('?' * len(FINISHED))}) AND r.gpu_type IS NOT NULL AND r.model_name IS NOT NULL"
    )
    params: list[Any] = list(FINISHED)
    if gpu_type:
        sql += " AND r.gpu_type = ?"
        params.append(gpu_type)
    if model_name:
        sql += " AND r.model_name = ?"
        params.append(model_name)
    groups: dict[Key, list[tuple[Any, ...]]] = {}
    for run_id, gpu, model, gpus, config_json, ended_at, peak in db.execute(sql + " ORDER BY r.id", params).fetchall():
        if _hardware_problem(db, run_id) is not None:  # a CPU run's speed is no GPU's (calibration_of says why)
            continue
        throughput = db.execute("SELECT tokens_per_s, samples_per_s FROM steps WHERE run_id = ?", [run_id]).fetchall()
        tps = _median([r[0] for r in throughput])
        sps = _median([r[1] for r in throughput])
        if tps is None and sps is None:
            continue
        config = json_object(config_json)  # the trainer's run_start config
        settings = TrainSettings.from_config(config)
        key = (gpu, model, method_of(config), settings.seq_len, arithmetic_of(settings.precision))
        groups.setdefault(key, []).append((run_id, gpus, ended_at, peak, tps, sps, config))
    out = []
    for (gpu, model, method, seq_len, arithmetic), rows in groups.items():
        tps = _median([r[4] for r in rows])
        spm = _median([r[5] * 60.0 if r[5] is not None else None for r in rows])
        per_gpu_t = _median([r[4] / r[1] if r[4] is not None else None for r in rows])
        per_gpu_s = _median([r[5] * 60.0 / r[1] if r[5] is not None else None for r in rows])
        peaks = [r[3] for r in rows if r[3] is not None]
        out.append(
            Calibration(
                gpu,
                model,
                method,
                arithmetic,
                "run",
                tps,
                spm,
                per_gpu_t,
                per_gpu_s,
                max(peaks) if peaks else None,
                int(statistics.median(r[1] for r in rows)),
                len(rows),
                tuple(r[0] for r in rows),
                seq_len,
                TrainSettings.from_config(rows[-1][6]).micro_batch,
                max((r[2] or 0.0) for r in rows),
            )
        )
    return out


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_bench(db: Database, gpu_type: str | None, model_name: str | None) -> list[Calibration]:
    sql = (
        "SELECT id, gpu_type, model_name, seq_len, micro_batch, tokens_per_s, samples_per_s, peak_mem_bytes,"
        " measured_at, result_json FROM bench_results WHERE 1"
    )
    params: list[Any] = []
    if gpu_type:
        sql += " AND gpu_type = ?"
        params.append(gpu_type)
    if model_name:
        sql += " AND model_name = ?"
        params.append(model_name)
    groups: dict[Key, list[tuple[Any, ...]]] = {}
    for row in db.execute(sql + " ORDER BY id", params).fetchall():
        result = json_object(row[9])
        key = (row[1], row[2], method_of(result), row[3], arithmetic_of(result.get("precision")))
        groups.setdefault(key, []).append(row)
    out = []
    for (gpu, model, method, seq_len, arithmetic), rows in groups.items():
        tps = _median([r[5] for r in rows])
        spm = _median([r[6] * 60.0 if r[6] is not None else None for r in rows])
        peaks = [r[7] for r in rows if r[7] is not None]
        out.append(
            Calibration(
                gpu,
                model,
                method,
                arithmetic,
                "bench",
                tps,
                spm,
                tps,
                spm,
                max(peaks) if peaks else None,
                1,
                len(rows),
                tuple(r[0] for r in rows),
                seq_len,
                rows[-1][4],
                max(r[8] for r in rows),
            )
        )
    return out


def measurements(
    db: Database,
    *,
    gpu_type: str | None = None,
    model_name: str | None = None,
    method: str | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
) -> dict[Key, Calibration]:
    """The best calibration per (gpu_type, model_name, method, seq_len, arithmetic): finished runs first,
    else bench results. ``method``, ``seq_len`` and ``precision`` (any spelling; compared as fp32 or
    16-bit) narrow the answer to measurements that match them."""
    best: dict[Key, Calibration] = {}
    for cal in _from_bench(db, gpu_type, model_name) + _from_runs(db, gpu_type, model_name):
        if method is not None and cal.method != method.lower():
            continue
        if seq_len is not None and cal.seq_len != seq_len:
            continue
        if precision is not None and cal.arithmetic != arithmetic_of(precision):
            continue
        best[cal.key] = cal  # runs come last and win
    return best


def lookup(
    db: Database,
    gpu_type: str,
    model_name: str,
    *,
    method: str = "full",
    seq_len: int | None = None,
    precision: str | None = None,
) -> Calibration | None:
    """The calibration for one GPU type, model and method (and sequence length when given), or None when
    nothing that matches was measured. Without ``seq_len``, across sequence lengths: finished runs
    before bench results, then the most recent."""
    found = measurements(
        db, gpu_type=gpu_type, model_name=model_name, method=method, seq_len=seq_len, precision=precision
    )
    if not found:
        return None
    return max(found.values(), key=lambda cal: (cal.source == "run", cal.measured_at))
