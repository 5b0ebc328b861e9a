"""History > Searches: a search's trials grouped, with the best metric against spend and the cumulative
spend over time against the cap, and exports (CSV, Markdown, a one-page PDF).

The figures are :mod:`gpuplanner.sweep.lookback`'s (the same as `gpuplanner sweep show`), read on a worker
thread; this module only lays them out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QThreadPool, Signal, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.export.tables import to_csv, to_markdown
from gpuplanner.sweep.lookback import (
    TRIAL_COLUMNS,
    SearchReview,
    load_review,
    params_text,
    study_names,
    trial_table,
)
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.human import NO_PRICE, human_cost, human_money, human_number
from gpuplanner.ui.sweep.sweep_text import TRIAL_HEADERS, cap_words, trial_cells
from gpuplanner.ui.widgets.empty_chart import EmptyMessage
from gpuplanner.ui.widgets.report_pdf import Report, write_pdf
from gpuplanner.ui.widgets.table_view import export_to_file

OUTCOME_COLOURS = {"finished": "#2a9d4b", "pruned": "#8a8f98", "stopped": "#d98a00", "failed": "#c0392b"}


def summary_text(review: SearchReview) -> str:
    """A search's state in four lines of words: what it spent against its caps, its trials' outcomes, why
    it stopped and its best trial."""
    c = review.counts
    spent = NO_PRICE if review.unpriced else human_money(review.spent_usd)
    if review.unpriced_trials and not review.unpriced:
        spent += f" ({review.unpriced_trials} trial(s) without a price, not in it)"
    if review.budget_usd is not None:
        spent += f" of the {human_money(review.budget_usd)} budget ({review.spent_usd / review.budget_usd:.0%})"
    if review.max_gpu_hours is not None:
        spent += f"; {human_number(review.spent_gpu_hours)} of {human_number(review.max_gpu_hours)} GPU-hours"
    lines = [
        f"Spent {spent}.",
        f"{c['trials']} trials: {c['finished']} finished, {c['pruned']} pruned, {c['stopped']} stopped by the cap, "
        f"{c['failed']} failed, {c['running']} running.",
        f"Stopped: {cap_words(review.stop_reason) if review.stop_reason else 'not yet (running, or never finished)'}.",
    ]
    if review.best is not None:
        b = review.best
        lines.append(
            f"Best: trial {b.number} (run #{b.run_id}), {review.metric.replace('_', ' ')} {b.value:.4f} "
            f"for {human_cost(b.spend_usd)}: {params_text(b.params)}."
        )
    return "\n".join(lines)


class TrialTable(QTableWidget):
    """A search's trials in words (the Sweep pane and History > Searches): outcome in its colour, numbers
    right-aligned, the parameters in the last, stretching column (whole in the tooltip)."""

    NUMERIC = frozenset(
        TRIAL_HEADERS.index(name) for name in ("Trial", "Run", "Last step", "Eval loss", "Spend", "GPU-hours")
    )
    OUTCOME = TRIAL_HEADERS.index("Outcome")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(TRIAL_HEADERS), parent)
        self.setHorizontalHeaderLabels(list(TRIAL_HEADERS))
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.setWordWrap(False)
        header = self.horizontalHeader()
        for column in range(len(TRIAL_HEADERS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)

    def show_review(self, review: SearchReview) -> None:
        rows = trial_table(review)
        self.setRowCount(len(rows))
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for r, row in enumerate(rows):
            for c, text in enumerate(trial_cells(row)):
                item = QTableWidgetItem(text)
                if c in self.NUMERIC:
                    item.setTextAlignment(right)
                if c == self.OUTCOME and text in OUTCOME_COLOURS:
                    item.setForeground(pg.mkColor(OUTCOME_COLOURS[text]))
                if c == len(TRIAL_HEADERS) - 1:
                    item.setToolTip(text)
                self.setItem(r, c, item)


NO_SEARCH = "no search shown"
NO_BEST = "no trial has an eval loss yet"
NO_SPEND = "nothing spent yet"


class SearchPlots(QWidget):
    """Best metric against spend (a step line) and cumulative spend over time with the cap as a line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.best_plot = pg.PlotWidget()
        self.best_plot.setTitle("Best eval loss against spend")
        self.best_plot.setLabel("bottom", "spent ($)")
        self.best_plot.setLabel("left", "best eval loss")
        self.spend_plot = pg.PlotWidget()
        self.spend_plot.setTitle("Cumulative spend against the cap")
        self.spend_plot.setLabel("bottom", "minutes since the first step")
        self.spend_plot.setLabel("left", "spent ($)")
        self.cap_line = pg.InfiniteLine(
            angle=0, pen=pg.mkPen("#c0392b", style=Qt.PenStyle.DashLine), label="cap ${value:,.2f}",
            labelOpts={"position": 0.1, "color": "#c0392b"},
        )  # fmt: skip
        self.spend_plot.addItem(self.cap_line)
        for plot in (self.best_plot, self.spend_plot):
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.hideButtons()  # no stray "A" auto-range button: the ranges follow the search
            layout.addWidget(plot)
        self.apply_palette()
        self.best_curve = self.best_plot.plot([], [], pen=pg.mkPen("#2a6fdb", width=2), symbol="o", symbolSize=7)
        self.spend_curve = self.spend_plot.plot([], [], pen=pg.mkPen("#2a6fdb", width=2))
        self.shown: dict[str, Any] = {}
        # nothing to draw yet: the reason alone, no axes around nothing
        self.best_empty = EmptyMessage(self.best_plot.getPlotItem())
        self.spend_empty = EmptyMessage(self.spend_plot.getPlotItem())
        self.best_empty.show(NO_SEARCH)
        self.spend_empty.show(NO_SEARCH)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "spend_plot"):  # light/dark switched
            self.apply_palette()

    def apply_palette(self) -> None:
        """The window's colours (the plots follow light and dark like the History plots)."""
        palette = self.palette()
        fg = palette.color(QPalette.ColorRole.Text)
        for plot in (self.best_plot, self.spend_plot):
            plot.setBackground(palette.color(QPalette.ColorRole.Base))
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(fg))
                plot.getAxis(name).setPen(pg.mkPen(fg))
            plot.setTitle(plot.plotItem.titleLabel.text, color=fg.name())

    def show_review(self, review: SearchReview) -> None:
        spend = [s for s, _, _ in review.best_curve]
        best = [v for _, v, _ in review.best_curve]
        if review.best_curve:  # a step line: the best so far holds until the next improvement
            xs, ys = [spend[0]], [best[0]]
            for s, v in zip(spend[1:], best[1:]):
                xs += [s, s]
                ys += [ys[-1], v]
            xs.append(max(review.spent_usd, xs[-1]))
            ys.append(ys[-1])
            self.best_curve.setData(xs, ys)
        else:
            self.best_curve.setData([], [])
        curve = review.spend_curve
        t0 = curve[0][0] if curve else 0.0
        minutes = [(t - t0) / 60.0 for t, _ in curve]
        self.spend_curve.setData(minutes, [v for _, v in curve])
        capped = bool(review.budget_usd)  # no cap (None, or a search stored with $0): no "cap $0.00" line
        self.cap_line.setVisible(capped)
        if capped:
            self.cap_line.setValue(review.budget_usd)
        self.spend_plot.setTitle(
            "Cumulative spend against the cap" if capped else "Cumulative spend (no cap set)",
            color=self.palette().color(QPalette.ColorRole.Text).name(),
        )
        # spend from $0 (never a negative-dollar axis); $1 tall before anything was spent
        top = max([review.budget_usd or 0.0] + [v for _, v in curve])
        self.spend_plot.setYRange(0, top * 1.1 if top > 0 else 1.0, padding=0)
        self.spend_plot.enableAutoRange(axis="x")
        self.best_plot.enableAutoRange()
        fg = self.palette().color(QPalette.ColorRole.Text)
        self.best_empty.show(None if review.best_curve else NO_BEST, fg)
        self.spend_empty.show(None if curve else NO_SPEND, fg)
        self.shown = {"best": list(zip(spend, best)), "spend": list(zip(minutes, [v for _, v in curve]))}


