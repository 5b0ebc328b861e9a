"""The run history as a Qt table model, a filter proxy, and the plain queries the History pane draws.

Rows are :class:`RunSummary` objects from :func:`gpuplanner.history.analytics.summarize` (the same
figures as ``gpuplanner runs show``). :data:`SORT_ROLE` holds one comparable type per column.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor
from sqlite_utils import Database

from gpuplanner.history.analytics import RunSummary
from gpuplanner.history.failures import load_failure
from gpuplanner.history.run_cost import run_cost_usd, unpriced_figure
from gpuplanner.ui.human import NO_PRICE, human_hours, human_number
from gpuplanner.ui.table_view import ColumnsTableModel

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
RUN_ID_ROLE = Qt.ItemDataRole.UserRole + 2

# (header, export name, tooltip)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ID", "run_id", "Run id in the history"),
    ("Date", "started_at", "When the run started"),
    ("Name", "name", "Run name"),
    ("Host", "host", "Where it ran"),
    ("GPU", "gpu", "GPU type x count"),
    ("Model", "model_name", "Model trained"),
    (
        "Status",
        "status",
        "running, finished, preempted, stopped (by you), stopped at the budget, stopped early (the trainer's"
        " early stopping), failed",
    ),
    ("Hours", "hours", "Hours the GPUs were held (interruption gaps excluded)"),
    ("Cost $", "cost_usd", "Price x GPUs x hours"),
    ("Util %", "avg_util_pct", "Average NVML GPU utilisation: share of time any kernel ran, not SM occupancy"),
    (
        "$/eff GPU-h",
        "cost_per_effective_gpu_hour_usd",
        "Cost per GPU-hour x NVML utilisation (the run's summary also gives it by SM activity where the GPUs"
        " report it)",
    ),
    ("vs plan %", "cost_vs_plan_pct", "Actual cost against the plan's (+ = more expensive than planned)"),
)
EXPORT_COLUMNS = tuple(c[1] for c in COLUMNS)
STATUS_COLORS = {
    "finished": "#2e9d4f",
    "failed": "#d64545",
    "preempted": "#d98a00",
    "stopped": "#8a8f98",
    "running": "#2f6fde",
    "budget_stop": "#d98a00",
    "early_stop": "#2e9d4f",
}

# The history's status names the window shows in words (exports and the CLI keep the names)
STATUS_WORDS = {"budget_stop": "stopped at the budget", "early_stop": "stopped early"}


def status_text(status: str | None) -> str:
    """A run's status as the window says it: "stopped early" for ``early_stop``."""
    return STATUS_WORDS.get(status or "", status or "–")


# Side-by-side comparison: (label, attribute or callable, format)
COMPARE_METRICS: tuple[tuple[str, str], ...] = (
    ("Name", "name"),
    ("Status", "status"),
    ("Host", "host"),
    ("GPU", "gpu_type"),
    ("GPUs", "gpu_count"),
    ("Pricing", "pricing"),
    ("$/GPU-hour", "price_usd_per_gpu_hour"),
    ("Model", "model_name"),
    ("Hours", "hours"),
    ("Wall hours", "wall_hours"),
    ("GPU-hours", "gpu_hours"),
    ("Avg util %", "avg_util_pct"),
    ("Effective GPU-hours (NVML util)", "effective_gpu_hours"),
    ("Avg SM activity %", "avg_sm_active_pct"),
    ("Effective GPU-hours (SM activity)", "effective_gpu_hours_sm"),
    ("Cost $", "cost_usd"),
    ("$ per effective GPU-hour", "cost_per_effective_gpu_hour_usd"),
    ("$ per sample", "cost_per_sample_usd"),
    ("$ per 1M tokens", "cost_per_million_tokens_usd"),
    ("Idle GPU-hours", "idle_gpu_hours"),
    ("Data wait %", "data_wait_pct"),
    ("Interruptions", "interruptions"),
    ("Samples", "samples"),
    ("Tokens", "tokens"),
    ("Tokens/s", "tokens_per_s"),
    ("Peak memory GiB", "peak_mem_gib"),
    ("Final loss", "final_loss"),
    ("Simulated GPU", "simulated"),
)


def cost_vs_plan_pct(summary: RunSummary) -> float | None:
    planned = summary.planned or {}
    cell = planned.get("cost_usd") if isinstance(planned.get("cost_usd"), dict) else None
    if cell is None or cell.get("diff_pct") is None:
        cell = planned.get("hours") if isinstance(planned.get("hours"), dict) else None
    return None if cell is None else cell.get("diff_pct")


