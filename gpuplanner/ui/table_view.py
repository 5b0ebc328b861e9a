"""The app's look for a sortable table of rows (Plan comparison, History runs)."""

from __future__ import annotations

from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QTableView


def sortable_table(proxy: QSortFilterProxyModel, sort_column: int, order: Qt.SortOrder,
                   selection: QAbstractItemView.SelectionMode) -> QTableView:
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
    return table
