"""The run history as a Qt table model, a filter proxy, and the plain queries the History pane draws.

Rows are :class:`RunSummary` objects from :func:`gpuplanner.history.analytics.summarize` (the same
figures as ``gpuplanner runs show``). :data:`SORT_ROLE` holds one comparable type per column.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor

from gpuplanner.app.run_series import RunSeries
from gpuplanner.app.run_series import run_series as series_of_run
from gpuplanner.app.run_status import status_text
from gpuplanner.export.human import human_gpus
from gpuplanner.history.analytics import RunSummary
from gpuplanner.history.failures import load_failure
from gpuplanner.history.run_cost import unpriced_figure
from gpuplanner.ui.human import NO_PRICE, human_hours, human_number
from gpuplanner.ui.widgets.table_view import ColumnsTableModel

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
    ("Time held", "hours", "How long the GPUs were held (interruption gaps excluded)"),
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
    """The run's cost (else hours) against its plan's, in %; None on other hardware than the plan's (another
    GPU, the CPU), where a percentage would compare unlike runs (the Summary labels it)."""
    planned = summary.planned or {}
    hardware = planned.get("hardware")
    if isinstance(hardware, dict) and hardware.get("comparable") is False:
        return None
    cell = planned.get("cost_usd") if isinstance(planned.get("cost_usd"), dict) else None
    if cell is None or cell.get("diff_pct") is None:
        cell = planned.get("hours") if isinstance(planned.get("hours"), dict) else None
    return None if cell is None else cell.get("diff_pct")


def row_values(summary: RunSummary) -> tuple[Any, ...]:
    """One run as plain values in :data:`EXPORT_COLUMNS` order."""
    gpu = f"{summary.gpu_count} x {summary.gpu_type}" if summary.gpu_type else human_gpus(summary.gpu_count)
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
    if attribute in ("hours", "wall_hours") and value is not None:
        return human_hours(value)  # a duration in words, like the History table and the Summary
    if attribute == "pricing" and isinstance(value, str):
        return value.replace("_", "-")  # "on-demand", not the history's "on_demand"
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


def run_series(db: Any, run_id: int, points: int = 1500) -> RunSeries:
    """What the detail plots show for one run (:func:`gpuplanner.app.run_series.run_series`), with a failed
    run's error and stderr tail."""
    return replace(series_of_run(db, run_id, points), failure=load_failure(db, run_id))
