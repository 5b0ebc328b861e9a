"""The ranked comparison as a Qt table model, and the same table as plain rows for CSV/Markdown.

Sorting goes through a :class:`QSortFilterProxyModel` on :data:`SORT_ROLE`, which holds a value of
one type per column (numbers as floats with "unknown" as +inf, text as text), so any column sorts.
Rows that cannot be used (does not fit, no price, misses the deadline, over budget) are greyed and
carry their reason in the last column and the tooltip.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication, QPalette

from gpuplanner.plan.planner import GIB, CompareRow

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ROW_ROLE = Qt.ItemDataRole.UserRole + 2

# (header, CSV/Markdown column name, tooltip)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("#", "rank", "Rank among usable options: cheapest expected cost first"),
    ("GPU", "gpu", "GPU type"),
    ("GPUs", "gpus", "GPUs in the run"),
    ("Pricing", "pricing", "On-demand, or spot (cheaper, may be interrupted)"),
    ("Provider", "provider", "Cheapest offer in the catalog"),
    ("Fits", "fits", "Peak memory per GPU within the headroom"),
    ("Mem GiB", "mem_gib", "Peak memory per GPU"),
    ("Hours", "hours", "Wall-clock hours (spot: expected, with interruptions)"),
    ("Cost $", "cost_usd", "Cost (spot: expected)"),
    ("P90 $", "p90_cost_usd", "Cost in 90% of simulated spot runs (on-demand: the cost)"),
    ("Deadline", "meets_deadline", "Finishes before the deadline (spot: P90)"),
    ("Budget", "within_budget", "Within the budget (spot: P90)"),
    ("Why not", "reason", "Why the option cannot be used"),
)
EXPORT_COLUMNS = tuple(c[1] for c in COLUMNS)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def table_row(row: CompareRow) -> tuple[Any, ...]:
    """One comparison row as plain values, in :data:`EXPORT_COLUMNS` order (as `gpuplanner compare`)."""
    r = lambda v, d: None if _finite(v) is None else round(v, d)  # noqa: E731
    return (row.rank, row.gpu, row.gpus, row.pricing, row.provider, row.plan.fits,
            round(row.plan.memory.total / GIB, 2), r(row.hours, 2), r(row.cost_usd, 2), r(row.p90_cost_usd, 2),
            row.plan.deadline_ok, row.plan.budget_ok, row.reason)


def export_rows(rows: Sequence[CompareRow]) -> list[tuple[Any, ...]]:
    return [table_row(row) for row in rows]


def _text(column: int, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    name = EXPORT_COLUMNS[column]
    if name in ("cost_usd", "p90_cost_usd"):
        return f"{value:,.2f}"
    if name == "hours":
        return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
    if name == "mem_gib":
        return f"{value:.1f}"
    return str(value)


def _sort_value(value: Any) -> Any:
    if value is None:
        return math.inf
    if isinstance(value, bool):
        return 0.0 if value else 1.0
    if isinstance(value, (int, float)):
        return float(value)
    return str(value).lower()


class CompareTableModel(QAbstractTableModel):
    """Rows of :func:`gpuplanner.plan.planner.compare`, ranked; read-only."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[CompareRow] = []
        self._cells: list[tuple[Any, ...]] = []

    def set_rows(self, rows: Sequence[CompareRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self._cells = export_rows(self._rows)
        self.endResetModel()

    def rows(self) -> list[CompareRow]:
        return list(self._rows)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section][0]
            if role == Qt.ItemDataRole.ToolTipRole:
                return COLUMNS[section][2]
        if orientation == Qt.Orientation.Vertical and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(self._rows):
            return str(section + 1)
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not (0 <= index.row() < len(self._rows)) or not (0 <= index.column() < len(COLUMNS)):
            return None
        row, value = self._rows[index.row()], self._cells[index.row()][index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return _text(index.column(), value)
        if role == SORT_ROLE:
            return _sort_value(value)
        if role == ROW_ROLE:
            return index.row()
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.reason or f"{row.gpus} x {row.gpu} {row.pricing}: usable"
        if role == Qt.ItemDataRole.ForegroundRole and not row.usable:
            palette = QGuiApplication.palette()
            return QBrush(palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        if role == Qt.ItemDataRole.ForegroundRole and isinstance(value, bool):
            return QBrush(QColor("#2e9d4f" if value else "#d64545"))
        if role == Qt.ItemDataRole.FontRole and row.rank == 1:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return None


class CompareProxyModel(QSortFilterProxyModel):
    """Sorts on :data:`SORT_ROLE`; optionally hides rows that cannot be used."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._usable_only = False

    def set_usable_only(self, usable_only: bool) -> None:
        self.beginFilterChange()
        self._usable_only = usable_only
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        if not self._usable_only:
            return True
        model = self.sourceModel()
        assert isinstance(model, CompareTableModel)
        return model.rows()[source_row].usable

    def lessThan(self, left: QModelIndex | QPersistentModelIndex, right: QModelIndex | QPersistentModelIndex) -> bool:
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        if type(a) is not type(b):
            return isinstance(a, float)
        return bool(a < b)
