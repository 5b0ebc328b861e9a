"""The Plan pane: the form on the left; memory bar, ranked table, cost chart and recommendation on the right.

Edits are debounced (:data:`DEBOUNCE_MS`), then the request is built on the GUI thread (cheap, the
CLI's own parsing) and the rest runs as a :class:`~gpuplanner.ui.background.BackgroundJob` on the
pane's own one-thread pool: the speeds measured in the run history are added (its own SQLite
connection, as ``gpuplanner plan`` does), then the engine (``make_plan`` + ``compare`` with the
settings fitted per GPU, "Keep as given" pinned; ~10-20 ms, seconds in trace memory mode), then every
cell of the table (:func:`~gpuplanner.ui.compare_model.table_cells`), so the GUI thread only shows
them. Each calculation carries a generation (a :class:`~gpuplanner.ui.background.Latest`): a queued
one that a newer request superseded is skipped, and an answer older than the newest request is
dropped. An invalid input is shown at its field and the last valid result stays on screen. The form
says which memory model answered and where the speed came from.

In the window the cost chart (pyqtgraph) is built after the first frame (``defer_chart``).

Signals:
    resultsUpdated(): a new result is on screen.
    inputError(str, str): the form key and message of an input the engine refused.
    launchRequested(dict): "Launch this plan" with the trainer settings (see ``trainer_settings``).
    planSaved(int): a plan was saved in the history, with its id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, QRect, QRectF, QSize, Qt, QThreadPool, QTimer, Signal, Slot
from PySide6.QtGui import QFont, QFontMetrics, QImage, QKeySequence, QPainter, QPalette, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.export.tables import to_csv, to_markdown
from gpuplanner.history.db import BUSY_TIMEOUT_MS, open_db
from gpuplanner.history.plans import get_plan, list_plans, save_plan
from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.documents import plan_document
from gpuplanner.plan.planner import PlanRequest
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.planning import WINDOW_PINNED, MeasuredCache, PlanResult, compute, launch_setup
from gpuplanner.ui.background import BackgroundJob, JobSignals, Latest
from gpuplanner.ui.compare_model import (
    COLUMNS,
    EXPORT_COLUMNS,
    CompareProxyModel,
    CompareTableModel,
    TableCells,
    export_rows,
    table_cells,
)
from gpuplanner.ui.memory_bar import MemoryBar, memory_view, paint_memory_bar
from gpuplanner.ui.palette import BAD, WARN
from gpuplanner.ui.plan_details import (
    Focus,
    OptionKey,
    choose_focus,
    field_label,
    focus_line,
    headline,
    in_window_words,
    option_key,
    rental_text,
    summary_text,
)
from gpuplanner.ui.plan_form import PlanForm
from gpuplanner.ui.plan_inputs import (
    MEMORY_SOURCES,
    allows_qlora,
    inputs_with_form,
    pinned_fields,
    request_from_values,
    trainer_settings,
    uses_calibration,
    values_from_inputs,
)
from gpuplanner.ui.plan_settings_text import settings_rows
from gpuplanner.ui.report_pdf import Report, write_pdf
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.table_view import export_menu_button, sortable_table

DEBOUNCE_MS = 150


@dataclass(frozen=True)
class _Answer:
    """What the worker hands back for one request: the engine's result and the table's cells."""

    result: PlanResult
    cells: TableCells


@dataclass(frozen=True)
class _Refused:
    """The engine refused an input: the field it names and why."""

    field: str
    message: str


def _work(
    generation: int,
    request: PlanRequest,
    values: dict[str, str],
    catalog: Catalog,
    db_path: Path | None,
    cache: MeasuredCache,
    pinned: tuple[str, ...],
    allow_qlora: bool,
) -> _Answer | _Refused:
    """One recalculation on the pane's worker thread: the engine, then every cell of the table (plain
    Python), so the GUI thread only shows them."""
    try:
        result = compute(generation, request, values, catalog, db_path, cache, pinned=pinned, allow_qlora=allow_qlora)
    except PlanInputError as exc:
        return _Refused(exc.field, exc.message)
    return _Answer(result, table_cells(result.rows))


def _describe_failure(exc: Exception) -> str:
    return f"the planner failed: {exc}"


class PlanPane(QWidget):
    resultsUpdated = Signal()
    inputError = Signal(str, str)
    launchRequested = Signal(dict)
    planSaved = Signal(int)
    planSaveFailed = Signal(str)

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
        self.selected_key: OptionKey | None = None  # the option selected in the table (None: the recommended)
        self.focus: Focus | None = None  # the option the details describe
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
        # saving plans writes to the history: one at a time, in order, never on the GUI thread
        self._write_pool = QThreadPool(self)
        self._write_pool.setMaxThreadCount(1)
        self._write_signals = JobSignals(self)
        self._write_signals.done.connect(self._on_plan_saved)
        self._write_signals.failed.connect(self._on_plan_save_failed)
        self._after_save: dict[int, Callable[[int], None]] = {}
        self._writes = 0
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.recalculate)
        self._build()
        self.form.edited.connect(self._on_form_edited)
        self.recalculate()

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        self.form = PlanForm([g.name for g in self.catalog.gpus])
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
        buttons = QHBoxLayout()
        self.save_button = QPushButton("Save plan…")
        self.save_button.setToolTip("Store this plan (inputs and results) in the history (Ctrl+S)")
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
        self.launch_button.setToolTip("Open the launch dialog with these settings (Ctrl+L)")
        self.launch_button.clicked.connect(self._on_launch_clicked)
        self.launch_button.setDefault(True)
        for widget in (self.save_button, self.open_button, self.export_button):
            buttons.addWidget(widget)
        buttons.addStretch(1)
        buttons.addWidget(self.launch_button)
        rv.addLayout(buttons)

        # The details of one option, in a scroll area that is the splitter's first pane: however long
        # their text gets, the table and the chart below keep their place.
        details = QWidget()
        details.setObjectName("plan-details")
        dv = QVBoxLayout(details)
        dv.setContentsMargins(0, 0, 4, 0)
        dv.setSpacing(4)
        self.recommendation_label = QLabel()
        self.recommendation_label.setWordWrap(True)
        self.recommendation_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.recommendation_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.recommendation_label.setFont(font)
        dv.addWidget(self.recommendation_label)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setStyleSheet(f"color: {BAD};")
        self.status_label.hide()
        dv.addWidget(self.status_label)
        self.focus_label = QLabel()
        self.focus_label.setObjectName("plan-focus")
        self.focus_label.setWordWrap(True)
        self.focus_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        dv.addWidget(self.focus_label)
        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        dv.addWidget(self.summary_label)
        self.rent_label = QLabel()
        self.rent_label.setObjectName("plan-rent")
        self.rent_label.setWordWrap(True)
        self.rent_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.rent_label.setToolTip("What to rent for the option the details describe, and what the price rests on")
        dv.addWidget(self.rent_label)
        self.sources_label = QLabel()
        self.sources_label.setObjectName("plan-sources")
        self.sources_label.setToolTip(
            "Where the speed came from (your figure, runs measured in the history, or "
            "peak FLOP/s x MFU) and which memory model answered"
        )
        self.sources_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sources_label.setWordWrap(True)  # one long line would widen the details past their pane
        dv.addWidget(self.sources_label)
        self.memory_bar = MemoryBar()
        dv.addWidget(self.memory_bar)
        self.advice_label = QLabel()
        self.advice_label.setWordWrap(True)
        self.advice_label.setStyleSheet(f"color: {WARN};")
        dv.addWidget(self.advice_label)

        dv.addStretch(1)
        self.details = details
        self.details_scroll = QScrollArea()
        self.details_scroll.setWidget(details)
        self.details_scroll.setWidgetResizable(True)
        self.details_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.details_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.details_scroll.setMinimumHeight(90)

        self.model = CompareTableModel(self)
        self.proxy = CompareProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.table = sortable_table(
            self.proxy, 0, Qt.SortOrder.AscendingOrder, QAbstractItemView.SelectionMode.SingleSelection
        )
        header = self.table.horizontalHeader()
        # Widths from typical contents (ResizeToContents would scan every cell on every update), tight
        # enough that every column fits at 1280x800; "Why not" takes what is left and wraps (each row as
        # tall as its reason, see _fit_row_heights), and every cell's tooltip holds the full reason.
        metrics = self.table.fontMetrics()
        bold = QFont(self.table.font())
        bold.setBold(True)
        bold_metrics = QFontMetrics(bold)  # the recommended row's rank and GPU are bold
        samples = (
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
        assert len(samples) == len(COLUMNS), "one sample text per comparison column"
        header.setMinimumSectionSize(24)
        for index, text in enumerate(samples):
            measure = bold_metrics if COLUMNS[index][1] in ("rank", "gpu") else metrics
            width = max(measure.horizontalAdvance(text), metrics.horizontalAdvance(COLUMNS[index][0])) + 10
            self.table.setColumnWidth(index, width)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(True)
        self._row_heights: dict[tuple[str, int], int] = {}
        self._tall_rows: set[int] = set()  # the view's rows made taller than one line
        self._fit_timer = QTimer(self)
        self._fit_timer.setSingleShot(True)
        self._fit_timer.setInterval(0)
        self._fit_timer.timeout.connect(self._fit_row_heights)
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
        table_box = QWidget()
        tv = QVBoxLayout(table_box)
        tv.setContentsMargins(0, 0, 0, 0)
        tv.setSpacing(2)
        top = QHBoxLayout()
        self.table_title = QLabel("Every GPU option, ranked (greyed: cannot be used, see why)")
        top.addWidget(self.table_title)
        top.addStretch(1)
        top.addWidget(self.usable_only)
        tv.addLayout(top)
        tv.addWidget(self.table)
        self._chart_placeholder = QLabel("")
        self._chart_placeholder.setMinimumHeight(150)
        table_box.setMinimumHeight(120)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.details_scroll)
        splitter.addWidget(table_box)
        splitter.addWidget(self._chart_placeholder)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setStretchFactor(2, 1)
        splitter.setChildrenCollapsible(False)
        splitter.splitterMoved.connect(self._on_splitter_moved)
        self.splitter = splitter
        splitter.installEventFilter(self)
        # The panes' heights are laid out from the pane's height (see _lay_out_splitter) until the user
        # drags a handle or a saved layout is restored; new results never move them.
        self.user_sized_splitter = False
        self._sized_for: tuple[int, int] | None = None
        rv.addWidget(splitter, 1)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        layout.addWidget(right, 1)
        if not self._defer_chart:
            self.ensure_chart()

    # ------------------------------------------------------------------ splitter

    CHART_SHARE = 0.45  # of the height below the details, at least CHART_MIN_PX
    CHART_MIN_PX = 200
    DETAILS_SHARE = 0.45  # the details get the height their text needs, at most this share

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt naming)
        if watched is self.splitter and event.type() == QEvent.Type.Resize:
            self._lay_out_splitter()
        return super().eventFilter(watched, event)

    def restore_splitter(self, state: Any) -> bool:
        """Restore the user's saved splitter layout (from :meth:`QSplitter.saveState`); False when it does not
        match this pane's three parts."""
        if not self.splitter.restoreState(state) or len(self.splitter.sizes()) != 3:
            return False
        self.user_sized_splitter = True
        return True

    @Slot(int, int)
    def _on_splitter_moved(self, _pos: int, _index: int) -> None:
        self.user_sized_splitter = True

    def _lay_out_splitter(self, *, force: bool = False) -> None:
        """Details as tall as their text (up to :data:`DETAILS_SHARE`), the chart a real share of the rest,
        the table what remains. Done for a new pane size (or once the first result has text), never for
        new results, so nothing jumps while typing."""
        if self.user_sized_splitter:
            return
        splitter = self.splitter
        total = splitter.height() - 2 * splitter.handleWidth()
        # the splitter's width less the details' scroll bar (the viewport may not have its new width yet)
        width = splitter.width() - self.details_scroll.verticalScrollBar().sizeHint().width()
        if total <= 0 or width <= 0 or (not force and self._sized_for == (width, total)):
            return
        self._sized_for = (width, total)
        layout = self.details.layout()
        if layout is None:
            return
        need = layout.totalHeightForWidth(width) if layout.hasHeightForWidth() else self.details.sizeHint().height()
        need += 2 * layout.spacing() + 8  # the wrapped labels' estimate runs a few pixels short
        details = max(self.details_scroll.minimumHeight(), min(need, int(total * self.DETAILS_SHARE)))
        rest = total - details
        chart = max(self.CHART_MIN_PX, int(rest * self.CHART_SHARE))
        splitter.setSizes([details, max(120, rest - chart), chart])

    @property
    def chart(self) -> Any:
        """The cost chart (a :class:`CostChart`), built on first use."""
        return self.ensure_chart()

    @Slot()
    def ensure_chart(self) -> Any:
        """Build the cost chart if it is not there yet (imports pyqtgraph) and show the current result."""
        if self._chart is None:
            from gpuplanner.ui.cost_chart import CostChart

            chart = CostChart()
            chart.setMinimumHeight(150)
            sizes = self.splitter.sizes()
            self.splitter.replaceWidget(2, chart)
            self._chart_placeholder.deleteLater()
            self.splitter.setSizes(sizes)
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

        def work() -> _Answer | _Refused:
            return _work(generation, request, values, catalog, db_path, cache, pinned, qlora)

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
        if isinstance(answer, _Refused):
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
        self.status_label.hide()
        self._apply(result, cells if cells is not None else table_cells(result.rows))
        if first:
            self._lay_out_splitter(force=True)  # the details have their text now
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
        self.status_label.setText(f"Cannot plan: {field_label(key)}: {message}.{keep}")
        self.status_label.show()
        self._edit_started = None
        self.inputError.emit(key, message)

    def _apply(self, result: PlanResult, cells: TableCells) -> None:
        plan, request = result.plan, result.request
        self.model.set_cells(cells)
        names = [c[1] for c in COLUMNS]
        self.table.setColumnHidden(names.index("meets_deadline"), request.deadline_hours is None)
        self.table.setColumnHidden(names.index("within_budget"), request.budget_usd is None)
        self.table.setColumnHidden(names.index("within_gpu_hours"), request.max_gpu_hours is None)
        if self._chart is not None:
            self._chart.set_rows(result.rows, request.deadline_hours, request.budget_usd)
        self._restore_selection()
        self._fit_row_heights()
        self._show_focus()
        self.form.set_note(
            "memory",
            result.memory_note
            if request.memory_source != MEMORY_SOURCES[0] or result.memory_source != MEMORY_SOURCES[0]
            else "",
        )
        self.form.set_note("calibration", result.calibration_note)
        self.sources_label.setText(
            f"Speed: {result.throughput_source}. Memory: {result.memory_source}"
            + (
                " (trace fell back to the formulas)"
                if request.memory_source == "trace" and result.memory_source != "trace"
                else ""
            )
            + "."
        )
        setup = plan.setup
        tokens = setup.effective_batch * setup.seq_len
        self.form.hint.setText(
            f"{request.model.name}: {request.model.n_params / 1e9:,.2f}B parameters. Effective batch "
            f"{setup.micro_batch} x {setup.grad_accum} x {setup.gpus} GPU(s) = {setup.effective_batch} sequences "
            f"({tokens:,} tokens) per optimizer step; {plan.runtime.optimizer_steps:,} steps."
            + (f" Largest micro-batch that fits: {plan.max_micro_batch}." if plan.max_micro_batch else "")
        )

    def _show_focus(self) -> None:
        """Headline, details, what to rent, memory bar, advice and the chart's highlight for one option: the
        selected row, else the recommended one (else the form's plan)."""
        result = self.result
        if result is None:
            return
        focus = choose_focus(result.rows, result.plan, self.selected_key)
        self.focus = focus
        plan = focus.plan
        self.recommendation_label.setText(headline(focus, result.recommendation))
        self.focus_label.setText(focus_line(focus, result.plan))
        self.summary_label.setText(summary_text(plan))
        self.rent_label.setText(rental_text(focus, self.catalog))
        gpu_name = plan.gpu.name if plan.gpu else "your GPU"
        self.memory_bar.set_view(memory_view(plan.memory, plan.capacity_gib, plan.request.headroom, gpu_name))
        # What would make it fit is worked out for the form's plan only (the table's plans skip it).
        form = result.plan
        suggestions = form.suggestions if plan.gpu == form.gpu and plan.setup == form.setup else plan.suggestions
        advice = []
        if plan.fits is False and suggestions:
            advice.append("To make it fit: " + "; ".join(suggestions) + ".")
        elif plan.fits is False:
            advice.append("It does not fit and no simple change makes it fit: try a larger GPU or QLoRA.")
        if plan is not form and form.fits is False:  # the details show another option: say so for the form's
            gpu = form.gpu.name if form.gpu else "your GPU"
            fix = f": to make it fit, {'; '.join(form.suggestions)}" if form.suggestions else ""
            advice.append(f"The form's option ({form.setup.gpus} x {gpu}) does not fit{fix}.")
        advice += [
            w[0].upper() + w[1:]
            for w in plan.warnings
            if not w.startswith(("does not fit", "no spot price known", "trace mode unavailable"))
        ]
        self.advice_label.setText("\n".join(advice))
        self.advice_label.setVisible(bool(advice))
        if self._chart is not None:
            self._chart.set_focus(focus.row)

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
            for source_row, row in enumerate(self.model.rows()):
                if option_key(row) == key:
                    index = self.proxy.mapFromSource(self.model.index(source_row, 0))
                    if index.isValid():
                        self.table.selectRow(index.row())
                        return
            self.selected_key = None
        finally:
            selection.blockSignals(False)
            self.table.viewport().update()

    @Slot("QItemSelection", "QItemSelection")
    def _on_selection_changed(self, *_: Any) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            row = self.model.rows()[self.proxy.mapToSource(rows[0]).row()]
            self.selected_key = option_key(row)
        else:
            self.selected_key = None
        self._show_focus()

    @Slot(object)
    def _on_chart_option_clicked(self, key: Any) -> None:
        gpu, gpus, pricing = key
        self.select_option(gpu, gpus, pricing)

    def select_option(self, gpu: str, gpus: int, pricing: str) -> bool:
        """Select the table's row of one option (as a click does); False when the table has no such row."""
        for source_row, row in enumerate(self.model.rows()):
            if option_key(row) == (gpu, gpus, pricing):
                index = self.proxy.mapFromSource(self.model.index(source_row, 0))
                if index.isValid():
                    self.table.selectRow(index.row())
                    self.table.scrollTo(index)
                    return True
        return False

    # ------------------------------------------------------------------ table

    @Slot(bool)
    def _on_usable_only_toggled(self, checked: bool) -> None:
        self.proxy.set_usable_only(checked)
        self._fit_row_heights()

    @Slot(int, int, int)
    def _on_section_resized(self, column: int, _old: int, _new: int) -> None:
        if column == len(COLUMNS) - 1:
            self._fit_timer.start()

    @Slot()
    def _fit_row_heights(self) -> None:
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

    @Slot("QModelIndex")
    def _on_row_double_clicked(self, index: Any) -> None:
        row = self.model.rows()[self.proxy.mapToSource(index).row()]
        self.form.set_values({"gpu": row.gpu, "gpus": str(row.gpus), "pricing": row.pricing})
        self.recalculate()

    # ------------------------------------------------------------------ save / open

    def plan_document(self) -> dict[str, Any] | None:
        if self.result is None:
            return None
        return plan_document(self.result.plan, inputs_with_form(self.result.request, self.result.values))

    def default_plan_name(self) -> str:
        assert self.result is not None
        r = self.result
        gpu = r.plan.gpu.name if r.plan.gpu else "custom GPU"
        return f"{r.request.model.name} {r.plan.setup.method} on {r.plan.setup.gpus} x {gpu}"

    def save_plan(self, name: str, then: Callable[[int], None] | None = None) -> None:
        """Store the current (valid) plan in the history on the write worker; ``planSaved(id)`` follows
        (and ``then(id)``, when given), or ``planSaveFailed(message)``."""
        document = self.plan_document()
        if document is None:
            raise RuntimeError("no valid plan to save")
        db_path = self.services.db_path

        def work() -> int:
            db = open_db(db_path)
            try:
                return save_plan(db, name, document)
            finally:
                db.close()

        self._writes += 1
        if then is not None:
            self._after_save[self._writes] = then
        self._write_pool.start(BackgroundJob(work, self._write_signals, "save-plan", self._writes, str))

    @Slot(str, int, object)
    def _on_plan_saved(self, _kind: str, generation: int, plan_id: Any) -> None:
        self.saved_plan_id = int(plan_id)
        self.planSaved.emit(self.saved_plan_id)
        then = self._after_save.pop(generation, None)
        if then is not None:
            then(self.saved_plan_id)

    @Slot(str, int, str)
    def _on_plan_save_failed(self, _kind: str, generation: int, message: str) -> None:
        self._after_save.pop(generation, None)
        self.planSaveFailed.emit(message)
        QMessageBox.warning(
            self, "Save plan", f"Could not save the plan in the history (nothing was changed): {message}"
        )

    def saved_plans(self) -> list[tuple[int, str, float]]:
        db = open_db(self.services.db_path)
        try:
            return [(p.id, p.name, p.updated_at) for p in list_plans(db)]
        finally:
            db.close()

    def open_plan(self, plan_id: int) -> None:
        db = open_db(self.services.db_path)
        try:
            saved = get_plan(db, plan_id)
        finally:
            db.close()
        self.form.set_values(values_from_inputs(saved.inputs))
        self.saved_plan_id = plan_id
        self.recalculate()

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
        plans = self.saved_plans()
        if not plans:
            QMessageBox.information(self, "Open plan", "No saved plans yet: use Save plan to keep one.")
            return
        labels = [f"#{pid}  {name}  ({time.strftime('%Y-%m-%d %H:%M', time.localtime(at))})" for pid, name, at in plans]
        label, ok = QInputDialog.getItem(self, "Open plan", "Saved plans:", labels, 0, False)
        if ok and label in labels:
            self.open_plan(plans[labels.index(label)][0])

    # ------------------------------------------------------------------ launch

    def launch_settings(self, plan_id: int, result: PlanResult | None = None) -> dict[str, Any] | None:
        """Trainer settings of ``result`` (the current plan by default), saved as ``plan_id`` (so the run
        links to it)."""
        result = result or self.result
        if result is None:
            return None
        plan, request = result.plan, result.request
        price = None
        if request.pricing_mode == "spot" and plan.spot is not None:
            price = plan.spot.price.usd_per_gpu_hour
        elif plan.on_demand is not None:
            price = plan.on_demand.usd_per_gpu_hour
        setup, fitted = launch_setup(request, plan, result.rows)
        settings = trainer_settings(request, result.values, plan_id=plan_id, price_per_gpu_hour=price, setup=setup)
        if fitted:
            settings["fitted"] = list(fitted)
        return settings

    @Slot()
    def _on_launch_clicked(self) -> None:
        self.launch()

    def launch(self) -> None:
        """Save the plan (off the GUI thread), then ask for the launch dialog with its settings."""
        if self.result is None:
            QMessageBox.information(self, "Launch", "There is no valid plan to launch: fix the marked input first.")
            return
        result = self.result

        def launch_saved(plan_id: int) -> None:  # what was saved is launched, even if the form changed since
            settings = self.launch_settings(plan_id, result)
            if settings is not None:
                self.launchRequested.emit(settings)

        self.save_plan(self.default_plan_name(), then=launch_saved)

    # ------------------------------------------------------------------ export

    def export_table(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        rows = self.result.rows if self.result else []
        return EXPORT_COLUMNS, export_rows(rows)

    def export_csv(self, path: str | Path) -> None:
        columns, rows = self.export_table()
        Path(path).write_text(to_csv(columns, rows), encoding="utf-8")

    def export_markdown(self, path: str | Path) -> None:
        columns, rows = self.export_table()
        text = ""
        if self.result is not None:
            text = (
                f"# GPU plan: {self.result.request.model.name}\n\n**Recommendation:** {self.result.recommendation}\n\n"
            )
        Path(path).write_text(text + to_markdown(columns, rows), encoding="utf-8")

    def charts_image(self, width: int = 1200) -> QImage:
        """The memory bar and the cost chart, one above the other, as one image."""
        chart = self.chart.grab().toImage()
        bar_h = 110
        chart_h = int(chart.height() * width / max(1, chart.width()))
        image = QImage(QSize(width, bar_h + chart_h), QImage.Format.Format_ARGB32)
        image.fill(self.palette().color(QPalette.ColorRole.Base))
        painter = QPainter(image)
        try:
            paint_memory_bar(painter, QRectF(10, 8, width - 20, bar_h - 16), self.memory_bar.view, self.palette())
            painter.drawImage(QRectF(0, bar_h, width, chart_h), chart)
        finally:
            painter.end()
        return image

    def export_png(self, path: str | Path) -> None:
        if not self.charts_image().save(str(path), "PNG"):  # type: ignore[call-overload]  # str at run time, bytes in the stub
            raise OSError(f"cannot write {path}")

    def report(self) -> Report:
        result = self.result
        report = Report("GPU plan", time.strftime("%Y-%m-%d %H:%M"))
        if result is None:
            report.text("No valid plan.")
            return report
        inputs = inputs_with_form(result.request, result.values)
        inputs.pop("form", None)
        pairs = settings_rows(inputs)
        report.text("Recommendation: " + result.recommendation, bold=True)
        if self.focus is not None:
            report.text(focus_line(self.focus, result.plan, hints=False))
        report.text(self.summary_label.text() + " " + self.sources_label.text())
        report.text(self.rent_label.text())
        report.key_values(pairs, columns=3)
        view = self.memory_bar.view
        report.picture(lambda painter, rect, palette: paint_memory_bar(painter, rect, view, palette), 16)
        if result.plan.suggestions:
            report.text("To make it fit: " + "; ".join(result.plan.suggestions))
        report.image(self.chart.grab().toImage(), 55)
        dim = [not row.usable for row in result.rows]
        report.table([c[0] for c in COLUMNS], table_cells(result.rows).texts, dim=dim)  # as the window shows them
        return report

    def export_pdf(self, path: str | Path) -> None:
        write_pdf(self.report(), str(path))

    @Slot("QAction*")
    def _on_export_triggered(self, action: Any) -> None:
        self.export_dialog(str(action.data()))

    def export_dialog(self, kind: str) -> str | None:
        filters = {
            "csv": "CSV (*.csv)",
            "markdown": "Markdown (*.md)",
            "png": "PNG image (*.png)",
            "pdf": "PDF (*.pdf)",
        }
        suffix = {"csv": ".csv", "markdown": ".md", "png": ".png", "pdf": ".pdf"}[kind]
        if self.result is None:
            QMessageBox.information(self, "Export", "There is no valid plan to export: fix the marked input first.")
            return None
        path, _ = QFileDialog.getSaveFileName(self, "Export plan", f"gpu-plan{suffix}", filters[kind])
        if not path:
            return None
        if not path.endswith(suffix):
            path += suffix
        try:
            {"csv": self.export_csv, "markdown": self.export_markdown, "png": self.export_png, "pdf": self.export_pdf}[
                kind
            ](path)
        except OSError as exc:
            QMessageBox.warning(self, "Export", f"Cannot write {path}: {exc}")
            return None
        return path

    # ------------------------------------------------------------------ lifetime

    def shutdown(self) -> None:
        """Stop the debounce timer and wait for the worker (call before the window goes away)."""
        self._debounce.stop()
        self._pool.clear()
        self._pool.waitForDone(5000)
        self._write_pool.waitForDone(BUSY_TIMEOUT_MS + 5000)  # a plan being saved is not lost
