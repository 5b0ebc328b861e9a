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

import dataclasses
import html as html_lib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, QThreadPool, QUrl, Signal, Slot
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

from gpuplanner.app.run_series import OverlaySeries, RunSeries, overlay_series
from gpuplanner.app.run_status import status_text
from gpuplanner.history.alert_rules import KIND_TITLES, AlertSettings
from gpuplanner.history.analytics import RunSummary, summarize
from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.history.export import write_table
from gpuplanner.history.gpu_metrics import METRIC_LABELS, METRICS, UTILISATION_NOTE, format_metric, throttle_text
from gpuplanner.history.run_cost import add_costs, unpriced_figure
from gpuplanner.history.runs import delete_run, list_runs
from gpuplanner.history.stops import stopped_by_user
from gpuplanner.history.time_breakdown import TimeBreakdown, from_dict, sum_breakdowns
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.compare_plots import ComparePlots
from gpuplanner.ui.history_model import (
    COLUMNS,
    COMPARE_METRICS,
    EXPORT_COLUMNS,
    RUN_ID_ROLE,
    RunsFilterProxy,
    RunsTableModel,
    display_text,
    export_values,
    format_time,
    format_value,
    metric_text,
    metric_value,
    row_values,
    run_series,
)
from gpuplanner.ui.human import NO_PRICE, human_bytes, human_cost, human_duration, human_hours, human_money
from gpuplanner.ui.report_pdf import Report, write_pdf
from gpuplanner.ui.run_plots import RunPlots
from gpuplanner.ui.search_view import SearchesDialog
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.spend_view import SpendDialog
from gpuplanner.ui.table_view import export_menu_button, sortable_table
from gpuplanner.ui.time_bars import COLORS, OTHER_COLOR, TimeBars, phase_text

MISSING_RUN = "not reported by this run's GPUs (SM activity needs GPM: Hopper and newer)"
STATUSES = ("", "running", "finished", "preempted", "stopped", "budget_stop", "early_stop", "failed")


def _breakdown(summary: RunSummary) -> TimeBreakdown:
    return from_dict(summary.time_breakdown) or TimeBreakdown(False, 0.0, 0.0, None)


def _run_title(summary: RunSummary) -> str:
    name = summary.name or summary.model_name or ""
    text = f"#{summary.run_id} {name}".strip()
    return text if len(text) <= 32 else text[:31] + "…"


def load_summaries(path: Path, alert_settings: AlertSettings | None = None) -> list[RunSummary]:
    """Every run's summary, its alerts evaluated under ``alert_settings`` and stored with the run (a
    worker's job: its own connection; an absent file is an empty history)."""
    if not path.exists():
        return []
    db = open_db(path)
    try:
        summaries = []
        for run in list_runs(db):
            try:
                summary = summarize(db, run.id, alert_settings=alert_settings, store_alerts=True)
            except HistoryError:
                continue
            if summary.status == "preempted" and stopped_by_user(db, run.id):
                summary = dataclasses.replace(summary, status="stopped")  # the user's Stop, not a preemption
            summaries.append(summary)
        return summaries
    finally:
        db.close()


def load_series(path: Path, run_id: int) -> RunSeries:
    db = open_db(path)
    try:
        return run_series(db, run_id)
    finally:
        db.close()


def load_overlay(path: Path, runs: Sequence[tuple[int, str]]) -> list[OverlaySeries]:
    """The curves of several runs for the overlay (a worker's job)."""
    db = open_db(path)
    try:
        return [overlay_series(db, run_id, label) for run_id, label in runs]
    finally:
        db.close()


def delete_and_load(path: Path, run_ids: Sequence[int]) -> list[RunSummary]:
    db = open_db(path)
    try:
        for run_id in run_ids:
            try:
                delete_run(db, run_id)
            except HistoryError:
                continue
    finally:
        db.close()
    return load_summaries(path)


