"""A run's alerts, each with a diagnosis, evaluated from the history and stored with the run.

The rules are in ``alert_rules.py`` (pure), the diagnoses in ``diagnosis.py``; this module reads their
inputs (``gpu_minutes`` and ``gpu_minute_metrics``: a few rows per GPU and minute, never the raw
samples; the steps; the run's settings from ``run_start``) and keeps the outcome in ``run_alerts``
together with the settings it was evaluated under, and in ``run_alert_state`` a stamp of the run's
data at that moment. :func:`current_alerts` reads the stored alerts back while the settings and the
stamp still match (a run that did not change is not evaluated again) and evaluates otherwise;
:func:`refresh_alerts` is the same, storing what it evaluated (a write only when something changed).
The ingest evaluates a run once when its ``run_end`` arrives.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.alert_rules import (
    KIND_TITLES,
    KINDS,
    NO_METRICS,
    Alert,
    AlertSettings,
    GpuKey,
    GpuMinute,
    SettingsError,
    StepStats,
    evaluate,
)
from gpuplanner.history.db import write_transaction
from gpuplanner.history.diagnosis import PlannerModel, RunContext, bf16_speedup, diagnose

DEFAULT_SETTINGS = AlertSettings()


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def gpu_minutes(db: Database, run_id: int) -> dict[GpuKey, list[GpuMinute]]:
    """Each GPU's minutes in time order, with the further named metrics as per-minute means."""
    extra: dict[tuple[str, int, float], dict[str, float]] = {}
    for node, index, minute_t, name, n, total in db.execute(
        "SELECT node, gpu_index, minute_t, name, n, total FROM gpu_minute_metrics WHERE run_id = ?", [run_id]
    ).fetchall():
        if n:
            extra.setdefault((node, index, minute_t), {})[name] = total / n
    out: dict[GpuKey, list[GpuMinute]] = {}
    for node, index, minute_t, util_n, util_sum, mem, throttle_n, power, thermal, hw, clock_n, clock_sum in db.execute(
        "SELECT node, gpu_index, minute_t, util_n, util_sum, mem_frac_max, throttle_n, power_throttle_n,"
        " thermal_throttle_n, hw_slowdown_n, clock_n, clock_sum FROM gpu_minutes WHERE run_id = ?"
        " ORDER BY node, gpu_index, minute_t",
        [run_id],
    ).fetchall():
        out.setdefault((node, index), []).append(
            GpuMinute(
                minute_t,
                util_sum / util_n if util_n else None,
                util_n,
                mem,
                power / throttle_n if throttle_n else None,
                thermal / throttle_n if throttle_n else None,
                hw / throttle_n if throttle_n else None,
                clock_sum / clock_n if clock_n else None,
                extra.get((node, index, minute_t), NO_METRICS),
            )
        )
    return out


