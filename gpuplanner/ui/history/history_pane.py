"""The History pane: past runs (sortable, filterable), one run's plots and events, runs side by side.

Every read and delete runs on the pane's own one-thread pool, with its own SQLite connection per
job (opened and closed on that thread; every query goes through the rollups, so a summary stays
cheap for long runs). Jobs hand plain data back by a queued signal; each kind of job ("runs",
"series") carries a generation number and an answer older than the newest request is dropped.
:meth:`shutdown` waits for the pool.

Signals:
    runsChanged(): the list was reloaded (after refresh or delete).
    seriesShown(int): the plots and events of one run are on screen.
    overlayShown(int): several runs' curves are overlaid in the Plots tab (their number).
    carryToPlan(dict): the user chose to plan with an alert's suggested settings (``PlanInputs`` field
        names: the diagnosis' ``plan_inputs``).

Each run's alerts are evaluated under ``services.alert_settings`` when the list loads (on the worker)
and stored with the run; the summary shows each with its diagnosis and a "Carry to plan" link.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, QUrl, Signal, Slot
from PySide6.QtGui import QBrush, QColor, QImage
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.run_series import RunSeries
from gpuplanner.app.run_status import status_text
from gpuplanner.history.analytics import RunSummary
from gpuplanner.history.time_breakdown import TimeBreakdown, sum_breakdowns
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.history.compare_marks import MARK_TINTS, MARK_WORDS, SHOWN_LABELS, compare_marks, same_precision
from gpuplanner.ui.history.compare_plots import ComparePlots
from gpuplanner.ui.history.history_exports import write_runs_export
from gpuplanner.ui.history.history_loads import delete_and_load, load_overlay, load_series, load_summaries
from gpuplanner.ui.history.history_model import (
    COLUMNS,
    COMPARE_METRICS,
    EXPORT_COLUMNS,
    RUN_ID_ROLE,
    RunsFilterProxy,
    RunsTableModel,
    export_values,
    format_time,
    metric_text,
    metric_value,
)
from gpuplanner.ui.history.history_report import runs_report
from gpuplanner.ui.history.history_summary import run_breakdown, run_title, summary_html
from gpuplanner.ui.history.run_plots import RunPlots
from gpuplanner.ui.history.search_view import SearchesDialog
from gpuplanner.ui.history.spend_view import SpendDialog
from gpuplanner.ui.palette import is_dark
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.widgets.log_view import LogView
from gpuplanner.ui.widgets.report_pdf import Report, write_pdf
from gpuplanner.ui.widgets.table_view import export_menu_button, sortable_table
from gpuplanner.ui.widgets.time_bars import TimeBars

STATUSES = ("", "running", "finished", "preempted", "stopped", "budget_stop", "early_stop", "failed")


class HistoryPane(QWidget):
    runsChanged = Signal()
    seriesShown = Signal(int)
    overlayShown = Signal(int)  # the number of runs overlaid in the Plots tab
    carryToPlan = Signal(dict)  # an alert's suggested settings, as PlanInputs fields
    exported = Signal(str)  # "Saved PATH": where an export went, for the status bar

    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.services = services
        self._generation = {"runs": 0, "series": 0, "overlay": 0}
        self._overlay_runs: list[int] | None = None
        self._pending: set[tuple[str, int]] = set()
        self._select_after_load: list[int] = []
        self._series_run: int | None = None
        self._shut_down = False
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_job_done)
        self._signals.failed.connect(self._on_job_failed)
        self._build()
        self.refresh()

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter runs…")  # whole in the room it has at 1024x700
        self.filter_edit.setToolTip("Show the runs whose name, host, GPU, model or status contains these words")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self._on_filter_changed)
        self.status_combo = QComboBox()
        self.status_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.status_combo.setMinimumContentsLength(len("all statuses"))  # the longest status shows when open
        self.status_combo.addItems(["all statuses" if not s else status_text(s) for s in STATUSES])
        self.status_combo.currentIndexChanged.connect(self._on_status_changed)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Reload the runs from the history (F5)")
        self.refresh_button.clicked.connect(self.refresh)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Select two or more runs to see them side by side")
        self.compare_button.clicked.connect(self._on_compare_clicked)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected runs and all their telemetry")
        self.delete_button.clicked.connect(self._on_delete_clicked)
        self.export_button = export_menu_button(
            (("Runs as CSV…", "csv"), ("Runs as Markdown…", "markdown"), ("PDF report…", "pdf")),
            self._on_export_triggered,
        )
        self.carry_button = QPushButton("Carry suggestion to plan")
        self.carry_button.setToolTip("Fill the Plan form with the first alert's suggested settings of the selected run")
        self.carry_button.setEnabled(False)
        self.carry_button.clicked.connect(self._on_carry_clicked)
        self.spend_button = QPushButton("Spend…")
        self.spend_button.setToolTip("Spend summed by tag and by month (as `gpuplanner runs report`)")
        self.spend_button.clicked.connect(self.open_spend)
        self.searches_button = QPushButton("Searches…")
        self.searches_button.setToolTip("Hyperparameter searches: trials, spend against the cap, best against spend")
        self.searches_button.clicked.connect(self.open_searches)
        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 2)  # the free width goes to the filter
        bar.addWidget(self.status_combo)
        for widget in (
            self.carry_button,
            self.refresh_button,
            self.compare_button,
            self.spend_button,
            self.searches_button,
            self.export_button,
            self.delete_button,
        ):
            bar.addWidget(widget)

        self.model = RunsTableModel(self)
        self.proxy = RunsFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self.table = sortable_table(
            self.proxy, 1, Qt.SortOrder.DescendingOrder, QAbstractItemView.SelectionMode.ExtendedSelection
        )
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(
            COLUMNS.index(next(c for c in COLUMNS if c[1] == "name")), QHeaderView.ResizeMode.Stretch
        )  # the free width goes to the name
        self.table.setAccessibleName("Runs")
        self.table.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.empty_label = QLabel("Loading the run history…")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.empty_label.setContentsMargins(0, 4, 0, 10)  # clear of the splitter's handle below it

        self.summary_view = QTextBrowser()
        self.summary_view.setOpenLinks(False)
        self.summary_view.anchorClicked.connect(self._on_summary_link)
        self.plots = RunPlots()
        self.events_table = QTableWidget(0, 5)
        self.events_table.setHorizontalHeaderLabels(["Time", "Minute", "Event", "Step", "Details"])
        self.events_table.setWordWrap(False)
        self.events_table.verticalHeader().setVisible(False)
        self.events_table.horizontalHeader().setStretchLastSection(True)
        self.events_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.compare_table = QTableWidget(0, 0)
        self.compare_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.compare_table.setAlternatingRowColors(True)
        self.compare_table.verticalHeader().setDefaultSectionSize(22)
        self.detail_tabs = QTabWidget()
        self.detail_tabs.addTab(self.summary_view, "Summary")
        self.overlay = ComparePlots()  # several runs selected: their curves overlaid
        self.plots_page = QStackedWidget()
        self.plots_page.addWidget(self.plots)
        self.plots_page.addWidget(self.overlay)
        self.detail_tabs.addTab(self.plots_page, "Plots")
        self.detail_tabs.addTab(self.events_table, "Events")
        self.time_bars = TimeBars(empty_text="No runs yet.")
        self.time_scroll = QScrollArea()
        self.time_scroll.setWidgetResizable(True)
        self.time_scroll.setWidget(self.time_bars)
        self.time_scroll.setToolTip("Where the billed time went: one bar per run and the sum over the runs")
        self.detail_tabs.addTab(self.time_scroll, "Time")
        self.detail_tabs.addTab(self.compare_table, "Compare")
        self.log_view = LogView(lambda: self.services.db_path)  # the run's job output as the history kept it
        self.detail_tabs.addTab(self.log_view, "Logs")

        top = QWidget()
        tv = QVBoxLayout(top)
        tv.setContentsMargins(6, 4, 6, 0)
        tv.addLayout(bar)
        tv.addWidget(self.table, 1)
        tv.addWidget(self.empty_label)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(self.detail_tabs)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    # ------------------------------------------------------------------ data

    def _start(self, kind: str, work: Any) -> None:
        if self._shut_down:
            return
        self._generation[kind] += 1
        generation = self._generation[kind]
        self._pending.add((kind, generation))
        self._pool.start(BackgroundJob(work, self._signals, kind, generation))

    def is_loading(self) -> bool:
        return bool(self._pending)

    @Slot()
    def refresh(self) -> None:
        """Reload every run's summary from the history on the worker (keeps the selection where it can)."""
        self._select_after_load = self.selected_run_ids()
        path, settings = self.services.db_path, self.services.alert_settings
        self._start("runs", lambda: load_summaries(path, settings))

    @Slot(int)
    def on_run_finished(self, run_id: int) -> None:
        """A run ended in the Runs pane: reload and show it."""
        self.refresh()
        self._select_after_load = [run_id]

    @Slot(str, int, object)
    def _on_job_done(self, kind: str, generation: int, payload: Any) -> None:
        self._pending.discard((kind, generation))
        if generation != self._generation[kind] or self._shut_down:
            return  # a newer request of this kind is on its way
        if kind == "runs":
            self.model.set_summaries(payload)
            self.empty_label.setText("No runs yet. Launch one from the Plan pane, or try a demo run (Run menu).")
            self.empty_label.setVisible(not payload)
            self.select_runs(self._select_after_load)
            self.update_time_bars()
            self.runsChanged.emit()
        elif kind == "series" and self._series_run is not None:
            self._show_series(self._series_run, payload)
        elif kind == "overlay" and self._overlay_runs is not None:
            self.overlay.show_runs(payload)
            self.plots_page.setCurrentWidget(self.overlay)
            self.overlayShown.emit(len(payload))

    @Slot(str, int, str)
    def _on_job_failed(self, kind: str, generation: int, message: str) -> None:
        self._pending.discard((kind, generation))
        if generation != self._generation[kind] or self._shut_down:
            return
        self.empty_label.setText(f"Cannot read the run history {self.services.db_path}: {message}")
        self.empty_label.setVisible(True)

    def summaries(self) -> list[RunSummary]:
        return self.model.summaries()

    def visible_summaries(self) -> list[RunSummary]:
        """The runs the filter lets through, in the table's current order."""
        out = []
        for row in range(self.proxy.rowCount()):
            source = self.proxy.mapToSource(self.proxy.index(row, 0))
            out.append(self.model.summary(source.row()))
        return out

    def selected_run_ids(self) -> list[int]:
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        return [int(self.proxy.index(row, 0).data(RUN_ID_ROLE)) for row in rows]

    def select_runs(self, run_ids: Sequence[int]) -> None:
        selection = self.table.selectionModel()
        selection.clearSelection()
        flags = selection.SelectionFlag.Select | selection.SelectionFlag.Rows
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if index.data(RUN_ID_ROLE) in run_ids:
                selection.select(index, flags)

    def _summary(self, run_id: int) -> RunSummary | None:
        return next((s for s in self.model.summaries() if s.run_id == run_id), None)

    # ------------------------------------------------------------------ filter and selection

    @Slot(str)
    def _on_filter_changed(self, _text: str) -> None:
        self._apply_filter()

    @Slot(int)
    def _on_status_changed(self, _index: int) -> None:
        self._apply_filter()

    def _apply_filter(self) -> None:
        self.proxy.set_filter(self.filter_edit.text(), STATUSES[self.status_combo.currentIndex()])
        self.update_time_bars()

    def set_filter(self, text: str, status: str = "") -> None:
        self.filter_edit.setText(text)
        self.status_combo.setCurrentIndex(STATUSES.index(status))
        self._apply_filter()

    def time_bar_rows(self) -> tuple[list[tuple[str, TimeBreakdown]], int]:
        """The Time tab's bars and the one the legend speaks for: the selected runs and their sum
        (two or more selected), else the selected run and the sum over the runs the filter shows."""
        ids = self.selected_run_ids()
        rows: list[tuple[str, TimeBreakdown]] = []
        if len(ids) >= 2:
            chosen = [s for s in (self._summary(i) for i in ids) if s is not None]
            rows = [(run_title(s), run_breakdown(s)) for s in chosen]
            rows.append((f"Selected {len(chosen)} runs", sum_breakdowns(b for _, b in rows)))
            return rows, len(rows) - 1
        visible = self.visible_summaries()
        if not visible:
            return [], -1
        if len(ids) == 1 and (one := self._summary(ids[0])) is not None:
            rows.append((run_title(one), run_breakdown(one)))
        shown = "shown" if len(visible) < len(self.model.summaries()) else ""
        title = f"All {len(visible)} runs {shown}".strip() if len(visible) != 1 else f"The run {shown}".strip()
        rows.append((title, sum_breakdowns(run_breakdown(s) for s in visible)))
        return rows, 0

    def update_time_bars(self) -> None:
        rows, focus = self.time_bar_rows()
        self.time_bars.set_bars(rows, focus)

    # ------------------------------------------------------------------ alerts: carry a suggestion to the plan

    def suggestions(self, run_id: int) -> list[dict[str, Any]]:
        """The suggested plan settings of a run's alerts, in the order the summary lists them."""
        summary = self._summary(run_id)
        if summary is None:
            return []
        return [a["diagnosis"]["plan_inputs"] for a in summary.alerts if (a.get("diagnosis") or {}).get("plan_inputs")]

    def carry_to_plan(self, run_id: int, index: int = 0) -> bool:
        """Hand the ``index``-th alert suggestion of a run to the Plan pane (``carryToPlan``)."""
        suggestions = self.suggestions(run_id)
        if not 0 <= index < len(suggestions):
            return False
        self.carryToPlan.emit(dict(suggestions[index]))
        return True

    @Slot()
    def _on_carry_clicked(self) -> None:
        ids = self.selected_run_ids()
        if len(ids) == 1:
            self.carry_to_plan(ids[0])

    @Slot(QUrl)
    def _on_summary_link(self, url: QUrl) -> None:
        ids = self.selected_run_ids()
        if url.scheme() == "carry" and len(ids) == 1 and url.path().isdigit():
            self.carry_to_plan(ids[0], int(url.path()))

    @Slot()
    def _on_selection_changed(self, *_args: Any) -> None:
        self.update_time_bars()
        ids = self.selected_run_ids()
        self.carry_button.setEnabled(len(ids) == 1 and bool(self.suggestions(ids[0])))
        if len(ids) == 1:
            self.show_run(ids[0])
        elif len(ids) >= 2:
            self.show_compare(ids)

    def show_run(self, run_id: int) -> None:
        summary = self._summary(run_id)
        if summary is None:
            return
        self.summary_view.setHtml(summary_html(summary))
        self.log_view.show_run(run_id)
        if self.detail_tabs.currentWidget() is self.compare_table:
            self.detail_tabs.setCurrentWidget(self.summary_view)
        self._series_run = run_id
        self._overlay_runs = None
        self.plots_page.setCurrentWidget(self.plots)
        path = self.services.db_path
        self._start("series", lambda: load_series(path, run_id))

    def _show_series(self, run_id: int, series: RunSeries) -> None:
        self.plots.show_series(series)
        self.events_table.setRowCount(0)
        for at, kind, step, detail in series.events:
            row = self.events_table.rowCount()
            self.events_table.insertRow(row)
            for col, text in enumerate(
                (format_time(series.t0 + at), f"{at / 60.0:,.1f}", kind, "" if step is None else str(step), detail)
            ):
                item = QTableWidgetItem(text)
                if col == 4 and detail:
                    item.setToolTip(detail)
                if kind in ("failure", "run_end") and series.failure and col == 2:
                    item.setForeground(QBrush(QColor("#d64545")))
                self.events_table.setItem(row, col, item)
        self.events_table.resizeColumnsToContents()
        summary = self._summary(run_id)
        if summary is not None:
            self.summary_view.setHtml(summary_html(summary, series.failure, series.plan_gpu))
        self.seriesShown.emit(run_id)

    # ------------------------------------------------------------------ compare

    @Slot()
    def _on_compare_clicked(self) -> None:
        ids = self.selected_run_ids()
        if len(ids) < 2:
            QMessageBox.information(self, "Compare runs", "Select two or more runs (Ctrl+click) to compare them.")
            return
        self.show_compare(ids)

    def compare_rows(self, run_ids: Sequence[int]) -> tuple[list[str], list[list[Any]]]:
        """Metrics as rows, runs as columns (the Compare tab and its export)."""
        summaries = [s for s in (self._summary(i) for i in run_ids) if s is not None]
        headers = [f"Run {s.run_id}" for s in summaries]
        rows = [[label, *(metric_value(s, attr) for s in summaries)] for label, attr in COMPARE_METRICS]
        return headers, rows

    def compare_texts(self, run_ids: Sequence[int]) -> list[list[str]]:
        """:meth:`compare_rows` as the Compare tab and the PDF show them ("no price" where a run has none)."""
        summaries = [s for s in (self._summary(i) for i in run_ids) if s is not None]
        rows = []
        for label, attr in COMPARE_METRICS:
            texts = [metric_text(s, attr) for s in summaries]
            values = [metric_value(s, attr) for s in summaries]
            rows.append([SHOWN_LABELS.get(label, label), *same_precision(values, texts)])
        return rows

    def show_compare(self, run_ids: Sequence[int]) -> None:
        self._series_run = None  # a series still loading is not shown over the comparison
        self._overlay_runs = list(run_ids)
        labels = {s.run_id: f"#{s.run_id} {s.name or ''}".strip() for s in self.model.summaries()}
        wanted = [(i, labels.get(i, f"#{i}")) for i in run_ids]
        path = self.services.db_path
        self._start("overlay", lambda: load_overlay(path, wanted))
        headers, _ = self.compare_rows(run_ids)
        rows = self.compare_texts(run_ids)
        self.compare_table.clear()
        self.compare_table.setColumnCount(len(headers))
        self.compare_table.setRowCount(len(rows))
        self.compare_table.setHorizontalHeaderLabels(headers)
        self.compare_table.setVerticalHeaderLabels([r[0] for r in rows])
        _, values = self.compare_rows(run_ids)
        marks = compare_marks([a for _, a in COMPARE_METRICS], [v[1:] for v in values], [t[1:] for t in rows])
        tints = MARK_TINTS[is_dark(self.palette())]
        for r, row in enumerate(rows):
            for c, value in enumerate(row[1:]):
                item = QTableWidgetItem(value)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if marks[r][c]:  # what differs between the runs stands out; best and worst told apart
                    item.setBackground(QColor(tints[marks[r][c]]))
                    item.setToolTip(MARK_WORDS[marks[r][c]])
                self.compare_table.setItem(r, c, item)
        self.compare_table.resizeColumnsToContents()
        self.detail_tabs.setCurrentWidget(self.compare_table)

    # ------------------------------------------------------------------ delete

    @Slot()
    def _on_delete_clicked(self) -> None:
        ids = self.selected_run_ids()
        if not ids:
            QMessageBox.information(self, "Delete runs", "Select the runs to delete first.")
            return
        answer = QMessageBox.question(
            self,
            "Delete runs",
            f"Delete {len(ids)} run(s) ({', '.join(f'#{i}' for i in ids)}) and all their "
            "telemetry? This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_runs(ids)

    def delete_runs(self, run_ids: Sequence[int]) -> None:
        """Delete the runs on the worker, then reload the list (runsChanged when it is on screen)."""
        self.summary_view.clear()
        self.plots.clear_all()
        self.events_table.setRowCount(0)
        self._series_run = None
        self._select_after_load = []
        ids, path = list(run_ids), self.services.db_path
        self._start("runs", lambda: delete_and_load(path, ids))

    def shutdown(self) -> None:
        """Drop queued loads and wait for the running one (call before the pane goes away)."""
        self._shut_down = True
        self._pool.clear()
        self._pool.waitForDone(5000)
        self.log_view.shutdown()

    # ------------------------------------------------------------------ export

    def export_rows(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """The selected runs, or every visible run when none is selected."""
        ids = self.selected_run_ids()
        runs = [s for s in self.visible_summaries() if not ids or s.run_id in ids]
        return EXPORT_COLUMNS, [export_values(s) for s in runs]

    def export_table(self, path: str | Path, fmt: str) -> list[Path]:
        """The exported runs as CSV or Markdown with the selection's comparison (:func:`write_runs_export`)."""
        ids = self.selected_run_ids()
        compared = None
        if len(ids) >= 2:
            headers, values = self.compare_rows(ids)
            compared = (headers, values, self.compare_texts(ids))
        return write_runs_export(Path(path), fmt, self.export_rows(), compared)

    def plots_image(self) -> QImage:
        return self.plots.grab().toImage()

    def report(self) -> Report:
        """The PDF report of the exported runs (:func:`runs_report`), with the selection's comparison or plots."""
        _, rows = self.export_rows()
        exported = {r[0] for r in rows}
        runs = [s for s in self.visible_summaries() if s.run_id in exported]
        ids = self.selected_run_ids()
        compare, overlay, one_run = None, None, None
        if len(ids) >= 2:
            compare = (self.compare_rows(ids)[0], self.compare_texts(ids))
            if self.overlay.series and {s.run_id for s in self.overlay.series} == set(ids):
                # the plots alone: the x-axis chooser is a control, not part of the figure
                overlay = (self.overlay.x_combo.currentText(), self.overlay.graphics.grab().toImage())
        elif len(ids) == 1 and (summary := self._summary(ids[0])) is not None:
            one_run = (summary, self.plots.grab().toImage())
        return runs_report(runs, compare, overlay, one_run)

    @Slot()
    def open_spend(self) -> SpendDialog:
        dialog = SpendDialog(self.services.db_path, self)
        dialog.finished.connect(dialog.shutdown)
        dialog.show()
        return dialog

    @Slot()
    def open_searches(self, study: str | None = None) -> SearchesDialog:
        dialog = SearchesDialog(self.services.db_path, self)
        dialog.finished.connect(dialog.shutdown)
        if study:
            dialog.listed.connect(lambda _names: dialog.select(study))
        dialog.show()
        return dialog

    def export_pdf(self, path: str | Path) -> None:
        write_pdf(self.report(), str(path))

    @Slot("QAction*")
    def _on_export_triggered(self, action: Any) -> None:
        self.export_dialog(str(action.data()))

    def export_dialog(self, kind: str) -> str | None:
        suffix = {"csv": ".csv", "markdown": ".md", "pdf": ".pdf"}[kind]
        filters = {"csv": "CSV (*.csv)", "markdown": "Markdown (*.md)", "pdf": "PDF (*.pdf)"}
        path, _ = QFileDialog.getSaveFileName(self, "Export runs", f"gpu-runs{suffix}", filters[kind])
        if not path:
            return None
        if not path.endswith(suffix):
            path += suffix
        try:
            if kind == "pdf":
                self.export_pdf(path)
                written = [Path(path)]
            else:
                written = self.export_table(path, kind)
        except OSError as exc:
            QMessageBox.warning(self, "Export", f"Cannot write {path}: {exc}")
            return None
        self.exported.emit("Saved " + " and ".join(str(p) for p in written))
        return path