def row_values(summary: RunSummary) -> tuple[Any, ...]:
    """One run as plain values in :data:`EXPORT_COLUMNS` order."""
    gpu = f"{summary.gpu_count} x {summary.gpu_type}" if summary.gpu_type else f"{summary.gpu_count} GPU(s)"
    return (
        summary.run_id,
        summary.started_at,
        summary.name,
        summary.host,
        gpu,
        summary.model_name,
        summary.status,
        summary.hours,
        summary.cost_usd,
        summary.avg_util_pct,
        summary.cost_per_effective_gpu_hour_usd,
        cost_vs_plan_pct(summary),
    )


def export_values(summary: RunSummary) -> tuple[Any, ...]:
    """Like :func:`row_values` with the date as text and numbers rounded (CSV/Markdown/PDF)."""
    values = list(row_values(summary))
    values[1] = format_time(values[1])
    for i in (7, 8, 9, 10, 11):
        if isinstance(values[i], float):
            values[i] = round(values[i], 4 if i == 7 else 2)
    return tuple(values)


def format_time(t: float | None) -> str:
    return "" if t is None else datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def metric_value(summary: RunSummary, attribute: str) -> Any:
    if attribute == "peak_mem_gib":
        return None if summary.peak_mem_bytes is None else summary.peak_mem_bytes / 1024**3
    return getattr(summary, attribute)


def metric_text(summary: RunSummary, attribute: str) -> str:
    """One compared metric of a run as the Compare tab and the report show it: "no price" for a cost the
    run cannot have without a price."""
    value = metric_value(summary, attribute)
    return NO_PRICE if unpriced_figure(attribute, value, summary.price_usd_per_gpu_hour) else format_value(value)


