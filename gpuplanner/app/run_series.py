"""What the History pane plots for one run and for several runs overlaid, read from the history (the window
runs no SQL of its own): per-GPU utilisation, memory and power, loss and tokens/s, spend, and the events in
words, each bucketed to a bounded number of points."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlite_utils import Database

from gpuplanner.app.run_status import describe_event
from gpuplanner.history.db import HistoryError
from gpuplanner.history.plans import get_plan
from gpuplanner.history.run_cost import run_cost_usd

Floats = np.ndarray[Any, np.dtype[np.float64]]


@dataclass
class RunSeries:
    """What the detail plots show for one run, bucketed to at most ``points`` per series."""

    t0: float
    gpu: dict[str, tuple[Floats, Floats, Floats, Floats]]  # label -> (t, util, mem GiB, power)
    steps: tuple[Floats, Floats, Floats]  # t, loss, tokens/s
    events: list[tuple[float, str, int | None, str]]  # t, kind, step, what happened in words
    failure: dict[str, Any] | None = None  # a failed run's error and stderr tail (the window adds it)
    plan_gpu: str | None = None  # the saved plan's GPUs ("1 x H100 SXM") when the run came from one


def run_series(db: Database, run_id: int, points: int = 1500) -> RunSeries:
    """Per-GPU utilisation, memory and power (bucket means), loss and tokens/s, and the events (``failure`` is
    left to the caller)."""
    row = db.execute("SELECT MIN(t), MAX(t) FROM gpu_samples WHERE run_id = ?", [run_id]).fetchone()
    step_row = db.execute("SELECT MIN(t), MAX(t) FROM steps WHERE run_id = ?", [run_id]).fetchone()
    lows = [v for v in (row[0], step_row[0]) if v is not None]
    highs = [v for v in (row[1], step_row[1]) if v is not None]
    t0 = min(lows) if lows else 0.0
    span = (max(highs) - t0) if highs else 0.0
    bucket = max(span / points, 1e-6)
    gpu: dict[str, tuple[Floats, Floats, Floats, Floats]] = {}
    rows = db.execute(
        "SELECT node, gpu_index, CAST((t - ?) / ? AS INTEGER) AS b, AVG(t), AVG(util_pct), AVG(mem_used_bytes),"
        " AVG(power_w) FROM gpu_samples WHERE run_id = ? GROUP BY node, gpu_index, b ORDER BY node, gpu_index, b",
        [t0, bucket, run_id],
    ).fetchall()
    grouped: dict[str, list[tuple[float, float, float, float]]] = {}
    nodes = {r[0] for r in rows}
    for node, index, _b, t, util, mem, power in rows:
        label = f"GPU {index}" if len(nodes) <= 1 else f"{node}:{index}"
        grouped.setdefault(label, []).append(
            (
                t - t0,
                util if util is not None else math.nan,
                (mem or math.nan) / 1024**3,
                power if power is not None else math.nan,
            )
        )
    for label, values in grouped.items():
        arr = np.array(values, dtype=float)
        gpu[label] = (arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3])
    steps = db.execute(
        "SELECT AVG(t), AVG(loss), AVG(tokens_per_s) FROM steps WHERE run_id = ?"
        " GROUP BY CAST((t - ?) / ? AS INTEGER) ORDER BY 1",
        [run_id, t0, bucket],
    ).fetchall()
    if steps:
        arr = np.array(
            [
                [s[0] - t0, s[1] if s[1] is not None else math.nan, s[2] if s[2] is not None else math.nan]
                for s in steps
            ],
            dtype=float,
        )
        step_series = (arr[:, 0], arr[:, 1], arr[:, 2])
    else:
        empty = np.zeros(0)
        step_series = (empty, empty, empty)
    events = []
    stop_asked = False  # the user pressed Stop: the trainer's next "preempted" is that stop
    for t, kind, step, raw in db.execute(
        "SELECT t, kind, step, detail_json FROM events WHERE run_id = ? ORDER BY t, seq", [run_id]
    ).fetchall():
        try:
            detail = json.loads(raw) if raw else {}
        except ValueError:
            detail = {}
        if kind == "user_stop":
            stop_asked = True
        elif kind == "run_start":
            stop_asked = False
        elif kind == "preempted" and stop_asked:
            kind, stop_asked = "stopped", False
        events.append((t - t0, kind, step, describe_event(kind, detail if isinstance(detail, dict) else {})))
    return RunSeries(t0, gpu, step_series, events, None, _plan_gpu(db, run_id))


def _plan_gpu(db: Database, run_id: int) -> str | None:
    """The GPUs of the plan a run was launched from ("2 x A100 80GB"), or None."""
    row = db.execute("SELECT plan_id FROM runs WHERE id = ?", [run_id]).fetchone()
    if not row or row[0] is None:
        return None
    try:
        inputs = get_plan(db, int(row[0])).inputs
    except HistoryError:
        return None
    gpu, count = inputs.get("gpu"), inputs.get("gpus")
    if not gpu:
        return None
    return f"{count} x {gpu}" if isinstance(count, int) else str(gpu)


def with_gaps(t: Any, *ys: Any) -> tuple[Any, ...]:
    """Break lines across gaps (a preemption, a pause): a NaN after every step more than 5x the median
    step, so ``connect="finite"`` draws no straight line over the time nothing was measured."""
    if len(t) < 3:
        return (t, *ys)
    dt = np.diff(t)
    gaps = np.nonzero(dt > 5 * max(float(np.median(dt)), 1e-9))[0] + 1
    if not len(gaps):
        return (t, *ys)
    # x stays finite (the middle of the gap): a NaN x breaks pyqtgraph's clip-to-view and range fitting,
    # which then saw only the first segment (the memory plot lost what came after a resume)
    middles = (np.asarray(t, dtype=float)[gaps - 1] + np.asarray(t, dtype=float)[gaps]) / 2.0
    return (np.insert(t, gaps, middles), *(np.insert(np.asarray(y, dtype=float), gaps, np.nan) for y in ys))


@dataclass
class OverlaySeries:
    """One run's curves for the overlay of several runs: against minutes since its start, or its step."""

    run_id: int
    label: str
    minutes: Floats  # of the step rows
    step: Floats
    loss: Floats
    tokens_per_s: Floats
    spend_usd: Floats  # cumulative: the trainer's, else the run's price x GPUs x time
    util_minutes: Floats
    util_pct: Floats  # mean over the run's GPUs


