"""The ranked comparison as a Qt table model, and the same table as plain rows for CSV/Markdown.

Sorting goes through a :class:`QSortFilterProxyModel` on :data:`SORT_ROLE`, which holds a value of
one type per column (numbers as floats with "unknown" as +inf, text as text), so any column sorts.
Rows that cannot be used (does not fit, no price, misses the deadline, over budget) are greyed and
carry their reason in the last column and the tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication, QPalette

from gpuplanner.app.compare_row import TABLE_COLUMNS, table_row_cells
from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.memory import GIB
from gpuplanner.ui.human import significant
from gpuplanner.ui.widgets.table_view import ColumnsTableModel

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
ROW_ROLE = Qt.ItemDataRole.UserRole + 2

# (header, CSV/Markdown column name, tooltip)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("#", "rank", "Rank among usable options: cheapest expected cost first"),
    ("GPU", "gpu", "GPU type"),
    ("n", "gpus", "GPUs in the run"),
    ("Pricing", "pricing", "On-demand, or spot (cheaper, may be interrupted)"),
    ("Provider", "provider", "Cheapest offer in the catalog"),
    ("Fits", "fits", "Peak memory per GPU within the headroom"),
    ("GiB", "mem_gib", "Peak memory per GPU (GiB)"),
    ("Hours", "hours", "Wall-clock hours (spot: expected, with interruptions)"),
    ("Cost $", "cost_usd", "Cost (spot: expected)"),
    (
        "P90 $",
        "p90_cost_usd",
        "P90 cost: the top of the likely (P10-P90) cost, from the speed's error and, on spot, the interruptions",
    ),
    ("On time", "meets_deadline", "Finishes before the deadline (spot: the P90 over simulated interruptions)"),
    ("In budget", "within_budget", "Within the budget (spot: the P90 over simulated interruptions)"),
    (
        "In GPU-h",
        "within_gpu_hours",
        "Within the GPU-hour cap (GPUs x hours; spot: the P90 over simulated interruptions)",
    ),
    ("Why not", "reason", "Why the option cannot be used (hover a row for the whole reason)"),
)
EXPORT_COLUMNS = tuple(c[1] for c in COLUMNS)
assert EXPORT_COLUMNS == TABLE_COLUMNS, "the table shows the CLI's columns, in its order"
TEXT_COLUMNS = ("gpu", "pricing", "provider", "reason")


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def table_row(row: CompareRow) -> tuple[Any, ...]:
    """One comparison row as plain values, in :data:`EXPORT_COLUMNS` order (`gpuplanner compare`'s cells)."""
    return table_row_cells(row)


def export_rows(rows: Sequence[CompareRow]) -> list[tuple[Any, ...]]:
    return [table_row(row) for row in rows]


def _compact(value: float, places: int, whole_from: float, thousands_from: float) -> str:
    """A number that fits its column at any size: ``places`` decimals below ``whole_from``, whole numbers
    below ``thousands_from``, then thousands ("19k") and millions ("2.3M")."""
    if value < whole_from:
        return f"{value:,.{places}f}"
    if value < thousands_from:
        return f"{value:,.0f}"
    if round(value / 1000) < 1000:  # 999,999 is "1.0M", not "1,000k"
        return f"{value / 1000:,.0f}k"
    return f"{value / 1_000_000:,.1f}M"


def short_reason(row: CompareRow) -> str:
    """The table's "Why not" as a short phrase that fits one line ("needs 1,394 GiB, no price"); the whole
    reason is the row's tooltip and the exports' ``reason``."""
    if not row.reason:
        return "fitted settings" if row.fitted else ""  # which ones: the tooltip and the details
    plan, words = row.plan, []
    if plan.fits is False:
        words.append(f"needs {plan.memory.total / GIB:,.0f} GiB" if plan.capacity_gib else "does not fit")
    if row.cost_usd is None:
        words.append("no price")
    for ok, word in ((plan.deadline_ok, "late"), (plan.budget_ok, "over budget"), (plan.gpu_hours_ok, "over GPU-h")):
        if ok is False:
            words.append(word)
    return ", ".join(words) or row.reason


def _text(column: int, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    name = EXPORT_COLUMNS[column]
    if name in ("cost_usd", "p90_cost_usd"):
        if 0 < value < 0.01:  # tiny amounts to 2 significant figures ("0.000022"), not "0.00"
            return significant(value, 2)
        return _compact(value, 2, 10_000, 1_000_000)
    if name == "hours":
        return "<0.1" if 0 < value < 0.05 else _compact(value, 1, 1000, 10_000)
    if name == "mem_gib":  # never wider than "999.9" or "9,999": the column is sized for them, nothing elides
        return _compact(value, 1, 1000, 10_000)
    return str(value)


_REASON = EXPORT_COLUMNS.index("reason")
_BOLD_COLUMNS = (EXPORT_COLUMNS.index("rank"), EXPORT_COLUMNS.index("gpu"))
_UNROUNDED = {EXPORT_COLUMNS.index(name): name for name in ("hours", "cost_usd", "p90_cost_usd")}


def _shown_cells(row: CompareRow, cells: tuple[Any, ...]) -> list[Any]:
    """The cells the table writes: the export's, with hours and costs unrounded (a tiny cost reads
    "0.000022", not the export's 0.0)."""
    shown = list(cells)
    for index, name in _UNROUNDED.items():
        shown[index] = _finite(getattr(row, name))
    return shown


def _sort_value(column: int, value: Any) -> Any:
    """One type per column, so the proxy's native (C++) comparison sorts: text or float."""
    if EXPORT_COLUMNS[column] in TEXT_COLUMNS:
        return "~" if value is None else str(value).lower()  # "~" sorts unknowns last
    if value is None:
        return math.inf
    if isinstance(value, bool):
        return 0.0 if value else 1.0
    return float(value)


@dataclass(frozen=True)
class TableCells:
    """Every cell of the comparison table, worked out once per answer in plain Python (the Plan pane does it
    on its worker thread, beside the engine, so the GUI thread only swaps lists): per row, per column."""

    rows: tuple[CompareRow, ...]
    cells: list[tuple[Any, ...]]  # the export's values (:func:`table_row`)
    texts: list[list[str]]
    keys: list[list[Any]]  # :data:`SORT_ROLE`
    align: list[list[int]]
    tips: list[list[str]]
    colours: list[tuple[str | None, ...]]  # per cell: None, "grey" (unusable row), "good" or "bad" (yes/no)
    row_ids: list[list[int]]  # :data:`ROW_ROLE`

    @property
    def recommended(self) -> int | None:
        """The source row of the recommended option (rank 1), whose rank and GPU are bold."""
        return next((r for r, row in enumerate(self.rows) if row.rank == 1), None)


def _tip(row: CompareRow) -> str:
    if row.reason:
        return row.reason
    fitted = f" with fitted settings ({', '.join(row.fitted)}); Launch uses them" if row.fitted else ""
    return f"{row.gpus} x {row.gpu} {row.pricing}: usable{fitted}"


def table_cells(rows: Sequence[CompareRow]) -> TableCells:
    """The table's cells for ``rows`` (no Qt objects: safe on any thread)."""
    rows = tuple(rows)
    n = len(COLUMNS)
    cells = export_rows(rows)
    texts, keys, align, tips, colours, row_ids = [], [], [], [], [], []
    grey = ("grey",) * n
    for r, (row, values) in enumerate(zip(rows, cells)):
        texts.append([_text(c, v) for c, v in enumerate(_shown_cells(row, values))])
        texts[-1][_REASON] = short_reason(row)
        keys.append([_sort_value(c, v) for c, v in enumerate(values)])
        align.append([_RIGHT if isinstance(v, (int, float)) and not isinstance(v, bool) else _LEFT for v in values])
        tips.append([_tip(row)] * n)
        if row.usable:
            colours.append(tuple(("good" if v else "bad") if isinstance(v, bool) else None for v in values))
        else:
            colours.append(grey)
        row_ids.append([r] * n)
    return TableCells(rows, cells, texts, keys, align, tips, colours, row_ids)


class CompareTableModel(ColumnsTableModel):
    """Rows of :func:`gpuplanner.plan.planner.compare`, ranked; read-only.

    Every cell's text, sort key and colours are computed once per answer (:func:`table_cells`, which the
    Plan pane runs on its worker), so the many ``data()`` calls of painting and sorting are plain lookups.
    """

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._table = table_cells(())
        self._by_role: dict[int, list[Any]] = {}

    def set_rows(self, rows: Sequence[CompareRow]) -> None:
        """Show new rows (see :meth:`set_cells`)."""
        self.set_cells(table_cells(rows))

    def set_cells(self, cells: TableCells) -> None:
        """Show new rows whose cells :func:`table_cells` worked out. With as many rows as before (the usual
        edit: same GPUs and counts) the cells change in place (one dataChanged; the proxy re-sorts), else
        the model resets."""
        count = len(cells.rows)
        same_shape = count > 0 and count == len(self._table.rows)
        if not same_shape:
            self.beginResetModel()
        self._table = cells
        self._index_roles()
        if same_shape:
            self.dataChanged.emit(self.index(0, 0), self.index(count - 1, len(COLUMNS) - 1))
        else:
            self.endResetModel()

    def rows(self) -> list[CompareRow]:
        return list(self._table.rows)

    def column_texts(self, column: int) -> list[str]:
        """The shown text of one column, row by row (source order)."""
        return [texts[column] for texts in self._table.texts]

    def is_usable(self, row: int) -> bool:
        return self._table.rows[row].usable

    def row_count(self) -> int:
        return len(self._table.rows)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if (
            orientation == Qt.Orientation.Vertical
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(self._table.rows)
        ):
            return str(section + 1)  # the rank
        return super().headerData(section, orientation, role)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        # The hot path of painting and sorting: one dict lookup and two list indexings per call.
        by_row = self._by_role.get(role)
        r = index.row()
        if by_row is None or r < 0 or r >= len(by_row):
            return None
        cells = by_row[r]
        c = index.column()
        return cells[c] if 0 <= c < len(cells) else None

    def _index_roles(self) -> None:
        """Every role's values per cell: the worked-out lists, with the colours and the bold font (Qt objects,
        made here on the GUI thread) looked up per row."""
        table = self._table
        n = len(COLUMNS)
        palette = QGuiApplication.palette()
        brushes = {
            None: None,
            "grey": QBrush(palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)),
            "good": QBrush(QColor("#2e9d4f")),
            "bad": QBrush(QColor("#d64545")),
        }
        by_kinds: dict[tuple[str | None, ...], list[Any]] = {}  # rows share a handful of colour patterns
        fg = []
        for kinds in table.colours:
            row = by_kinds.get(kinds)
            if row is None:
                row = by_kinds[kinds] = [brushes[k] for k in kinds]
            fg.append(row)
        # the recommended row's rank and GPU in bold (bold numbers would need wider columns)
        plain: list[Any] = [None] * n
        fonts = [plain] * len(table.rows)
        recommended = table.recommended
        if recommended is not None:
            bold = QFont()
            bold.setBold(True)
            fonts[recommended] = [bold if c in _BOLD_COLUMNS else None for c in range(n)]
        self._by_role = {
            int(Qt.ItemDataRole.DisplayRole): table.texts,
            int(SORT_ROLE): table.keys,
            int(Qt.ItemDataRole.ForegroundRole): fg,
            int(Qt.ItemDataRole.TextAlignmentRole): table.align,
            int(Qt.ItemDataRole.ToolTipRole): table.tips,
            int(Qt.ItemDataRole.FontRole): fonts,
            int(ROW_ROLE): table.row_ids,
        }


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
        return model.is_usable(source_row)