def format_value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:,.2f}"
        return human_number(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def display_text(column: int, value: Any, price_usd_per_gpu_hour: float | None = 0.0) -> str:
    """A run table cell as the History table (and its PDF report) shows it; the cost cells of a run
    without a price (``price_usd_per_gpu_hour`` None) read "no price", never $0 or a dash."""
    name = EXPORT_COLUMNS[column]
    if unpriced_figure(name, value, price_usd_per_gpu_hour):
        return NO_PRICE
    if name == "started_at":
        return format_time(value)
    if name == "cost_vs_plan_pct" and value is not None:
        return f"{value:+.1f}%"
    if name == "run_id":
        return str(value)
    if name == "avg_util_pct" and value is not None:
        return f"{value:.0f}"
    if name == "hours" and value is not None:
        return human_hours(value)  # "1 h 15 min" (sorting uses the number)
    if name == "status":
        return status_text(value)
    return format_value(value)


class RunsTableModel(ColumnsTableModel):
    """Summaries of runs, one per row; read-only."""

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._summaries: list[RunSummary] = []
        self._values: list[tuple[Any, ...]] = []

    def set_summaries(self, summaries: Sequence[RunSummary]) -> None:
        self.beginResetModel()
        self._summaries = list(summaries)
        self._values = [row_values(s) for s in self._summaries]
        self.endResetModel()

    def summaries(self) -> list[RunSummary]:
        return list(self._summaries)

    def summary(self, row: int) -> RunSummary:
        return self._summaries[row]

    def row_count(self) -> int:
        return len(self._summaries)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if (
            not index.isValid()
            or not (0 <= index.row() < len(self._summaries))
            or not (0 <= index.column() < len(COLUMNS))
        ):
            return None
        value = self._values[index.row()][index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return display_text(index.column(), value, self._summaries[index.row()].price_usd_per_gpu_hour)
        if role == SORT_ROLE:
            if value is None:
                return -math.inf
            return float(value) if isinstance(value, (int, float)) else str(value).lower()
        if role == RUN_ID_ROLE:
            return self._summaries[index.row()].run_id
        if role == Qt.ItemDataRole.ForegroundRole and EXPORT_COLUMNS[index.column()] == "status":
            color = STATUS_COLORS.get(str(value))
            return QBrush(QColor(color)) if color else None
        if role == Qt.ItemDataRole.ToolTipRole and self._summaries[index.row()].simulated:
            return "GPU telemetry of this run was simulated (no real GPU)"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if isinstance(value, (int, float)) and EXPORT_COLUMNS[index.column()] != "started_at":
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return None


class RunsFilterProxy(QSortFilterProxyModel):
    """Text filter over the text columns (case-insensitive) and a status filter."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._text = ""
        self._status = ""

    def set_filter(self, text: str, status: str) -> None:
        self.beginFilterChange()
        self._text, self._status = text.strip().lower(), status
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        model = self.sourceModel()
        assert isinstance(model, RunsTableModel)
        summary = model.summary(source_row)
        if self._status and summary.status != self._status:
            return False
        if not self._text:
            return True
        haystack = " ".join(
            str(v)
            for v in (
                summary.run_id,
                summary.name,
                summary.host,
                summary.gpu_type,
                summary.model_name,
                summary.status,
                status_text(summary.status),
                summary.pricing,
            )
            if v is not None
        )
        return self._text in haystack.lower()

    def lessThan(self, left: QModelIndex | QPersistentModelIndex, right: QModelIndex | QPersistentModelIndex) -> bool:
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        if type(a) is not type(b):
            return isinstance(a, float)
        return bool(a < b)


# ------------------------------------------------------------------------------ plot data


@dataclass
class RunSeries:
    """What the detail plots show for one run, bucketed to at most ``points`` per series."""

    t0: float
    gpu: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # label -> (t, util, mem GiB, power)
    steps: tuple[np.ndarray, np.ndarray, np.ndarray]  # t, loss, tokens/s
    events: list[tuple[float, str, int | None, str]]  # t, kind, step, what happened in words
    failure: dict[str, Any] | None = None  # a failed run's error and stderr tail (history/failures.py)
    plan_gpu: str | None = None  # the saved plan's GPUs ("1 x H100 SXM") when the run came from one


def describe_event(kind: str, detail: dict[str, Any]) -> str:
    """One event's details in words (the Events tab's last column)."""
    if kind == "run_end":
        text = status_text(str(detail.get("status") or ""))
        if detail.get("error"):
            text += f": {detail['error']}"
        if isinstance(detail.get("exit_code"), int):
            text += f" (exit {detail['exit_code']})"
        return text
    if kind == "failure":
        tail = str(detail.get("stderr_tail") or "").strip().splitlines()
        text = str(detail.get("error") or "failed")
        return text + (f" · stderr: {tail[-1]}" if tail and tail[-1] not in text else "")
    if kind == "restart":
        words = {"stopped": "a stop", "preempted": "a preemption", "failed": "a failure", "killed": "a kill"}
        after = f" after {words.get(str(detail['after']), detail['after'])}" if detail.get("after") else ""
        return f"{detail.get('reason', '')}{after}: {detail.get('from_host', '?')} -> {detail.get('to_host', '?')}"
    if kind == "checkpoint":
        size = detail.get("bytes")
        return str(detail.get("path") or "") + (f" ({size / 1024**3:,.2f} GiB)" if isinstance(size, int) else "")
    if kind == "user_stop":
        by = {"window": "in the window", "cli": "with gpuplanner run stop", "sweep": "by the sweep"}.get(
            str(detail.get("by")), ""
        )
        return " ".join(w for w in ("Stop asked", by, f"({detail['reason']})" if detail.get("reason") else "") if w)
    if kind == "stopped":
        return "the trainer checkpointed and exited after Stop"
    if kind == "run_start":
        host = detail.get("host")
        return f"on {host}" if isinstance(host, str) else ""
    return ""


def run_series(db: Database, run_id: int, points: int = 1500) -> RunSeries:
    """Per-GPU utilisation, memory and power (bucket means), loss and tokens/s, and the events."""
    row = db.execute("SELECT MIN(t), MAX(t) FROM gpu_samples WHERE run_id = ?", [run_id]).fetchone()
    step_row = db.execute("SELECT MIN(t), MAX(t) FROM steps WHERE run_id = ?", [run_id]).fetchone()
    lows = [v for v in (row[0], step_row[0]) if v is not None]
    highs = [v for v in (row[1], step_row[1]) if v is not None]
    t0 = min(lows) if lows else 0.0
    span = (max(highs) - t0) if highs else 0.0
    bucket = max(span / points, 1e-6)
    gpu: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
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
    return RunSeries(t0, gpu, step_series, events, load_failure(db, run_id), _plan_gpu(db, run_id))


def _plan_gpu(db: Database, run_id: int) -> str | None:
    """The GPUs of the plan a run was launched from ("2 x A100 80GB"), or None."""
    from gpuplanner.history.db import HistoryError
    from gpuplanner.history.plans import get_plan

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


# ------------------------------------------------------------------------------ runs overlaid


@dataclass
class OverlaySeries:
    """One run's curves for the overlay of several runs: against minutes since its start, or its step."""

    run_id: int
    label: str
    minutes: np.ndarray  # of the step rows
    step: np.ndarray
    loss: np.ndarray
    tokens_per_s: np.ndarray
    spend_usd: np.ndarray  # cumulative: the trainer's, else the run's price x GPUs x time
    util_minutes: np.ndarray
    util_pct: np.ndarray  # mean over the run's GPUs


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
        spend = run_cost_usd(price, gpus, minutes / 60.0)  # elementwise over the buckets' minutes
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
