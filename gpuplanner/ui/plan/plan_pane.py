"""The Plan pane: the form on the left; on the right the details of one option, the ranked table of every
option and the cost chart, one above the other in a splitter.

Edits are debounced (:data:`DEBOUNCE_MS`), then the request is built on the GUI thread (cheap, the
CLI's own parsing) and the rest runs as a :class:`~gpuplanner.ui.background.BackgroundJob` on the
pane's own one-thread pool: the speeds measured in the run history are added (its own SQLite
connection, as ``gpuplanner plan`` does), then the engine (``make_plan`` + ``compare`` with the
settings fitted per GPU, "Keep as given" pinned; ~10-20 ms, seconds in trace memory mode), then every
cell of the table (:func:`~gpuplanner.ui.plan.compare_model.table_cells`), so the GUI thread only shows
them. Each calculation carries a generation (a :class:`~gpuplanner.ui.background.Latest`): a queued
one that a newer request superseded is skipped, and an answer older than the newest request is
dropped. An invalid input is shown at its field and the last valid result stays on screen. The form
says which memory model answered and where the speed came from.

The details (:mod:`plan_details_view`, sentences from :mod:`plan_details`) describe one option: the
table's selected row (:mod:`plan_options_table`), else the recommended one; "Launch this plan" and the
PDF (:mod:`plan_export`) are of that option too (:mod:`plan_launch`). Saved plans are read and written
by :class:`~gpuplanner.ui.plan.plan_store.PlanStore` on its worker: this pane never opens the database on the
GUI thread.

In the window the cost chart (pyqtgraph) is built after the first frame (``defer_chart``).

Signals:
    resultsUpdated(): a new result is on screen.
    inputError(str, str): the form key and message of an input the engine refused.
    launchRequested(dict): "Launch this plan" with the described option's settings (see ``option_settings``).
    planSaved(int): a plan was saved in the history, with its id.
    planSaveFailed(str): saving a plan failed, with the reason.
    exported(str): an export was written, with the sentence saying where (also in the status bar).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, QTimer, Signal, Slot
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.documents import plan_document
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.planning import WINDOW_PINNED, MeasuredCache, PlanResult
from gpuplanner.ui.background import BackgroundJob, JobSignals, Latest
from gpuplanner.ui.plan import plan_export
from gpuplanner.ui.plan.compare_model import TableCells, table_cells
from gpuplanner.ui.plan.plan_details import (
    Details,
    Focus,
    OptionKey,
    batch_text,
    describe,
    field_label,
    focus_request,
    in_window_words,
    option_name,
)
from gpuplanner.ui.plan.plan_details_view import PlanDetailsView
from gpuplanner.ui.plan.plan_form import PlanForm
from gpuplanner.ui.plan.plan_form_fields import MEMORY_SOURCES
from gpuplanner.ui.plan.plan_inputs import (
    allows_qlora,
    inputs_with_form,
    pinned_fields,
    request_from_values,
    uses_calibration,
    values_from_inputs,
)
from gpuplanner.ui.plan.plan_job import InputRefused, PlanAnswer, compute_answer
from gpuplanner.ui.plan.plan_launch import option_settings
from gpuplanner.ui.plan.plan_options_table import OptionsTable
from gpuplanner.ui.plan.plan_splitter import PlanSplitter
from gpuplanner.ui.plan.plan_store import PlanStore, SavedPlan
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.widgets.report_pdf import Report, write_pdf
from gpuplanner.ui.widgets.table_view import export_menu_button

DEBOUNCE_MS = 150


def _describe_failure(exc: Exception) -> str:
    return f"the planner failed: {exc}"


class PlanPane(QWidget):
    resultsUpdated = Signal()
    inputError = Signal(str, str)
    launchRequested = Signal(dict)
    planSaved = Signal(int)
    planSaveFailed = Signal(str)
    exported = Signal(str)

    def __init__(self, services: AppServices, parent: QWidget | None = None, *, defer_chart: bool = False) -> None:
        super().__init__(parent)
        self._chart: Any = None  # CostChart, built by ensure_chart (pyqtgraph loads then)
        self._defer_chart = defer_chart
        self._measured_cache = MeasuredCache()
        self.services = services
        self.catalog = services.catalog
        self.result: PlanResult | None = None
        self.last_error: tuple[str, str] | None = None
        self.saved_plan_id: int | None = None
        self.details: Details | None = None  # what the details say, of the option they describe
        self._latest = Latest()  # the newest request's generation; older queued ones are skipped
        self._in_flight: set[int] = set()
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_job_done)
        self._signals.failed.connect(self._on_job_failed)
        self._signals.skipped.connect(self._on_job_skipped)
        self._edit_started: float | None = None
        self.last_latency_s: float | None = None
        self.last_show_s: float | None = None  # seconds the last answer took to show (ui_speed.py reports it)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        # the saved plans: read and written on the store's one worker, in order, never on the GUI thread
        self.store = PlanStore(services.db_path, self)
        self.store.saved.connect(self._on_plan_saved)
        self.store.saveFailed.connect(self._on_plan_save_failed)
        self.store.opened.connect(self._on_plan_read)
        self.store.readFailed.connect(self._on_plan_read_failed)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.recalculate)
        self._build()
        self.form.edited.connect(self._on_form_edited)
        self.recalculate()

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        self.form = PlanForm([g.name for g in self.catalog.gpus], {g.name: g.memory_gib for g in self.catalog.gpus})
        scroll = QScrollArea()
        scroll.setWidget(self.form)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(330)
        scroll.setMaximumWidth(380)
        self.form_scroll = scroll

        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(6, 4, 6, 4)
        rv.setSpacing(4)
        rv.addLayout(self._buttons())

        self.details_view = view = PlanDetailsView()
        self.recommendation_label, self.status_label = view.recommendation_label, view.status_label
        self.form_note_label, self.focus_label = view.form_note_label, view.focus_label
        self.summary_label, self.rent_label = view.summary_label, view.rent_label
        self.sources_label, self.memory_bar, self.advice_label = view.sources_label, view.memory_bar, view.advice_label
        self.options = OptionsTable()
        self.model, self.proxy, self.table = self.options.model, self.options.proxy, self.options.table
        self.usable_only, self.table_title = self.options.usable_only, self.options.title
        self.options.selectedChanged.connect(self._on_selection_changed)
        self.options.optionDoubleClicked.connect(self._on_option_double_clicked)
        self.splitter = PlanSplitter(view, self.options)
        self.details_scroll = self.splitter.details_scroll
        rv.addWidget(self.splitter, 1)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        layout.addWidget(right, 1)
        if not self._defer_chart:
            self.ensure_chart()

    def _buttons(self) -> QHBoxLayout:
        buttons = QHBoxLayout()
        self.save_button = QPushButton("Save plan…")
        self.save_button.setToolTip("Store the form's plan (inputs and results) in the history (Ctrl+S)")
        self.save_button.clicked.connect(self._on_save_clicked)
        self.open_button = QPushButton("Open plan…")
        self.open_button.setToolTip("Reopen a saved plan (Ctrl+O)")
        self.open_button.clicked.connect(self._on_open_clicked)
        self.export_button = export_menu_button(
            (
                ("Comparison as CSV…", "csv"),
                ("Comparison as Markdown…", "markdown"),
                ("Charts as PNG…", "png"),
                ("One-page PDF report…", "pdf"),
            ),
            self._on_export_triggered,
        )
        self.export_menu = self.export_button.menu()
        self.launch_button = QPushButton("Launch this plan…")
        self.launch_button.setToolTip(
            "Open the launch dialog with the option the details describe: its GPUs, a host that has them, "
            "and its settings (Ctrl+L)"
        )
        self.launch_button.clicked.connect(self._on_launch_clicked)
        self.launch_button.setDefault(True)
        for widget in (self.save_button, self.open_button, self.export_button):
            buttons.addWidget(widget)
        buttons.addStretch(1)
        buttons.addWidget(self.launch_button)
        return buttons

    # ------------------------------------------------------------------ splitter and chart

    @property
    def user_sized_splitter(self) -> bool:
        """Whether the user sized the details, table and chart (the window saves that layout)."""
        return self.splitter.user_sized

    def restore_splitter(self, state: Any) -> bool:
        """Restore the user's saved splitter layout; False when it does not match this pane's three parts."""
        return self.splitter.restore(state)

    @property
    def chart(self) -> Any:
        """The cost chart (a :class:`CostChart`), built on first use."""
        return self.ensure_chart()

    @Slot()
    def ensure_chart(self) -> Any:
        """Build the cost chart if it is not there yet (imports pyqtgraph) and show the current result."""
        if self._chart is None:
            from gpuplanner.ui.plan.cost_chart import CostChart

            chart = CostChart()
            chart.setMinimumHeight(150)
            self.splitter.set_chart(chart)
            self._chart = chart
            chart.optionClicked.connect(self._on_chart_option_clicked)
            if self.result is not None:
                chart.set_rows(self.result.rows, self.result.request.deadline_hours, self.result.request.budget_usd)
                chart.set_focus(self.focus.row if self.focus else None)
        return self._chart

    # ------------------------------------------------------------------ calculation

    @Slot()
    def _on_form_edited(self) -> None:
        if self._edit_started is None:
            self._edit_started = time.perf_counter()
        self._debounce.start()

    @Slot()
    def recalculate(self) -> bool:
        """Build the request from the form and start the engine; False when an input is invalid."""
        self._debounce.stop()
        values = self.form.values()
        try:
            request = request_from_values(values)
            pinned = tuple(dict.fromkeys(WINDOW_PINNED + pinned_fields(values)))
            qlora = allows_qlora(values)
        except PlanInputError as exc:
            self._latest.advance()  # an answer still on its way is for older input: it must not clear the mark
            self._show_input_error(exc.field, exc.message)
            return False
        generation = self._latest.advance()
        self._in_flight.add(generation)
        db_path = self.services.db_path if uses_calibration(values) else None
        if request.memory_source == "trace":
            self.form.set_note("memory", "Tracing one training step…")
        catalog, cache = self.catalog, self._measured_cache

        def work() -> PlanAnswer | InputRefused:
            return compute_answer(generation, request, values, catalog, db_path, cache, pinned, qlora)

        self._pool.start(BackgroundJob(work, self._signals, "plan", generation, _describe_failure, self._latest))
        return True

    def reload_catalog(self) -> None:
        """Read the catalog again (an own machine or a price file changed) and recalculate."""
        self.catalog = self.services.reload_catalog()
        self._measured_cache = MeasuredCache()
        self.recalculate()

    def is_busy(self) -> bool:
        return bool(self._in_flight) or self._debounce.isActive()

    @Slot(str, int, object)
    def _on_job_done(self, _kind: str, generation: int, answer: Any) -> None:
        self._in_flight.discard(generation)
        if generation != self._latest.value:
            return  # an older request: a newer one is on its way
        if isinstance(answer, InputRefused):
            self._show_input_error(answer.field, answer.message)
            return
        self._on_result(answer.result, answer.cells)

    @Slot(str, int, str)
    def _on_job_failed(self, _kind: str, generation: int, message: str) -> None:
        self._in_flight.discard(generation)
        if generation == self._latest.value:
            self._show_input_error("model-source", message)

    @Slot(str, int)
    def _on_job_skipped(self, _kind: str, generation: int) -> None:
        self._in_flight.discard(generation)

    def _on_result(self, result: PlanResult, cells: TableCells | None = None) -> None:
        started = time.perf_counter()
        first = self.result is None
        self.result = result
        self.last_error = None
        self.form.clear_errors()
        self.details_view.clear_input_error()
        self._apply(result, cells if cells is not None else table_cells(result.rows))
        if first:
            self.splitter.lay_out(force=True)  # the details have their text now
        if self._edit_started is not None:
            self.last_latency_s = time.perf_counter() - self._edit_started
            self._edit_started = None
        self.last_show_s = time.perf_counter() - started  # the GUI thread's share (before the repaint)
        self.resultsUpdated.emit()

    def _show_input_error(self, field: str, message: str) -> None:
        message = in_window_words(message)  # the form's labels, not the CLI's flags
        key = self.form.show_error(field, message)
        self.last_error = (key, message)
        keep = " Showing the last valid result." if self.result is not None else ""
        self.details_view.show_input_error(f"Cannot plan: {field_label(key)}: {message}.{keep}")
        self._edit_started = None
        self.inputError.emit(key, message)

    def _apply(self, result: PlanResult, cells: TableCells) -> None:
        plan, request = result.plan, result.request
        self.options.show_result(result, cells)
        if self._chart is not None:
            self._chart.set_rows(result.rows, request.deadline_hours, request.budget_usd)
        self._show_focus()
        self.form.set_note(
            "memory",
            result.memory_note
            if request.memory_source != MEMORY_SOURCES[0] or result.memory_source != MEMORY_SOURCES[0]
            else "",
        )
        self.form.set_note("calibration", result.calibration_note)
        self.form.hint.setText(batch_text(plan))

    # ------------------------------------------------------------------ the option the details describe

    @property
    def selected_key(self) -> OptionKey | None:
        """The option selected in the table (None: the details describe the recommended one)."""
        return self.options.selected_key

    @property
    def focus(self) -> Focus | None:
        """The option the details describe."""
        return self.details.focus if self.details is not None else None

    def _show_focus(self) -> None:
        """Details, memory bar, advice and the chart's highlight for one option: the selected row, else the
        recommended one (else the form's plan)."""
        result = self.result
        if result is None:
            return
        self.details = describe(result.rows, result.plan, result.recommendation, self.selected_key, self.catalog)
        self.details_view.show_details(self.details)
        if self._chart is not None:
            self._chart.set_focus(self.details.focus.row)

    @Slot(object)
    def _on_selection_changed(self, _key: Any) -> None:
        self._show_focus()

    @Slot(object)
    def _on_chart_option_clicked(self, key: Any) -> None:
        gpu, gpus, pricing = key
        self.select_option(gpu, gpus, pricing)

    def select_option(self, gpu: str, gpus: int, pricing: str) -> bool:
        """Select the table's row of one option (as a click does); False when the table has no such row."""
        return self.options.select_option(gpu, gpus, pricing)

    @Slot(object)
    def _on_option_double_clicked(self, row: CompareRow) -> None:
        self.form.set_values({"gpu": row.gpu, "gpus": str(row.gpus), "pricing": row.pricing})
        self.recalculate()

    # ------------------------------------------------------------------ save / open

    def plan_document(self) -> dict[str, Any] | None:
        """The form's plan as the history stores it."""
        if self.result is None:
            return None
        return plan_document(self.result.plan, inputs_with_form(self.result.request, self.result.values))

    def default_plan_name(self) -> str:
        assert self.result is not None
        r = self.result
        gpu = r.plan.gpu.name if r.plan.gpu else "custom GPU"
        return f"{r.request.model.name} {r.plan.setup.method} on {r.plan.setup.gpus} x {gpu}"

    def save_plan(
        self, name: str, then: Callable[[int], None] | None = None, document: dict[str, Any] | None = None
    ) -> None:
        """Store ``document`` (the form's valid plan by default) in the history on the store's worker;
        ``planSaved(id)`` follows (and ``then(id)``, when given), or ``planSaveFailed(message)``."""
        document = document or self.plan_document()
        if document is None:
            raise RuntimeError("no valid plan to save")
        self.store.save(name, document, then)

    @Slot(int)
    def _on_plan_saved(self, plan_id: int) -> None:
        self.saved_plan_id = plan_id
        self.planSaved.emit(plan_id)

    @Slot(str)
    def _on_plan_save_failed(self, message: str) -> None:
        self.planSaveFailed.emit(message)
        QMessageBox.warning(
            self, "Save plan", f"Could not save the plan in the history (nothing was changed): {message}"
        )

    def open_plan(self, plan_id: int) -> None:
        """Read a saved plan on the store's worker; the form takes its inputs when they come."""
        self.store.read(plan_id)

    @Slot(int, object)
    def _on_plan_read(self, plan_id: int, inputs: dict[str, Any]) -> None:
        self.form.set_values(values_from_inputs(inputs))
        self.saved_plan_id = plan_id
        self.recalculate()

    @Slot(str)
    def _on_plan_read_failed(self, message: str) -> None:
        QMessageBox.warning(self, "Open plan", f"Could not read the saved plans from the history: {message}")

    def carry_inputs(self, inputs: dict[str, Any]) -> None:
        """Fill the form with settings from elsewhere (an alert's suggestion in History): a new plan."""
        self.form.set_values(values_from_inputs(inputs))
        self.saved_plan_id = None
        self.recalculate()

    @Slot()
    def _on_save_clicked(self) -> None:
        self.save_dialog()

    def save_dialog(self) -> bool:
        """Ask for a name and save the plan (``planSaved`` follows); False when nothing is saved."""
        if self.result is None:
            QMessageBox.information(self, "Save plan", "There is no valid plan to save: fix the marked input first.")
            return False
        name, ok = QInputDialog.getText(self, "Save plan", "Name of the plan:", text=self.default_plan_name())
        if not ok or not name.strip():
            return False
        self.save_plan(name.strip())
        return True

    @Slot()
    def _on_open_clicked(self) -> None:
        self.open_dialog()

    def open_dialog(self) -> None:
        """List the saved plans (on the store's worker), then let the user pick one to open."""
        self.store.list_saved(self._choose_saved_plan)

    def _choose_saved_plan(self, plans: list[SavedPlan]) -> None:
        if not plans:
            QMessageBox.information(self, "Open plan", "No saved plans yet: use Save plan to keep one.")
            return
        labels = [f"#{pid}  {name}  ({time.strftime('%Y-%m-%d %H:%M', time.localtime(at))})" for pid, name, at in plans]
        label, ok = QInputDialog.getItem(self, "Open plan", "Saved plans:", labels, 0, False)
        if ok and label in labels:
            self.open_plan(plans[labels.index(label)][0])

    # ------------------------------------------------------------------ launch

    def launch_settings(self, plan_id: int | None, result: PlanResult | None = None) -> dict[str, Any] | None:
        """The launch dialog's settings for the option the details describe (of ``result``, the current plan
        by default), saved as ``plan_id`` (so the run links to it)."""
        result = result or self.result
        if result is None:
            return None
        focus = self.focus if result is self.result and self.focus is not None else None
        if focus is None:
            focus = describe(result.rows, result.plan, result.recommendation, self.selected_key, self.catalog).focus
        return option_settings(result, focus, plan_id)

    @Slot()
    def _on_launch_clicked(self) -> None:
        self.launch()

    def launch(self) -> None:
        """Save the option the details describe as a plan (off the GUI thread), then ask for the launch
        dialog with its settings."""
        if self.result is None or self.focus is None:
            QMessageBox.information(self, "Launch", "There is no valid plan to launch: fix the marked input first.")
            return
        result, focus = self.result, self.focus
        request = focus_request(focus, result.request)
        document = plan_document(focus.plan, inputs_with_form(request, self._option_values(focus, result)))
        name = (
            f"{request.model.name} {focus.plan.setup.method} on {option_name(focus.row)}"
            if focus.row is not None
            else self.default_plan_name()
        )

        def launch_saved(plan_id: int) -> None:  # what was saved is launched, even if the form changed since
            self.launchRequested.emit(option_settings(result, focus, plan_id))

        self.save_plan(name, then=launch_saved, document=document)

    @staticmethod
    def _option_values(focus: Focus, result: PlanResult) -> dict[str, str]:
        """The form's texts with the described option's GPU, count and pricing (Open plan reopens it)."""
        if focus.row is None:
            return result.values
        return {**result.values, "gpu": focus.row.gpu, "gpus": str(focus.row.gpus), "pricing": focus.row.pricing}

    # ------------------------------------------------------------------ export

    def export_table(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        return plan_export.export_table(self.result)

    def export_csv(self, path: str | Path) -> None:
        plan_export.write_csv(self.result, path)

    def export_markdown(self, path: str | Path) -> None:
        plan_export.write_markdown(self.result, path)

    def charts_image(self, width: int = 1200) -> QImage:
        """The memory bar and the cost chart, one above the other, as one image."""
        return plan_export.charts_image(self.memory_bar.view, self.chart.grab().toImage(), self.palette(), width)

    def export_png(self, path: str | Path) -> None:
        if not self.charts_image().save(str(path), "PNG"):  # type: ignore[call-overload]  # str at run time, bytes in the stub
            raise OSError(f"cannot write {path}")

    def report(self) -> Report:
        """The PDF report: the option the details describe (without the window's hints), the chart, the table."""
        result, details = self.result, None
        if result is not None:
            details = describe(
                result.rows, result.plan, result.recommendation, self.selected_key, self.catalog, hints=False
            )
        return plan_export.plan_report(result, details, self.memory_bar.view, self.chart.grab().toImage())

    def export_pdf(self, path: str | Path) -> None:
        write_pdf(self.report(), str(path))

    @Slot("QAction*")
    def _on_export_triggered(self, action: Any) -> None:
        self.export_dialog(str(action.data()))

    def export_dialog(self, kind: str) -> str | None:
        """Ask where to write the ``kind`` export ("csv", "markdown", "png" or "pdf") and write it; the path,
        or None when nothing was written."""
        if self.result is None:
            QMessageBox.information(self, "Export", "There is no valid plan to export: fix the marked input first.")
            return None
        writers = {"csv": self.export_csv, "markdown": self.export_markdown, "png": self.export_png}
        path = plan_export.ask_and_write(self, kind, {**writers, "pdf": self.export_pdf})
        if path is not None:
            self.say_saved(plan_export.saved_message(kind, path))
        return path

    def say_saved(self, message: str) -> None:
        """Say where an export went: in the window's status bar, and ``exported(message)``."""
        window = self.window()
        if isinstance(window, QMainWindow):
            window.statusBar().showMessage(message, 15_000)
        self.exported.emit(message)

    # ------------------------------------------------------------------ lifetime

    def shutdown(self) -> None:
        """Stop the debounce timer and wait for the workers (call before the window goes away)."""
        self._debounce.stop()
        self._pool.clear()
        self._pool.waitForDone(5000)
        self.store.shutdown()  # a plan being saved is not lost
