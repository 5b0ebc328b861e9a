"""The Plan pane's ranked table of every GPU option: its columns' widths, rows as tall as their "Why not",
"Only usable options", and the selected option kept across new results.

Signals:
    selectedChanged(object): the selected option's key (gpu, count, pricing), or None (nothing selected).
    optionDoubleClicked(object): the :class:`CompareRow` of a double-clicked row (plan with that option).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QFont, QFontMetrics, QKeySequence, QResizeEvent, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.planning import PlanResult
from gpuplanner.ui.plan.compare_model import COLUMNS, CompareProxyModel, CompareTableModel, TableCells
from gpuplanner.ui.plan.plan_details import OptionKey, option_key
from gpuplanner.ui.widgets.table_view import sortable_table

# one sample text per comparison column: the widths come from typical contents
SAMPLES = (
    "99",
    "A100 80GB PCIe",
    "8",
    "on-demand",
    "tensorwave",
    "yes",
    "999.9",
    "999.9",
    "0.000099",  # widest of "9,999.99" and a tiny cost
    "0.000099",  # widest of "9,999.99" and a tiny cost
    "yes",
    "yes",
    "yes",
    "",
)

NARROW_DROPS = ("provider", "p90_cost_usd", "fits")  # left out, in this order, where the table is too narrow
WHY_NOT_MIN_PX = 124  # "needs 1,394 GiB" on one line


class OptionsTable(QWidget):
    """The title, "Only usable options" and the sortable table of :class:`CompareTableModel` rows."""

    selectedChanged = Signal(object)
    optionDoubleClicked = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.selected_key: OptionKey | None = None  # the option selected (None: the recommended is shown)
        self._unset: set[str] = {"meets_deadline", "within_budget", "within_gpu_hours"}  # constraints not set
        self.model = CompareTableModel(self)
        self.proxy = CompareProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.table = sortable_table(
            self.proxy, 0, Qt.SortOrder.AscendingOrder, QAbstractItemView.SelectionMode.SingleSelection
        )
        self._size_columns()
        self._row_heights: dict[tuple[str, int], int] = {}
        self._tall_rows: set[int] = set()  # the view's rows made taller than one line
        self._fit_timer = QTimer(self)
        self._fit_timer.setSingleShot(True)
        self._fit_timer.setInterval(0)
        self._fit_timer.timeout.connect(self.fit_row_heights)
        self._columns_timer = QTimer(self)
        self._columns_timer.setSingleShot(True)
        self._columns_timer.setInterval(0)
        self._columns_timer.timeout.connect(self.fit_columns)
        header = self.table.horizontalHeader()
        header.sectionResized.connect(self._on_section_resized)
        header.sortIndicatorChanged.connect(self._fit_timer.start)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.table.setToolTip("Double-click a row to plan with that option")
        self.table.doubleClicked.connect(self._on_row_double_clicked)
        self.table.selectionModel().selectionChanged.connect(self._on_selection_changed)
        clear = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.table)
        clear.setContext(Qt.ShortcutContext.WidgetShortcut)
        clear.activated.connect(self.table.clearSelection)
        self.table.setAccessibleName("Comparison of GPU options")
        self.usable_only = QCheckBox("Only usable options")
        self.usable_only.toggled.connect(self._on_usable_only_toggled)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        top = QHBoxLayout()
        self.title = QLabel("Every GPU option, ranked (greyed: cannot be used, see why)")
        top.addWidget(self.title)
        top.addStretch(1)
        top.addWidget(self.usable_only)
        layout.addLayout(top)
        layout.addWidget(self.table)

    def _size_columns(self) -> None:
        """Widths from typical contents (ResizeToContents would scan every cell on every update), tight
        enough that every column fits at 1280x800; "Why not" takes what is left and wraps (each row as tall
        as its reason, see :meth:`fit_row_heights`), and every cell's tooltip holds the full reason."""
        header = self.table.horizontalHeader()
        metrics = self.table.fontMetrics()
        bold = QFont(self.table.font())
        bold.setBold(True)
        bold_metrics = QFontMetrics(bold)  # the recommended row's rank and GPU are bold
        assert len(SAMPLES) == len(COLUMNS), "one sample text per comparison column"
        header.setMinimumSectionSize(24)
        for index, text in enumerate(SAMPLES):
            measure = bold_metrics if COLUMNS[index][1] in ("rank", "gpu") else metrics
            width = max(measure.horizontalAdvance(text), metrics.horizontalAdvance(COLUMNS[index][0])) + 10
            self.table.setColumnWidth(index, width)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(True)

    def show_result(self, result: PlanResult, cells: TableCells) -> None:
        """New rows (the selection follows its option, or is forgotten when that option is gone); the
        deadline, budget and GPU-hour columns only when the form sets them."""
        request = result.request
        self.model.set_cells(cells)
        self._unset = {
            name
            for name, value in (
                ("meets_deadline", request.deadline_hours),
                ("within_budget", request.budget_usd),
                ("within_gpu_hours", request.max_gpu_hours),
            )
            if value is None
        }
        self.fit_columns()
        self._restore_selection()
        self.fit_row_heights()

    def fit_columns(self) -> None:
        """Show the columns of the constraints the form sets; where the table is too narrow for every column
        and a readable "Why not" (a 1024-pixel window), leave out the provider, then the P90 cost (both are in
        the row's details), so the table never scrolls sideways."""
        names = [c[1] for c in COLUMNS]
        width = self.table.viewport().width()
        dropped: set[str] = set()
        for name in ("", *NARROW_DROPS):
            dropped.add(name)
            shown = [i for i, n in enumerate(names[:-1]) if n not in self._unset and n not in dropped]
            if width <= 0 or sum(self.table.columnWidth(i) for i in shown) + WHY_NOT_MIN_PX <= width:
                break
        for index, name in enumerate(names):
            hide = name in self._unset or name in dropped
            if self.table.isColumnHidden(index) != hide:
                self.table.setColumnHidden(index, hide)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        self.fit_columns()
        self._columns_timer.start()  # again once every layout has settled (a pane shown after a resize)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt naming)
        super().showEvent(event)
        self._columns_timer.start()

    # ------------------------------------------------------------------ selection

    def _restore_selection(self) -> None:
        """Select the row of :attr:`selected_key` again after new rows came (the ranks move rows around);
        forget it when that option is gone."""
        key = self.selected_key
        selection = self.table.selectionModel()
        selection.blockSignals(True)
        try:
            self.table.clearSelection()
            if key is None:
                return
            index = self._view_index(key)
            if index is not None:
                self.table.selectRow(index.row())
                return
            self.selected_key = None
        finally:
            selection.blockSignals(False)
            self.table.viewport().update()

    def _view_index(self, key: OptionKey) -> Any:
        """The view's index of the option ``key`` (None when the view does not show it)."""
        for source_row, row in enumerate(self.model.rows()):
            if option_key(row) == key:
                index = self.proxy.mapFromSource(self.model.index(source_row, 0))
                return index if index.isValid() else None
        return None

    @Slot("QItemSelection", "QItemSelection")
    def _on_selection_changed(self, *_: Any) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            row = self.model.rows()[self.proxy.mapToSource(rows[0]).row()]
            self.selected_key = option_key(row)
        else:
            self.selected_key = None
        self.selectedChanged.emit(self.selected_key)

    def select_option(self, gpu: str, gpus: int, pricing: str) -> bool:
        """Select the table's row of one option (as a click does); False when the table has no such row."""
        index = self._view_index((gpu, gpus, pricing))
        if index is None:
            return False
        self.table.selectRow(index.row())
        self.table.scrollTo(index)
        return True

    @Slot("QModelIndex")
    def _on_row_double_clicked(self, index: Any) -> None:
        self.optionDoubleClicked.emit(self.model.rows()[self.proxy.mapToSource(index).row()])

    # ------------------------------------------------------------------ row heights

    @Slot(bool)
    def _on_usable_only_toggled(self, checked: bool) -> None:
        self.proxy.set_usable_only(checked)
        self.fit_row_heights()

    @Slot(int, int, int)
    def _on_section_resized(self, column: int, _old: int, _new: int) -> None:
        if column == len(COLUMNS) - 1:
            self._fit_timer.start()

    @Slot()
    def fit_row_heights(self) -> None:
        """Each row as tall as its "Why not" text wrapped in that column's width (the other cells hold one
        line), so no reason is cut off. A reason that may wrap is measured by the table's own delegate for
        that width (as ``sizeHintForRow`` does, without visiting every cell); only those rows are looked
        up in the sorted view, and heights are cached per text and width."""
        column = len(COLUMNS) - 1
        width = self.table.columnWidth(column)
        if width < 40:
            return
        metrics = self.table.fontMetrics()
        header = self.table.verticalHeader()
        line = header.defaultSectionSize()
        cache = self._row_heights
        option = QStyleOptionViewItem()
        option.initFrom(self.table)
        option.font = self.table.font()
        option.features |= QStyleOptionViewItem.ViewItemFeature.WrapText
        option.textElideMode = self.table.textElideMode()
        option.rect = QRect(0, 0, width, line)
        delegate = self.table.itemDelegate()
        tall: dict[int, int] = {}
        for source_row, text in enumerate(self.model.column_texts(column)):
            if not text or text == "–":
                continue
            height = cache.get((text, width))
            if height == line:
                continue
            may_wrap = height is not None or metrics.horizontalAdvance(text) > width - 24
            if not may_wrap:
                cache[(text, width)] = line
                continue
            row = self.proxy.mapFromSource(self.model.index(source_row, column)).row()
            if row < 0:
                continue
            if height is None:
                height = max(line, delegate.sizeHint(option, self.proxy.index(row, column)).height() + 4)
                cache[(text, width)] = height
            if height > line:
                tall[row] = height
        count = self.proxy.rowCount()
        for row in self._tall_rows - tall.keys():
            if row < count and header.sectionSize(row) != line:
                header.resizeSection(row, line)
        for row, height in tall.items():
            if header.sectionSize(row) != height:
                header.resizeSection(row, height)
        self._tall_rows = set(tall)
