"""Derived metrics of a run: hours, GPU-hours, utilisation, cost per unit, interruptions, planned vs actual.

Every figure comes from the per-GPU rollups, the events and the steps (never a scan of raw GPU
samples), so a summary costs the same for a run of one thousand or ten million samples.

- ``hours``: time the run held its GPUs: first to last record, minus the gaps between an
  interruption (``preempted``) or a user's stop (``stopped``, see :mod:`gpuplanner.history.stops`)
  and the next ``run_start``/``resumed``. ``wall_hours`` includes them.
- ``interruptions``, ``interruption_hours``: preemptions only (a user's stop is not an interruption):
  their count, and their gaps plus the work redone after each (from the checkpoint resumed from to
  the interruption).
- ``idle_gpu_hours``: GPU-hours x the share of samples under ``IDLE_UTIL_PCT`` utilisation.
- ``data_wait_pct``: sum of the steps' data-wait time over the sum of their step time.
- ``time_breakdown``: where the billed time went, per phase (``time_breakdown.py``).
- Utilisation is NVML's "GPU utilisation": the share of time any kernel ran, not SM occupancy.
  ``effective_gpu_hours`` is GPU-hours x that utilisation (as the planner's economics define it);
  ``effective_gpu_hours_sm`` is GPU-hours x the mean GPM SM activity (the share of SMs busy) where the
  GPUs report it (Hopper and newer), None otherwise; ``sm_active_coverage_pct`` says what share of
  the GPU samples carried SM activity. ``gpus`` holds the per-GPU telemetry of
  :mod:`gpuplanner.history.gpu_metrics`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.alerts import AlertSettings, current_alerts
from gpuplanner.history.billing import billed_of
from gpuplanner.history.calibration import CalibrationUse, calibration_of
from gpuplanner.history.db import HistoryError
from gpuplanner.history.gpu_metrics import run_gpu_metrics
from gpuplanner.history.plans import get_plan
from gpuplanner.history.rollup import IDLE_UTIL_PCT
from gpuplanner.history.runs import Run, get_run
from gpuplanner.history.slurm_queue import QueueSummary, queue_of
from gpuplanner.history.time_breakdown import run_breakdown
from gpuplanner.plan.economics import diff_pct, ratio, unit_economics


@dataclass(frozen=True)
class Interruptions:
    count: int
    downtime_s: float
    lost_work_s: float
    stopped_s: float = 0.0  # time between a user's stop and the resume (not an interruption; not held either)


@dataclass
class RunSummary:
    run_id: int
    name: str | None
    status: str
    host: str | None
    gpu_type: str | None
    gpu_count: int
    pricing: str
    price_usd_per_gpu_hour: float | None
    model_name: str | None
    started_at: float | None
    ended_at: float | None
    hours: float
    wall_hours: float
    gpu_hours: float
    avg_util_pct: float | None
    util_p50_pct: float | None
    util_histogram: list[int]
    effective_gpu_hours: float | None
    cost_usd: float | None
    cost_per_effective_gpu_hour_usd: float | None
    cost_per_sample_usd: float | None
    cost_per_million_tokens_usd: float | None
    idle_gpu_hours: float | None
    data_wait_pct: float | None
    interruptions: int
    interruption_hours: float
    samples: int | None
    tokens: int | None
    steps: int | None
    tokens_per_s: float | None
    samples_per_min: float | None
    peak_mem_bytes: int | None
    final_loss: float | None
    last_eval_loss: float | None
    gpu_samples: int
    simulated: bool
    malformed_lines: int
    planned: dict[str, Any] | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    time_breakdown: dict[str, Any] | None = None
    avg_sm_active_pct: float | None = None
    avg_tensor_active_pct: float | None = None
    sm_active_coverage_pct: float | None = None
    effective_gpu_hours_sm: float | None = None
    cost_per_effective_gpu_hour_sm_usd: float | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    billed: dict[str, Any] | None = None  # billing.billed_of: billed hours and cost, idle hours and cost
    queue: QueueSummary | None = None  # slurm_queue.queue_of: a Slurm run's queue wait and pending reason
    calibration: dict[str, Any] | None = None  # calibration.calibration_of: whether it calibrates, and why not

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json_object(text: str | None) -> dict[str, Any]:
    """A stored JSON object, or {} for anything else (a row damaged outside the app)."""
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def interruptions(db: Database, run_id: int, last_t: float | None) -> Interruptions:
    """Count interruptions and the time they cost, and the time the run spent stopped by the user
    (see the module docstring)."""
    count, downtime, lost, stopped = 0, 0.0, 0.0, 0.0
    interrupted_at: float | None = None
    stopped_at: float | None = None
    checkpoints: list[tuple[float, int | None]] = []
    for t, kind, step, detail_json in db.execute(
        "SELECT t, kind, step, detail_json FROM events WHERE run_id = ? ORDER BY seq", [run_id]
    ).fetchall():
        detail = _json_object(detail_json)
        if kind == "checkpoint":
            checkpoints.append((t, step))
        elif kind == "preempted" or (kind == "run_end" and detail.get("status") == "preempted"):
            if interrupted_at is None and stopped_at is None:
                interrupted_at = t
                count += 1
        elif kind == "stopped" or (kind == "run_end" and detail.get("status") == "stopped"):
            if interrupted_at is None and stopped_at is None:
                stopped_at = t
        elif kind in ("run_start", "resumed") and stopped_at is not None:
            stopped += max(0.0, t - stopped_at)
            stopped_at = None
        elif kind in ("run_start", "resumed") and interrupted_at is not None:
            downtime += max(0.0, t - interrupted_at)
            resumed_step = step
            if resumed_step is not None:
                times = [ct for ct, cs in checkpoints if cs == resumed_step and ct <= interrupted_at]
                if times:
                    lost += max(0.0, interrupted_at - max(times))
            interrupted_at = None
    if interrupted_at is not None and last_t is not None:
        downtime += max(0.0, last_t - interrupted_at)
    if stopped_at is not None and last_t is not None:
        stopped += max(0.0, last_t - stopped_at)
    return Interruptions(count, downtime, lost, stopped)


def _percentile_from_hist(hist: list[int], q: float) -> float | None:
    total = sum(hist)
    if not total:
        return None
    target, seen = q * total, 0
    for bucket, n in enumerate(hist):
        if n and seen + n >= target:
            return bucket * 10.0 + 10.0 * (target - seen) / n
        seen += n
    return 100.0


def _gpu_key(name: str) -> str:
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    return key.removeprefix("nvidia")


def same_gpu(planned: str, actual: str) -> bool:
    """Whether a plan's GPU and a run's name the same board: case, spaces, dashes and a leading "NVIDIA"
    aside, or one name a more detailed form of the other ("A100" and "A100 80GB")."""
    a, b = _gpu_key(planned), _gpu_key(actual)
    return bool(a and b) and (a == b or a.startswith(b) or b.startswith(a))


def hardware_match(db: Database, run: Run, use: CalibrationUse) -> dict[str, Any]:
    """Whether planned against actual compares like with like: the plan's GPU against the run's GPU type,
    and a run on the CPU (or with simulated GPU samples only) is never comparable with a GPU plan."""
    planned_gpu = None
    if run.plan_id is not None:
        try:
            gpu = get_plan(db, run.plan_id).inputs.get("gpu")
        except HistoryError:
            gpu = None
        planned_gpu = gpu if isinstance(gpu, str) and gpu.strip() else None
    actual = run.gpu_type
    if use.reason in ("cpu", "simulated"):
        where = "the CPU" if use.reason == "cpu" else "no GPU that NVML saw (simulated GPU samples)"
        note = f"planned for {planned_gpu or 'a GPU'}, ran on {where}: different hardware, not comparable"
        return {
            "planned_gpu": planned_gpu,
            "actual_gpu": "CPU" if use.reason == "cpu" else actual,
            "comparable": False,
            "note": note,
        }
    if planned_gpu and actual and not same_gpu(planned_gpu, actual):
        note = f"planned for {planned_gpu}, ran on {actual}: different hardware, not comparable"
        return {"planned_gpu": planned_gpu, "actual_gpu": actual, "comparable": False, "note": note}
    return {"planned_gpu": planned_gpu, "actual_gpu": actual, "comparable": True, "note": None}


def _planned_block(run: Run, actual: dict[str, float | None]) -> dict[str, Any] | None:
    planned = {
        "hours": run.planned_hours,
        "cost_usd": run.planned_cost_usd,
        "peak_mem_bytes": run.planned_peak_mem_bytes,
        "tokens_per_s": run.planned_tokens_per_s,
        "samples_per_min": run.planned_samples_per_s * 60.0 if run.planned_samples_per_s else None,
    }
    if run.plan_id is None and all(v is None for v in planned.values()):
        return None
    block: dict[str, Any] = {"plan_id": run.plan_id}
    for key, value in planned.items():
        block[key] = {"planned": value, "actual": actual.get(key), "diff_pct": diff_pct(value, actual.get(key))}
    return block


def summarize(
    db: Database,
    run_id: int,
    *,
    alert_settings: AlertSettings | None = None,
    with_alerts: bool = True,
    store_alerts: bool = False,
) -> RunSummary:
    """The derived metrics of one run (raises HistoryError for an unknown id); its alerts under
    ``alert_settings``, stored with the run when ``store_alerts``."""
    run = get_run(db, run_id)
    first_t = run.first_t if run.first_t is not None else run.started_at
    last_t = run.last_t if run.last_t is not None else run.ended_at
    wall_s = max(0.0, last_t - first_t) if first_t is not None and last_t is not None else 0.0
    gaps = interruptions(db, run_id, last_t)
    active_s = max(0.0, wall_s - gaps.downtime_s - gaps.stopped_s)

    n, util_n, util_sum, idle_n, mem_max, simulated_n, n_gpus = db.execute(
        "SELECT COALESCE(SUM(n), 0), COALESCE(SUM(util_n), 0), COALESCE(SUM(util_sum), 0), COALESCE(SUM(idle_n), 0),"
        " MAX(mem_used_max), COALESCE(SUM(simulated_n), 0), COUNT(*) FROM run_gpus WHERE run_id = ?",
        [run_id],
    ).fetchone()
    hist = [0] * 10
    for (hist_json,) in db.execute("SELECT util_hist FROM run_gpus WHERE run_id = ?", [run_id]).fetchall():
        hist = [a + b for a, b in zip(hist, json.loads(hist_json))]
    avg_util = util_sum / util_n if util_n else None

    steps_n, last_step, samples, tokens, wait_s, step_s, peak_step_mem = db.execute(
        "SELECT COUNT(*), MAX(step), MAX(samples_total), MAX(tokens_total), SUM(data_wait_s), SUM(step_time_s),"
        " MAX(peak_mem_bytes) FROM steps WHERE run_id = ?",
        [run_id],
    ).fetchone()
    tokens_per_s = _median(db, "tokens_per_s", run_id, steps_n)
    samples_per_s = _median(db, "samples_per_s", run_id, steps_n)
    if tokens_per_s is None and tokens and active_s > 0:
        tokens_per_s = tokens / active_s
    if samples_per_s is None and samples and active_s > 0:
        samples_per_s = samples / active_s
    final_loss = _last(db, "SELECT loss FROM steps WHERE run_id = ? ORDER BY seq DESC LIMIT 1", run_id)
    last_eval = _last(db, "SELECT eval_loss FROM evals WHERE run_id = ? ORDER BY seq DESC LIMIT 1", run_id)
    malformed = db.execute(
        "SELECT COALESCE(SUM(malformed), 0) FROM stream_positions WHERE run_id = ?", [run_id]
    ).fetchone()[0]

    gpus = run.gpu_count or n_gpus or 1
    hours = active_s / 3600.0
    econ = unit_economics(
        gpus=gpus,
        hours=hours,
        price_usd_per_gpu_hour=run.price_usd_per_gpu_hour,
        avg_util_pct=avg_util,
        samples=samples,
        tokens=tokens,
    )
    peak_mem = peak_step_mem if peak_step_mem is not None else mem_max
    samples_per_min = samples_per_s * 60.0 if samples_per_s is not None else None
    summary = RunSummary(
        run_id=run.id,
        name=run.name,
        status=run.status,
        host=run.host,
        gpu_type=run.gpu_type,
        gpu_count=gpus,
        pricing=run.pricing,
        price_usd_per_gpu_hour=run.price_usd_per_gpu_hour,
        model_name=run.model_name,
        started_at=run.started_at if run.started_at is not None else first_t,
        ended_at=run.ended_at,
        hours=hours,
        wall_hours=wall_s / 3600.0,
        gpu_hours=econ.gpu_hours,
        avg_util_pct=avg_util,
        util_p50_pct=_percentile_from_hist(hist, 0.5),
        util_histogram=hist,
        effective_gpu_hours=econ.effective_gpu_hours,
        cost_usd=econ.cost_usd,
        cost_per_effective_gpu_hour_usd=econ.cost_per_effective_gpu_hour_usd,
        cost_per_sample_usd=econ.cost_per_sample_usd,
        cost_per_million_tokens_usd=econ.cost_per_million_tokens_usd,
        idle_gpu_hours=econ.gpu_hours * idle_n / util_n if util_n else None,
        data_wait_pct=ratio(wait_s * 100.0 if wait_s is not None else None, step_s),
        interruptions=gaps.count,
        interruption_hours=(gaps.downtime_s + gaps.lost_work_s) / 3600.0,
        samples=samples,
        tokens=tokens,
        steps=last_step,
        tokens_per_s=tokens_per_s,
        samples_per_min=samples_per_min,
        peak_mem_bytes=peak_mem,
        final_loss=final_loss,
        last_eval_loss=last_eval,
        gpu_samples=n,
        simulated=bool(n) and simulated_n == n,
        malformed_lines=malformed,
    )
    summary.time_breakdown = run_breakdown(
        db,
        run_id,
        billed_s=active_s,
        last_t=last_t,
        ended=run.ended_at is not None,
        gpus=gpus,
        price_usd_per_gpu_hour=run.price_usd_per_gpu_hour,
    ).as_dict()
    summary.planned = _planned_block(
        run,
        {
            "hours": hours,
            "cost_usd": econ.cost_usd,
            "peak_mem_bytes": peak_mem,
            "tokens_per_s": tokens_per_s,
            "samples_per_min": samples_per_min,
        },
    )
    use = calibration_of(db, run_id)
    summary.calibration = use.as_dict()
    if summary.planned is not None:
        summary.planned["hardware"] = hardware_match(db, run, use)
    _add_sm_activity(db, run_id, summary)
    summary.billed = billed_of(db, run_id, hours)
    summary.queue = queue_of(db, run_id)
    if with_alerts:
        summary.alerts = [a.as_dict() for a in current_alerts(db, run_id, alert_settings, store=store_alerts)]
    return summary


def _add_sm_activity(db: Database, run_id: int, summary: RunSummary) -> None:
    """The per-GPU telemetry, and effective GPU-hours from SM activity where the GPUs report it."""
    summary.gpus = run_gpu_metrics(db, run_id)
    sm_sum, sm_n, tensor_sum, tensor_n = db.execute(
        "SELECT COALESCE(SUM(sm_active_sum), 0), COALESCE(SUM(sm_active_n), 0), COALESCE(SUM(tensor_active_sum), 0),"
        " COALESCE(SUM(tensor_active_n), 0) FROM run_gpus WHERE run_id = ?",
        [run_id],
    ).fetchone()
    summary.avg_tensor_active_pct = tensor_sum / tensor_n if tensor_n else None
    if not sm_n:
        return
    summary.avg_sm_active_pct = sm_sum / sm_n
    summary.sm_active_coverage_pct = 100.0 * sm_n / summary.gpu_samples if summary.gpu_samples else None
    summary.effective_gpu_hours_sm = summary.gpu_hours * summary.avg_sm_active_pct / 100.0
    summary.cost_per_effective_gpu_hour_sm_usd = ratio(summary.cost_usd, summary.effective_gpu_hours_sm)


def _median(db: Database, column: str, run_id: int, count: int) -> float | None:
    n = db.execute(f"SELECT COUNT({column}) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0] if count else 0
    if not n:
        return None
    rows = db.execute(
        f"SELECT {column} FROM steps WHERE run_id = ? AND {column} IS NOT NULL ORDER BY {column} LIMIT ? OFFSET ?",
        [run_id, 2 - n % 2, (n - 1) // 2],
    ).fetchall()
    return float(sum(r[0] for r in rows)) / len(rows)


def _last(db: Database, sql: str, run_id: int) -> Any:
    row = db.execute(sql, [run_id]).fetchone()
    return row[0] if row else None


def compare(db: Database, run_ids: list[int]) -> list[RunSummary]:
    """Summaries of several runs, in the order given."""
    return [summarize(db, run_id, with_alerts=False) for run_id in run_ids]


__all__ = ["IDLE_UTIL_PCT", "Interruptions", "RunSummary", "compare", "interruptions", "summarize"]