class HistoryPane(QWidget):
    runsChanged = Signal()
    seriesShown = Signal(int)
    overlayShown = Signal(int)  # the number of runs overlaid in the Plots tab
    carryToPlan = Signal(dict)  # an alert's suggested settings, as PlanInputs fields

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
        self.filter_edit.setPlaceholderText("Filter: name, host, GPU, model, status…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self._on_filter_changed)
        self.status_combo = QComboBox()
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
        bar.addWidget(self.filter_edit, 2)
        bar.addWidget(self.status_combo)
        bar.addStretch(1)
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
            rows = [(_run_title(s), _breakdown(s)) for s in chosen]
            rows.append((f"Selected {len(chosen)} runs", sum_breakdowns(b for _, b in rows)))
            return rows, len(rows) - 1
        visible = self.visible_summaries()
        if not visible:
            return [], -1
        if len(ids) == 1 and (one := self._summary(ids[0])) is not None:
            rows.append((_run_title(one), _breakdown(one)))
        shown = "shown" if len(visible) < len(self.model.summaries()) else ""
        title = f"All {len(visible)} runs {shown}".strip() if len(visible) != 1 else f"The run {shown}".strip()
        rows.append((title, sum_breakdowns(_breakdown(s) for s in visible)))
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
        self.summary_view.setHtml(self.summary_html(summary))
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
            self.summary_view.setHtml(self.summary_html(summary, series.failure, series.plan_gpu))
        self.seriesShown.emit(run_id)

    @staticmethod
    def failure_html(failure: dict[str, Any] | None) -> str:
        """Why a run failed: the error and the tail of the trainer's stderr (kept in the history)."""
        if not failure:
            return ""
        code = failure.get("exit_code")
        head = "Why it failed" + (f" (exit {code})" if code is not None else "")
        parts = [f"<h4 style='color:#d64545'>{html_lib.escape(head)}</h4>"]
        if failure.get("error"):
            parts.append(f"<p><b>{html_lib.escape(str(failure['error']))}</b></p>")
        tail = str(failure.get("stderr_tail") or "").strip()
        if tail:
            parts.append(
                f"<p style='color:gray'>Last lines of stderr on {html_lib.escape(str(failure.get('host') or '?'))}:</p>"
            )
            parts.append(f"<pre style='font-size:small'>{html_lib.escape(tail)}</pre>")
        elif failure.get("stderr_problem"):
            parts.append(f"<p style='color:gray'>{html_lib.escape(str(failure['stderr_problem']))}</p>")
        return "".join(parts)

    @staticmethod
    def _cost(s: RunSummary, usd: float | None) -> str:
        """One of the run's cost figures: "no price" when the run has none (never $0 or a dash)."""
        return NO_PRICE if unpriced_figure("cost_usd", usd, s.price_usd_per_gpu_hour) else human_money(usd)

    @classmethod
    def billed_rows(cls, s: RunSummary) -> list[tuple[str, str]]:
        """Billed time and what its idle part cost (billed minus training), and a Slurm run's queue wait."""
        out = []
        b = s.billed
        if b:
            source = {"launcher": "launch to end", "sacct": "Slurm sacct", "scontrol": "Slurm scontrol"}
            via = html_lib.escape(source.get(b.get("billed_source") or "", b.get("billed_source") or ""))
            out.append(
                ("Billed time", f"{human_hours(b['billed_hours'])} · {cls._cost(s, b['billed_cost_usd'])} ({via})")
            )
            if b.get("idle_billed_hours") is not None:
                idle = f"{human_hours(b['idle_billed_hours'])} · {cls._cost(s, b.get('idle_cost_usd'))}"
                out.append(("Idle (billed − training)", idle))
        q = s.queue
        if q:
            waited = q.get("queue_wait_s")
            wait = human_hours(waited / 3600.0) if waited is not None else "–"
            why = f" · pending: {q.get('reason') or '?'}" if q.get("pending") else ""
            if not why and q.get("reason"):
                why = f" (was {q['reason']})"
            out.append(("Queue wait", html_lib.escape(wait + why)))
        return out

    @classmethod
    def summary_html(cls, s: RunSummary, failure: dict[str, Any] | None = None, plan_gpu: str | None = None) -> str:
        def row(label: str, value: Any) -> str:
            return f"<tr><td style='padding-right:14px;color:gray'>{label}</td><td>{value}</td></tr>"

        esc = html_lib.escape
        title = esc(f"Run {s.run_id}" + (f": {s.name}" if s.name else ""))
        sim = " <i>(simulated GPU telemetry)</i>" if s.simulated else ""
        run_gpu = f"{s.gpu_count} x {s.gpu_type or '?'}"
        left = [
            ("Status", esc(status_text(s.status))),
            ("Host", esc(s.host or "–")),
            ("GPU", esc(run_gpu)),
            ("Model", esc(s.model_name or "–")),
            ("Started", format_time(s.started_at)),
            ("Time held", human_hours(s.hours)),
            ("GPU-hours", format_value(s.gpu_hours)),
            ("Interruptions", f"{s.interruptions} ({human_hours(s.interruption_hours)} lost)"),
            *cls.billed_rows(s),
        ]
        sm_hours = (
            f"{format_value(s.effective_gpu_hours_sm)} (SM activity {format_value(s.avg_sm_active_pct)} %"
            + (
                f", {format_value(s.sm_active_coverage_pct)} % of samples)"
                if s.sm_active_coverage_pct is not None and s.sm_active_coverage_pct < 99.5
                else ")"
            )
            if s.effective_gpu_hours_sm is not None
            else f"<i style='color:gray'>{esc(MISSING_RUN)}</i>"
        )
        right = [
            ("Cost", cls._cost(s, s.cost_usd)),
            ("Avg utilisation", f"{format_value(s.avg_util_pct)} %"),
            ("Effective GPU-hours (NVML utilisation)", format_value(s.effective_gpu_hours)),
            ("Effective GPU-hours (SM activity)", sm_hours),
            ("Cost per effective GPU-hour", cls._cost(s, s.cost_per_effective_gpu_hour_usd)),
            ("Cost per sample", cls._cost(s, s.cost_per_sample_usd)),
            ("Cost per 1M tokens", cls._cost(s, s.cost_per_million_tokens_usd)),
            ("Tokens/s (median)", format_value(s.tokens_per_s)),
            ("Data wait", f"{format_value(s.data_wait_pct)} %"),
            ("Final loss", format_value(s.final_loss)),
        ]
        html = [
            f"<h3>{title}{sim}</h3>",
            cls.failure_html(failure) if s.status == "failed" else "",
            "<table><tr><td valign='top'><table>",
            *(row(k, v) for k, v in left),
            "</table></td><td valign='top' style='padding-left:30px'><table>",
            *(row(k, v) for k, v in right),
            "</table></td></tr></table>",
            f"<p style='color:gray'>{esc(UTILISATION_NOTE)}</p>",
            cls.gpus_html(s.gpus),
        ]
        html.append(cls.time_html(s))
        if s.alerts:
            html.append(cls.alerts_html(s.alerts))
        if s.planned:
            html.append(cls.planned_html(s.planned, plan_gpu, run_gpu))
        return "".join(html)

    @staticmethod
    def time_html(s: RunSummary) -> str:
        """Where the run's billed time went: a stacked bar (table cells) and a legend with the numbers."""
        breakdown = _breakdown(s)
        if not breakdown.recorded:
            return (
                f"<p><span style='color:gray'>Where the time went:</span> {html_lib.escape(breakdown.note or '')}</p>"
            )
        shown = [p for p in breakdown.phases if p.shown]
        cells = "".join(
            f"<td width='{max(1, round(p.share * 100))}%' bgcolor='{COLORS.get(p.phase, OTHER_COLOR)}'>&nbsp;</td>"
            for p in shown
        )
        legend = "<br>".join(
            f"<span style='color:{COLORS.get(p.phase, OTHER_COLOR)}'>&#9632;</span> "
            f"{html_lib.escape(phase_text(breakdown, p.phase))}"
            for p in shown
        )
        return (
            "<h4>Where the billed time went</h4>"
            f"<table width='100%' cellspacing='0' cellpadding='2'><tr>{cells}</tr></table>"
            f"<p>{legend}</p>"
        )

    @staticmethod
    def alerts_html(alerts: list[dict[str, Any]]) -> str:
        """Each alert, its diagnosis (with the expected saving) and a link that carries its suggestion."""
        esc = html_lib.escape
        items, carried = [], 0
        for alert in alerts:
            title = KIND_TITLES.get(str(alert.get("kind")), str(alert.get("kind")))
            item = f"<li><b style='color:#b26b00'>&#9888; {esc(title)}:</b> {esc(str(alert.get('message', '')))}"
            diagnosis = alert.get("diagnosis") or {}
            if diagnosis.get("text"):
                item += f"<br>{esc(str(diagnosis['text']))}"
            if diagnosis.get("plan_inputs"):
                item += f" <a href='carry:{carried}'>Carry to plan</a>"
                carried += 1
            items.append(item + "</li>")
        return "<h4>Alerts</h4><ul>" + "".join(items) + "</ul>"

    @staticmethod
    def gpus_html(gpus: list[dict[str, Any]]) -> str:
        """One row per GPU of the run's telemetry means; a metric the GPU did not report says so."""
        if not gpus:
            return ""
        esc = html_lib.escape
        columns = [key for key, _, _ in METRICS if key not in ("sm_occupancy_pct", "slowdown_pct")]
        head = "".join(f"<th align='left' style='padding-right:10px'>{esc(METRIC_LABELS[k])}</th>" for k in columns)
        rows = []
        for gpu in gpus:
            cells = []
            for key in columns:
                value = gpu.get(key)
                text = format_metric(key, value)
                if key == "sm_clock_mhz" and value is not None and gpu.get("sm_clock_max_mhz"):
                    text = f"{value:.0f} / {gpu['sm_clock_max_mhz']:.0f} MHz"
                style = "padding-right:10px" + (";color:gray;font-style:italic" if value is None else "")
                cells.append(f"<td style='{style}'>{esc(text)}</td>")
            throttle = throttle_text(gpu.get("throttle_pct"))
            throttle_style = "color:gray;font-style:italic" if gpu.get("throttle_pct") is None else ""
            cells.append(f"<td style='{throttle_style}'>{esc(throttle)}</td>")
            rows.append(
                f"<tr><td style='padding-right:10px'>{esc(str(gpu['node']))}:{gpu['index']}</td>{''.join(cells)}</tr>"
            )
        return (
            "<h4>GPUs (means over the run)</h4><table cellspacing='0'>"
            f"<tr><th align='left' style='padding-right:10px'>GPU</th>{head}<th align='left'>Throttled (share of"
            f" samples)</th></tr>{''.join(rows)}</table>"
        )

    @staticmethod
    def planned_html(planned: dict[str, Any], plan_gpu: str | None, run_gpu: str) -> str:
        """Planned against actual as a small table in people's units, the GPUs of both, flagged if they differ."""
        shown: dict[str, tuple[str, Callable[[Any], str]]] = {
            "hours": ("Duration", human_hours),
            "cost_usd": ("Cost", human_money),
            "peak_mem_bytes": ("Peak memory per GPU", human_bytes),
            "tokens_per_s": ("Tokens/s", format_value),
            "samples_per_min": ("Samples/min", format_value),
        }
        out = [
            "<h4>Planned against actual</h4><table cellspacing='0' cellpadding='3'>"
            "<tr><th align='left'></th><th align='right'>planned</th><th align='right'>actual</th>"
            "<th align='right'>difference</th></tr>"
        ]
        if plan_gpu:
            differs = plan_gpu.replace(" ", "").lower() != run_gpu.replace(" ", "").lower()
            flag = "<span style='color:#d64545'>different GPU: the numbers below compare unlike runs</span>"
            out.append(
                f"<tr><td>GPU</td><td align='right'>{html_lib.escape(plan_gpu)}</td>"
                f"<td align='right'>{html_lib.escape(run_gpu)}</td><td align='right'>{flag if differs else 'same'}</td></tr>"
            )
        for key, cell in planned.items():
            if not isinstance(cell, dict) or (cell.get("planned") is None and cell.get("actual") is None):
                continue
            label, fmt = shown.get(key, (key.replace("_", " "), format_value))
            diff = cell.get("diff_pct")
            out.append(
                f"<tr><td>{label}</td><td align='right'>{fmt(cell.get('planned'))}</td>"
                f"<td align='right'>{fmt(cell.get('actual'))}</td>"
                f"<td align='right'>{'' if diff is None else f'{diff:+.1f} %'}</td></tr>"
            )
        out.append("</table>")
        return "".join(out)

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
        return [[label, *(metric_text(s, attr) for s in summaries)] for label, attr in COMPARE_METRICS]

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
        for r, row in enumerate(rows):
            for c, value in enumerate(row[1:]):
                item = QTableWidgetItem(value)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
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

    # ------------------------------------------------------------------ export

    def export_rows(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """The selected runs, or every visible run when none is selected."""
        ids = self.selected_run_ids()
        runs = [s for s in self.visible_summaries() if not ids or s.run_id in ids]
        return EXPORT_COLUMNS, [export_values(s) for s in runs]

    def export_table(self, path: str | Path, fmt: str) -> None:
        columns, rows = self.export_rows()
        with open(path, "w", encoding="utf-8", newline="") as out:
            if fmt == "markdown":
                out.write(f"# GPU Planner runs ({time.strftime('%Y-%m-%d %H:%M')})\n\n")
            write_table(out, fmt, columns, rows)
            ids = self.selected_run_ids()
            if len(ids) >= 2:
                headers, compare = self.compare_rows(ids)
                out.write("\n" if fmt == "csv" else "\n## Compared side by side\n\n")
                write_table(out, fmt, ["metric", *headers], compare)

    def plots_image(self) -> QImage:
        return self.plots.grab().toImage()

    def report(self) -> Report:
        columns, rows = self.export_rows()
        report = Report("GPU Planner: run history", time.strftime("%Y-%m-%d %H:%M"))
        runs = [s for s in self.visible_summaries() if s.run_id in {r[0] for r in rows}]
        costs = add_costs(s.cost_usd for s in runs)
        hours = sum(s.gpu_hours or 0.0 for s in runs)
        runs_text = f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
        unpriced = f" ({costs.unpriced_runs} without a price, not in it)" if costs.unpriced_runs else ""
        report.text(f"{runs_text}, {hours:,.1f} GPU-hours, {human_cost(costs.cost_usd)} in total{unpriced}.", bold=True)
        shown = [  # as the table shows them
            [display_text(c, v, s.price_usd_per_gpu_hour) for c, v in enumerate(row_values(s))] for s in runs
        ]
        report.table([c[0] for c in COLUMNS], shown)
        spent = sum_breakdowns(_breakdown(s) for s in runs)
        if spent.recorded:
            note = f" ({spent.note})" if spent.note else ""
            report.text(f"Where the billed time went{note}", bold=True)
            report.table(
                ["phase", "share", "cost", "time"],
                [
                    [p.label, f"{p.share:.0%}", human_money(p.cost_usd), human_duration(p.seconds)]
                    for p in spent.phases
                    if p.shown
                ],
            )
        ids = self.selected_run_ids()
        if len(ids) >= 2:
            headers, _ = self.compare_rows(ids)
            report.text("Compared side by side", bold=True)
            report.table(["metric", *headers], self.compare_texts(ids))
            if self.overlay.series and {s.run_id for s in self.overlay.series} == set(ids):
                report.text("The runs overlaid (" + self.overlay.x_combo.currentText() + ")", bold=True)
                report.image(self.overlay.grab().toImage(), 110)
        elif len(ids) == 1:
            summary = self._summary(ids[0])
            if summary is not None:
                parts = [summary.status, human_hours(summary.hours), self._cost(summary, summary.cost_usd)]
                if summary.avg_util_pct is not None:
                    parts.append(f"{summary.avg_util_pct:.0f}% average utilisation")
                report.text(f"Run {summary.run_id}: " + ", ".join(parts), bold=True)
                image = self.plots.grab().toImage()
                if not image.isNull() and image.width() > 10:
                    report.image(
                        image.scaled(
                            QSize(1400, 800),
                            Qt.AspectRatioMode.KeepAspectRatio,
                            Qt.TransformationMode.SmoothTransformation,
                        ),
                        110,
                    )
        return report

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
            else:
                self.export_table(path, kind)
        except OSError as exc:
            QMessageBox.warning(self, "Export", f"Cannot write {path}: {exc}")
            return None
        return path