def step_stats(db: Database, run_id: int) -> StepStats:
    n, step_sum, wait_sum, first_t, last_t = db.execute(
        "SELECT COUNT(*), SUM(step_time_s), SUM(COALESCE(data_wait_s, 0)), MIN(t), MAX(t) FROM steps"
        " WHERE run_id = ? AND step_time_s > 0",
        [run_id],
    ).fetchone()
    median = None
    if n:
        rows = db.execute(
            "SELECT step_time_s FROM steps WHERE run_id = ? AND step_time_s > 0 ORDER BY step_time_s LIMIT ? OFFSET ?",
            [run_id, 2 - n % 2, (n - 1) // 2],
        ).fetchall()
        median = sum(r[0] for r in rows) / len(rows)
    return StepStats(n, step_sum or 0.0, wait_sum or 0.0, median, first_t, last_t)


def run_context(db: Database, run_id: int, steps: StepStats) -> RunContext:
    row = db.execute(
        "SELECT status, gpu_count, gpu_type, price_usd_per_gpu_hour, config_json FROM runs WHERE id = ?", [run_id]
    ).fetchone()
    if row is None:
        return RunContext(run_id, "unknown", 1)
    status, gpu_count, gpu_type, price, config_json = row
    config = _json_object(config_json)
    start = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    detail = _json_object(start[0]) if start else {}
    host = detail.get("host")
    cpu_count = detail.get("cpu_count")
    if not isinstance(cpu_count, int) and isinstance(host, dict):
        cpu_count = host.get("cpu_count")
    gpus_list = detail.get("gpus")
    device = detail.get("device")
    n_gpus = db.execute("SELECT COUNT(*) FROM run_gpus WHERE run_id = ?", [run_id]).fetchone()[0]
    last_step, tokens_per_s = db.execute(
        "SELECT MAX(step), (SELECT tokens_per_s FROM steps WHERE run_id = ? AND tokens_per_s IS NOT NULL"
        " ORDER BY seq DESC LIMIT 1) FROM steps WHERE run_id = ?",
        [run_id, run_id],
    ).fetchone()
    peak = db.execute(
        "SELECT MAX(CAST(mem_used_max AS REAL) / mem_total) FROM run_gpus WHERE run_id = ? AND mem_total > 0", [run_id]
    ).fetchone()[0]
    precision = detail.get("precision") if isinstance(detail.get("precision"), str) else config.get("precision")
    steps_total = detail.get("steps_total")
    return RunContext(
        run_id=run_id,
        status=status,
        gpu_count=gpu_count or n_gpus or 1,
        gpu_type=gpu_type or (device if isinstance(device, str) and device != "cpu" else None),
        price=price,
        config=config,
        precision=precision if isinstance(precision, str) else None,
        model_arch=detail.get("model_arch") if isinstance(detail.get("model_arch"), dict) else None,
        cpu_count=cpu_count if isinstance(cpu_count, int) and cpu_count > 0 else None,
        gpus_per_node=len(gpus_list) if isinstance(gpus_list, list) and gpus_list else 1,
        steps_done=last_step,
        steps_total=steps_total if isinstance(steps_total, int) and steps_total > 0 else None,
        step_s=steps.median_step_s,
        tokens_per_s=tokens_per_s,
        peak_mem_frac=peak,
    )


def run_alerts(db: Database, run_id: int, settings: AlertSettings | None = None) -> list[Alert]:
    """Every alert of a run under ``settings`` (default: :data:`DEFAULT_SETTINGS`), each diagnosed."""
    settings = settings or DEFAULT_SETTINGS
    gpus = gpu_minutes(db, run_id)
    steps = step_stats(db, run_id)
    ctx = run_context(db, run_id, steps)
    planner = PlannerModel(ctx)
    model_step = planner.step_s(gpus=1) if ctx.gpu_count > 1 else None
    alerts = evaluate(
        gpus,
        steps,
        settings,
        model_step_s=model_step,
        precision=planner.base.precision if planner.base else ctx.precision,
        gpu_name=planner.gpu.name if planner.gpu else None,
        bf16_speedup=bf16_speedup(planner),
    )
    share = steps.wait_share
    wait = (share, steps.data_wait_s / steps.steps) if share is not None and steps.steps else None
    for alert in alerts:
        alert.diagnosis = diagnose(alert, ctx, planner, wait, settings)
    return alerts


_COLUMNS = "kind, node, gpu_index, start_t, end_t, minutes, value, message, diagnosis_json, settings_json"


def _rows(alerts: list[Alert], settings: AlertSettings) -> list[tuple[Any, ...]]:
    settings_json = _settings_json(settings)
    return [
        (a.kind, a.node, a.gpu_index, a.start_t, a.end_t, a.minutes, a.value, a.message)
        + (json.dumps({"detail": a.detail, "diagnosis": a.diagnosis}, sort_keys=True), settings_json)
        for a in alerts
    ]


def data_stamp(db: Database, run_id: int) -> str:
    """What the alerts depend on, cheaply: the run's row, its GPU sample count, its last step and event."""
    row = db.execute(
        "SELECT status, gpu_count, gpu_type, price_usd_per_gpu_hour, last_t, LENGTH(config_json),"
        " (SELECT COALESCE(SUM(n), 0) FROM run_gpus WHERE run_id = runs.id),"
        " (SELECT MAX(seq) FROM steps WHERE run_id = runs.id),"
        " (SELECT MAX(seq) FROM events WHERE run_id = runs.id) FROM runs WHERE id = ?",
        [run_id],
    ).fetchone()
    return json.dumps(list(row) if row else None)


def _settings_json(settings: AlertSettings) -> str:
    return json.dumps(settings.as_dict(), sort_keys=True)


def store_alerts(
    db: Database, run_id: int, alerts: list[Alert], settings: AlertSettings, stamp: str | None = None
) -> bool:
    """Keep ``alerts`` as the run's alerts, evaluated under ``settings`` on the data of ``stamp`` (default:
    the data now), in one transaction; False when those alerts were stored already."""
    rows = _rows(alerts, settings)
    with write_transaction(db):
        stamp = stamp if stamp is not None else data_stamp(db, run_id)
        db.execute(
            "INSERT OR REPLACE INTO run_alert_state (run_id, settings_json, stamp, evaluated_at) VALUES (?,?,?,?)",
            [run_id, _settings_json(settings), stamp, time.time()],
        )
        stored = db.execute(f"SELECT {_COLUMNS} FROM run_alerts WHERE run_id = ? ORDER BY id", [run_id]).fetchall()
        if [tuple(r) for r in stored] == rows:
            return False
        db.execute("DELETE FROM run_alerts WHERE run_id = ?", [run_id])
        now = time.time()
        db.conn.executemany(
            f"INSERT INTO run_alerts (run_id, {_COLUMNS}, evaluated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [(run_id, *row, now) for row in rows],
        )
    return True


def stored_alerts(db: Database, run_id: int) -> list[Alert]:
    """The alerts last stored for a run (:func:`stored_settings`: the settings they were evaluated under)."""
    out = []
    for kind, node, index, start, end, minutes, value, message, diagnosis_json, _settings in db.execute(
        f"SELECT {_COLUMNS} FROM run_alerts WHERE run_id = ? ORDER BY id", [run_id]
    ).fetchall():
        stored = _json_object(diagnosis_json)
        stored_detail, stored_diagnosis = stored.get("detail"), stored.get("diagnosis")
        detail = stored_detail if isinstance(stored_detail, dict) else {}
        diagnosis = stored_diagnosis if isinstance(stored_diagnosis, dict) else None
        out.append(Alert(kind, message, start, end, minutes or 0.0, value or 0.0, node, index, detail, diagnosis))
    return out


def stored_settings(db: Database, run_id: int) -> AlertSettings | None:
    """The settings of the run's last stored evaluation (None: never evaluated and stored)."""
    row = db.execute("SELECT settings_json FROM run_alert_state WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    try:
        return AlertSettings.from_dict(_json_object(row[0]))
    except SettingsError:
        return None


def current_alerts(
    db: Database, run_id: int, settings: AlertSettings | None = None, *, store: bool = False
) -> list[Alert]:
    """The run's alerts under ``settings``: read back when stored under them for the run's current data,
    evaluated otherwise (and then stored when ``store``)."""
    settings = settings or DEFAULT_SETTINGS
    stamp = data_stamp(db, run_id)
    state = db.execute("SELECT settings_json, stamp FROM run_alert_state WHERE run_id = ?", [run_id]).fetchone()
    if state is not None and tuple(state) == (_settings_json(settings), stamp):
        return stored_alerts(db, run_id)
    alerts = run_alerts(db, run_id, settings)
    if store:
        store_alerts(db, run_id, alerts, settings, stamp)
    return alerts


def refresh_alerts(db: Database, run_id: int, settings: AlertSettings | None = None) -> list[Alert]:
    """The run's alerts under ``settings``, stored with the run (evaluated only when the data or the
    settings changed since the last time)."""
    return current_alerts(db, run_id, settings, store=True)


__all__ = [
    "DEFAULT_SETTINGS",
    "KINDS",
    "KIND_TITLES",
    "Alert",
    "AlertSettings",
    "SettingsError",
    "current_alerts",
    "data_stamp",
    "gpu_minutes",
    "refresh_alerts",
    "run_alerts",
    "step_stats",
    "store_alerts",
    "stored_alerts",
    "stored_settings",
]