class SearchesDialog(QDialog):
    """The searches beside the history: pick one to see its trials, plots and best configuration."""

    loaded = Signal(str)  # a search's review is shown

    def __init__(self, db_path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Searches")
        self.db_path = Path(db_path)
        self.review: SearchReview | None = None
        self._generation = 0
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_loaded)
        self._signals.failed.connect(self._on_failed)

        self.list = QListWidget()
        self.list.setAccessibleName("Searches")
        self.list.currentTextChanged.connect(self.show_search)
        self.summary = QLabel("Choose a search.")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.command = QLabel()
        self.command.setWordWrap(True)
        self.command.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.command.setStyleSheet("font-family: monospace;")
        self.plots = SearchPlots()
        self.table = TrialTable()
        self.buttons: dict[str, QPushButton] = {}
        bar = QHBoxLayout()
        bar.addStretch(1)
        for kind, label in (("csv", "Export CSV…"), ("markdown", "Export Markdown…"), ("pdf", "Export PDF…")):
            button = QPushButton(label)
            button.setEnabled(False)
            button.clicked.connect(lambda _=False, k=kind: self.export_dialog(k))
            self.buttons[kind] = button
            bar.addWidget(button)

        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(self.summary)
        rv.addWidget(self.plots, 3)
        rv.addWidget(self.table, 2)
        rv.addWidget(self.command)
        rv.addLayout(bar)
        splitter = QSplitter()
        splitter.addWidget(self.list)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 4)
        splitter.setSizes([180, 1000])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        self.resize(1200, 720)
        self.reload()

    listed = Signal(list)  # the search names were read

    def reload(self) -> None:
        """Read the search names on the worker (the study file is opened through Optuna)."""
        self._generation += 1
        path = self.db_path
        self._pool.start(
            BackgroundJob(lambda: ("names", study_names(path)), self._signals, generation=self._generation)
        )

    def _show_names(self, names: list[str]) -> None:
        current = self.list.currentItem().text() if self.list.currentItem() else None
        self.list.blockSignals(True)
        self.list.clear()
        self.list.addItems(names)
        self.list.blockSignals(False)
        if not names:
            self.summary.setText("No searches yet: start one with `gpuplanner sweep run` or the Sweep pane.")
        if current in names:
            self.select(current)
        self.listed.emit(names)

    @Slot(str)
    def show_search(self, name: str) -> None:
        if not name:
            return
        self._generation += 1
        self.summary.setText(f"Loading {name}…")
        path = self.db_path
        self._pool.start(
            BackgroundJob(lambda: ("review", load_review(path, name)), self._signals, generation=self._generation)
        )

    def select(self, name: str) -> None:
        items = self.list.findItems(name, Qt.MatchFlag.MatchExactly)
        if items:
            self.list.setCurrentItem(items[0])

    @Slot(str, int, object)
    def _on_loaded(self, _kind: str, generation: int, payload: tuple[str, Any]) -> None:
        kind, value = payload
        if kind == "names":
            self._show_names(value)  # names are never stale: a review asked for meanwhile still comes
            return
        if generation != self._generation:
            return
        self._show_review(value)

    def _show_review(self, review: SearchReview) -> None:
        self.review = review
        self.summary.setText(summary_text(review))
        self.command.setText(f"Run the best in full:\n{review.best_command}" if review.best_command else "")
        self.table.show_review(review)
        self.plots.show_review(review)
        for button in self.buttons.values():
            button.setEnabled(True)
        self.loaded.emit(review.study)

    @Slot(str, int, str)
    def _on_failed(self, _kind: str, generation: int, message: str) -> None:
        if generation == self._generation:
            self.summary.setText(f"Cannot read the search: {message}")

    # ------------------------------------------------------------------ exports

    def report(self) -> Report:
        assert self.review is not None
        review = self.review
        report = Report(f"Search {review.study}", time.strftime("%Y-%m-%d %H:%M"))
        for line in summary_text(review).splitlines():  # one paragraph a line, as the dialog shows them
            report.text(line)
        report.image(self.plots.grab().toImage(), 70.0)
        report.table(TRIAL_HEADERS, [trial_cells(row) for row in trial_table(review)], max_rows=14)
        if review.best_command:
            report.text("Run the best in full: " + review.best_command)
        return report

    def export(self, path: str | Path, kind: str) -> None:
        assert self.review is not None
        if kind == "pdf":
            write_pdf(self.report(), str(path))
            return
        rows = trial_table(self.review)
        text = to_csv(TRIAL_COLUMNS, rows) if kind == "csv" else (
            f"# Search {self.review.study}\n\n{summary_text(self.review)}\n\n" + to_markdown(TRIAL_COLUMNS, rows)
        )  # fmt: skip
        Path(path).write_text(text, encoding="utf-8")

    def export_dialog(self, kind: str) -> str | None:
        if self.review is None:
            return None
        suffix = {"csv": ".csv", "markdown": ".md", "pdf": ".pdf"}[kind]
        name = f"search-{self.review.study}{suffix}"
        return export_to_file(self, "Export search", name, suffix, lambda path: self.export(path, kind))

    def shutdown(self) -> None:
        self._generation += 1
        self._pool.waitForDone(5000)