def overlay_series(db: Database, run_id: int, label: str, points: int = 600) -> OverlaySeries:
    """A run's step metrics and mean GPU utilisation, bucketed to at most ``points`` each."""
    run = db.execute("SELECT price_usd_per_gpu_hour, gpu_count FROM runs WHERE id = ?", [run_id]).fetchone()
    price, gpus = (run[0], run[1] or 1) if run else (None, 1)
    lo_hi = db.execute(
        "SELECT MIN(t), MAX(t) FROM (SELECT t FROM steps WHERE run_id = ? UNION ALL"
        " SELECT t FROM gpu_samples WHERE run_id = ?)",
        [run_id, run_id],
    ).fetchone()
    t0 = lo_hi[0] if lo_hi and lo_hi[0] is not None else 0.0
    span = (lo_hi[1] - t0) if lo_hi and lo_hi[1] is not None else 0.0
    bucket = max(span / points, 1e-6)
    steps = db.execute(
        "SELECT AVG(t), MAX(step), AVG(loss), AVG(tokens_per_s), MAX(spend_usd) FROM steps WHERE run_id = ?"
        " GROUP BY CAST((t - ?) / ? AS INTEGER) ORDER BY 1",
        [run_id, t0, bucket],
    ).fetchall()
    arr = np.array([[v if v is not None else math.nan for v in row] for row in steps], dtype=float).reshape(-1, 5)
    minutes = (arr[:, 0] - t0) / 60.0
    spend = arr[:, 4]
    if price and not (np.nan_to_num(spend) > 0).any():  # the trainer knew no price: the run's price x GPUs x time
        per_hour = run_cost_usd(price, gpus, 1.0)  # the run's price x GPUs, through the one cost definition
        spend = minutes / 60.0 * (per_hour if per_hour is not None else math.nan)
    util = db.execute(
        "SELECT AVG(t), AVG(util_pct) FROM gpu_samples WHERE run_id = ? GROUP BY CAST((t - ?) / ? AS INTEGER) ORDER BY 1",
        [run_id, t0, bucket],
    ).fetchall()
    uarr = np.array([[v if v is not None else math.nan for v in row] for row in util], dtype=float).reshape(-1, 2)
    minutes, step, loss, tokens, spend = with_gaps(minutes, arr[:, 1], arr[:, 2], arr[:, 3], spend)
    step = np.asarray(step, dtype=float).copy()
    at = np.flatnonzero(np.isnan(step))  # a gap's row: x must stay finite on the step axis too
    at = at[(at > 0) & (at < len(step) - 1)]
    step[at] = (step[at - 1] + step[at + 1]) / 2.0
    util_minutes, util_pct = with_gaps((uarr[:, 0] - t0) / 60.0, uarr[:, 1])
    return OverlaySeries(run_id, label, minutes, step, loss, tokens, spend, util_minutes, util_pct)
