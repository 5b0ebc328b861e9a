"""The app's look for a sortable table of rows and its Export button (Plan comparison, History runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QAbstractItemView, QFileDialog, QMenu, QMessageBox, QTableView, QToolButton, QWidget


class ColumnsTableModel(QAbstractTableModel):
    """A flat table with fixed columns ``(header, key, tooltip)``: rows counted by :meth:`row_count`,
    header text and tooltips from the columns. Subclasses provide ``data``."""

    COLUMNS: tuple[tuple[str, str, str], ...] = ()

    def row_count(self) -> int:
        raise NotImplementedError

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self.row_count()

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(self.COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return self.COLUMNS[section][0]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.COLUMNS[section][2]
        return None


def sortable_table(
    proxy: QSortFilterProxyModel, sort_column: int, order: Qt.SortOrder, selection: QAbstractItemView.SelectionMode
) -> QTableView:
    """A row-selecting, sortable table over ``proxy`` with compact rows and no row numbers."""
    table = QTableView()
    table.setModel(proxy)
    table.setSortingEnabled(True)
    table.sortByColumn(sort_column, order)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(selection)
    table.setAlternatingRowColors(True)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(22)
    table.setTabKeyNavigation(False)  # Tab moves on to the next control; arrow keys move between cells
    return table


def export_menu_button(items: Sequence[tuple[str, str]], on_triggered: Callable[[QAction], None]) -> QToolButton:
    """An "Export" button whose menu lists ``(label, kind)`` items; the chosen action carries ``kind``."""
    button = QToolButton()
    button.setText("Export")
    button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    menu = QMenu(button)
    for label, kind in items:
        menu.addAction(label).setData(kind)
    menu.triggered.connect(on_triggered)
    button.setMenu(menu)
    return button


def export_to_file(
    parent: QWidget, title: str, default_name: str, suffix: str, write: Callable[[str], None]
) -> str | None:
    """Ask where to save (the suffix added when missing) and ``write(path)``; a write error is shown, not
    raised. Returns the path written, or None when cancelled or failed."""
    path, _ = QFileDialog.getSaveFileName(parent, title, default_name)
    if not path:
        return None
    if not path.endswith(suffix):
        path += suffix
    try:
        write(path)
    except OSError as exc:
        QMessageBox.warning(parent, "Export", f"Cannot write {path}: {exc}")
        return None
    return path
