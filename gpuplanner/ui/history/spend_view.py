"""History > Spend: spend summed by a tag and by month, filtered by tags, with exports (CSV, Markdown, JSON).

The sums are :func:`gpuplanner.history.spend.spend_report`'s (those of `gpuplanner runs report`), computed
on a worker thread; bad input (a month that is not YYYY-MM, a tag that is not key=value) is shown under
the fields and nothing is recomputed until it is fixed.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.spend_report import render_report  # the CLI's renderer: one format for both
from gpuplanner.history.db import open_db
from gpuplanner.history.spend import MonthError, SpendReport, parse_month, spend_report
from gpuplanner.history.tags import TagError, parse_tags, tag_keys
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.human import human_cost, human_number, usd_cell
from gpuplanner.ui.widgets.table_view import export_to_file

NO_GROUP = "(month only)"
# the report's column keys (its CSV and JSON keep them) in words
SPEND_HEADERS = {
    "group": "Group",
    "month": "Month",
    "runs": "Runs",
    "gpu_hours": "GPU-hours",
    "cost_usd": "Cost",
    "unpriced_runs": "Runs without a price",
}


def _load(db_path: Path, by: str | None, month: str | None, where: dict[str, str]) -> tuple[SpendReport, list[str]]:
    with open_db(db_path) as db:
        return spend_report(db, by=by, month=month, where=where), tag_keys(db)


class SpendDialog(QDialog):
    """Group by a tag (or by month only), one month or all, only runs with given tags."""

    updated = Signal()  # a report is shown

    def __init__(self, db_path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Spend by tag and month")
        self.db_path = Path(db_path)
        self.report: SpendReport | None = None
        self._generation = 0
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_loaded)
        self._signals.failed.connect(self._on_failed)

        self.by_combo = QComboBox()
        self.by_combo.setEditable(True)
        self.by_combo.addItem(NO_GROUP)
        self.by_combo.setToolTip("The tag whose values the spend is summed by (e.g. project)")
        self.month_edit = QLineEdit()
        self.month_edit.setPlaceholderText("all months (or YYYY-MM, e.g. 2026-11)")
        self.tags_edit = QLineEdit()
        self.tags_edit.setPlaceholderText("only runs with these tags, e.g. owner=ana")
        self.error_label = QLabel()
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Group by tag:", self.by_combo)
        form.addRow("Month (UTC):", self.month_edit)
        form.addRow("Filter tags:", self.tags_edit)
        self.table = QTableWidget(0, 6)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setAccessibleName("Spend")
        self.note = QLabel()
        self.note.setWordWrap(True)
        bar = QHBoxLayout()
        bar.addWidget(self.note, 1)
        self.buttons: dict[str, QPushButton] = {}
        for kind, label in (("csv", "Export CSV…"), ("markdown", "Export Markdown…"), ("json", "Export JSON…")):
            button = QPushButton(label)
            button.setEnabled(False)
            button.clicked.connect(lambda _=False, k=kind: self.export_dialog(k))
            self.buttons[kind] = button
            bar.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error_label)
        layout.addWidget(self.table, 1)
        layout.addLayout(bar)
        self.by_combo.currentTextChanged.connect(self.recompute)
        self.month_edit.editingFinished.connect(self.recompute)
        self.tags_edit.editingFinished.connect(self.recompute)
        self.resize(820, 520)
        self.recompute()

    def inputs(self) -> tuple[str | None, str | None, dict[str, str]]:
        """The fields checked (raises ValueError with the field's name first)."""
        text = self.by_combo.currentText().strip()
        by = None if text in ("", NO_GROUP) else text
        if by is not None:
            try:
                parse_tags([f"{by}=x"])
            except TagError as exc:
                raise ValueError(f"Group by tag: {exc}") from None
        month_text = self.month_edit.text().strip()
        try:
            month = parse_month(month_text) if month_text else None
        except MonthError as exc:
            raise ValueError(f"Month: {exc}") from None
        try:
            where = parse_tags(t for t in re.split(r"[\s,]+", self.tags_edit.text().strip()) if t)
        except TagError as exc:
            raise ValueError(f"Filter tags: {exc}") from None
        return by, month, where

    @Slot()
    def recompute(self) -> None:
        try:
            by, month, where = self.inputs()
        except ValueError as exc:
            self.error_label.setText(str(exc))
            return
        self.error_label.setText("")
        self._generation += 1
        path = self.db_path
        self._pool.start(
            BackgroundJob(lambda: _load(path, by, month, where), self._signals, generation=self._generation)
        )

    @Slot(str, int, object)
    def _on_loaded(self, _kind: str, generation: int, payload: tuple[SpendReport, list[str]]) -> None:
        if generation != self._generation:
            return
        report, keys = payload
        self.report = report
        known = {self.by_combo.itemText(i) for i in range(self.by_combo.count())}
        for key in keys:
            if key not in known:
                self.by_combo.blockSignals(True)
                self.by_combo.addItem(key)
                self.by_combo.blockSignals(False)
        columns = report.columns()
        rows = report.table()
        self.table.setColumnCount(len(columns))
        self.table.setHorizontalHeaderLabels([SPEND_HEADERS.get(c, c.replace("_", " ").capitalize()) for c in columns])
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                if columns[c] == "cost_usd":
                    text = usd_cell(value)
                elif columns[c] == "gpu_hours":
                    text = human_number(value)
                else:  # a group such as the history's pricing "on_demand" in words
                    text = "" if value is None else str(value).replace("on_demand", "on-demand")
                self.table.setItem(r, c, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        unpriced = report.total.unpriced_runs
        self.note.setText(
            f"{report.total.runs} runs, {human_cost(report.total.cost_usd)}, {report.total.gpu_hours:,.2f} GPU-hours"
            + (f"; {unpriced} without a price (not in the $)" if unpriced else "")
        )
        for button in self.buttons.values():
            button.setEnabled(True)
        self.updated.emit()

    @Slot(str, int, str)
    def _on_failed(self, _kind: str, generation: int, message: str) -> None:
        if generation == self._generation:
            self.error_label.setText(f"Cannot read the history: {message}")

    def export(self, path: str | Path, kind: str) -> None:
        assert self.report is not None
        Path(path).write_text(render_report(self.report, kind), encoding="utf-8")

    def export_dialog(self, kind: str) -> str | None:
        if self.report is None:
            return None
        suffix = {"csv": ".csv", "markdown": ".md", "json": ".json"}[kind]
        return export_to_file(self, "Export spend", f"gpu-spend{suffix}", suffix, lambda path: self.export(path, kind))

    def shutdown(self) -> None:
        self._generation += 1
        self._pool.waitForDone(5000)
