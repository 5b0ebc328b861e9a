"""The Plan pane: the form on the left; memory bar, ranked table, cost chart and recommendation on the right.

Edits are debounced (:data:`DEBOUNCE_MS`), then the request is built on the GUI thread (cheap, the
CLI's own parsing) and the rest runs on the pane's own one-thread pool: the speeds measured in the
run history are added (its own SQLite connection, as ``gpuplanner plan`` does), then the engine
(``make_plan`` + ``compare``, ~10-30 ms; seconds in trace memory mode). Each calculation carries a
generation number; a result older than the newest request is dropped. An invalid input is shown at
its field and the last valid result stays on screen. The form says which memory model answered and
where the speed came from.

In the window the cost chart (pyqtgraph) is built after the first frame (``defer_chart``).

Signals:
    resultsUpdated(): a new result is on screen.
    inputError(str, str): the form key and message of an input the engine refused.
    launchRequested(dict): "Launch this plan" with the trainer settings (see ``trainer_settings``).
    planSaved(int): a plan was saved in the history, with its id.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QRectF, QRunnable, QSize, Qt, QThreadPool, QTimer, Signal, Slot
from PySide6.QtGui import QImage, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.export.tables import to_csv, to_markdown
from gpuplanner.history.db import open_db
from gpuplanner.history.plans import get_plan, list_plans, save_plan
from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.documents import plan_document, prices_note, range_basis
from gpuplanner.plan.planner import GIB, PlanRequest
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.planning import MeasuredCache, PlanResult, compute, launch_setup
from gpuplanner.ui.compare_model import COLUMNS, EXPORT_COLUMNS, CompareProxyModel, CompareTableModel, export_rows
from gpuplanner.ui.memory_bar import MemoryBar, memory_view, paint_memory_bar
from gpuplanner.ui.palette import BAD, WARN
from gpuplanner.ui.plan_form import PlanForm
from gpuplanner.ui.plan_inputs import (
    MEMORY_SOURCES,
    inputs_with_form,
    request_from_values,
    trainer_settings,
    uses_calibration,
    values_from_inputs,
)
from gpuplanner.ui.report_pdf import Report, write_pdf
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.table_view import export_menu_button, sortable_table

DEBOUNCE_MS = 150


class _PlanSignals(QObject):
    done = Signal(object)
    failed = Signal(int, str, str)


class _PlanJob(QRunnable):
    def __init__(
        self,
        generation: int,
        request: PlanRequest,
        values: dict[str, str],
        catalog: Catalog,
        db_path: Path | None,
        cache: MeasuredCache,
        signals: _PlanSignals,
    ) -> None:
        super().__init__()
        self.generation, self.request, self.values, self.catalog, self.signals = (
            generation,
            request,
            values,
            catalog,
            signals,
        )
        self.db_path, self.cache = db_path, cache

    def run(self) -> None:
        try:
            result = compute(self.generation, self.request, self.values, self.catalog, self.db_path, self.cache)
        except PlanInputError as exc:
            self.signals.failed.emit(self.generation, exc.field, exc.message)
        except Exception as exc:  # noqa: BLE001 - never let a worker die silently
            self.signals.failed.emit(self.generation, "model-source", f"the planner failed: {exc}")
        else:
            self.signals.done.emit(result)


def _money(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"${value:,.2f}"


class PlanPane(QWidget):
    resultsUpdated = Signal()
    inputError = Signal(str, str)
    launchRequested = Signal(dict)
    planSaved = Signal(int)

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
        self._generation = 0
        self._in_flight: dict[int, _PlanSignals] = {}
        self._edit_started: float | None = None
        self.last_latency_s: float | None = None
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
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

        self.recommendation_label = QLabel()
        self.recommendation_label.setWordWrap(True)
        self.recommendation_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.recommendation_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.recommendation_label.setFont(font)
        rv.addWidget(self.recommendation_label)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setStyleSheet(f"color: {BAD};")
        self.status_label.hide()
        rv.addWidget(self.status_label)
        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rv.addWidget(self.summary_label)
        self.sources_label = QLabel()
        self.sources_label.setObjectName("plan-sources")
        self.sources_label.setToolTip(
            "Where the speed came from (your figure, runs measured in the history, or "
            "peak FLOP/s x MFU) and which memory model answered"
        )
        self.sources_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rv.addWidget(self.sources_label)
        self.memory_bar = MemoryBar()
        rv.addWidget(self.memory_bar)
        self.advice_label = QLabel()
        self.advice_label.setWordWrap(True)
        self.advice_label.setStyleSheet(f"color: {WARN};")
        rv.addWidget(self.advice_label)

        self.model = CompareTableModel(self)
        self.proxy = CompareProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.table = sortable_table(
            self.proxy, 0, Qt.SortOrder.AscendingOrder, QAbstractItemView.SelectionMode.SingleSelection
        )
        header = self.table.horizontalHeader()
        # Widths from typical contents (ResizeToContents would scan every cell on every update), tight
        # enough that every column fits at 1280x800; "Why not" takes what is left, elided, and every
        # cell's tooltip holds the full reason.
        metrics = self.table.fontMetrics()
        samples = (
            "99",
            "A100 80GB PCIe",
            "8",
            "on-demand",
            "runpod",
            "yes",
            "999.9",
            "999.9",
            "9,999.99",
            "9,999.99",
            "yes",
            "yes",
            "",
        )
        header.setMinimumSectionSize(24)
        for index, text in enumerate(samples):
            width = max(metrics.horizontalAdvance(text), metrics.horizontalAdvance(COLUMNS[index][0])) + 10
            self.table.setColumnWidth(index, width)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.table.setToolTip("Double-click a row to plan with that option")
        self.table.doubleClicked.connect(self._on_row_double_clicked)
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
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(table_box)
        splitter.addWidget(self._chart_placeholder)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        rv.addWidget(splitter, 1)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        layout.addWidget(right, 1)
        if not self._defer_chart:
            self.ensure_chart()

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
            self.splitter.replaceWidget(1, chart)
            self._chart_placeholder.deleteLater()
            self.splitter.setSizes(sizes)
            self._chart = chart
            if self.result is not None:
                chart.set_rows(self.result.rows, self.result.request.deadline_hours, self.result.request.budget_usd)
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
        except PlanInputError as exc:
            self._show_input_error(exc.field, exc.message)
            return False
        self._generation += 1
        signals = _PlanSignals()
        signals.done.connect(self._on_result)
        signals.failed.connect(self._on_failed)
        self._in_flight[self._generation] = signals
        db_path = self.services.db_path if uses_calibration(values) else None
        if request.memory_source == "trace":
            self.form.set_note("memory", "Tracing one training step…")
        self._pool.start(
            _PlanJob(self._generation, request, values, self.catalog, db_path, self._measured_cache, signals)
        )
        return True

    def is_busy(self) -> bool:
        return bool(self._in_flight) or self._debounce.isActive()

    @Slot(object)
    def _on_result(self, result: PlanResult) -> None:
        self._in_flight.pop(result.generation, None)
        if result.generation != self._generation:
            return  # an older request: a newer one is on its way
        self.result = result
        self.last_error = None
        self.form.clear_errors()
        self.status_label.hide()
        self._apply(result)
        if self._edit_started is not None:
            self.last_latency_s = time.perf_counter() - self._edit_started
            self._edit_started = None
        self.resultsUpdated.emit()

    @Slot(int, str, str)
    def _on_failed(self, generation: int, field: str, message: str) -> None:
        self._in_flight.pop(generation, None)
        if generation == self._generation:
            self._show_input_error(field, message)

    def _show_input_error(self, field: str, message: str) -> None:
        key = self.form.show_error(field, message)
        self.last_error = (key, message)
        keep = " Showing the last valid result." if self.result is not None else ""
        self.status_label.setText(f"Cannot plan: {message}.{keep}")
        self.status_label.show()
        self._edit_started = None
        self.inputError.emit(key, message)

    def _apply(self, result: PlanResult) -> None:
        plan, request = result.plan, result.request
        text = result.recommendation
        if text.startswith("No option fits in memory"):
            text = "No option fits in memory: see below what would make it fit."
        self.recommendation_label.setText(text)
        self.summary_label.setText(self.summary_text(result))
        gpu_name = plan.gpu.name if plan.gpu else "your GPU"
        self.memory_bar.set_view(memory_view(plan.memory, plan.capacity_gib, request.headroom, gpu_name))
        advice = []
        if plan.fits is False and plan.suggestions:
            advice.append("To make it fit: " + "; ".join(plan.suggestions) + ".")
        elif plan.fits is False:
            advice.append("It does not fit and no simple change makes it fit: try a larger GPU or QLoRA.")
        advice += [
            w[0].upper() + w[1:]
            for w in plan.warnings
            if not w.startswith(("does not fit", "no spot price known", "trace mode unavailable"))
        ]
        self.advice_label.setText("\n".join(advice))
        self.advice_label.setVisible(bool(advice))
        self.model.set_rows(result.rows)
        names = [c[1] for c in COLUMNS]
        self.table.setColumnHidden(names.index("meets_deadline"), request.deadline_hours is None)
        self.table.setColumnHidden(names.index("within_budget"), request.budget_usd is None)
        self.table.setColumnHidden(names.index("within_gpu_hours"), request.max_gpu_hours is None)
        if self._chart is not None:
            self._chart.set_rows(result.rows, request.deadline_hours, request.budget_usd)
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

    @staticmethod
    def summary_text(result: PlanResult) -> str:
        plan, request = result.plan, result.request
        gpu = plan.gpu.name if plan.gpu else "your GPU"
        parts = [
            f"{plan.setup.gpus} x {gpu}: {plan.memory.total / GIB:.1f} GiB per GPU, "
            f"{plan.throughput.tokens_per_s:,.0f} tokens/s, "
            f"{plan.runtime.hours:,.2f} h, {plan.runtime.gpu_hours:,.2f} GPU-hours."
        ]
        if plan.on_demand is not None:
            parts.append(
                f"On-demand {_money(plan.on_demand_cost_usd)} at ${plan.on_demand.usd_per_gpu_hour:.2f}/GPU-h "
                f"({plan.on_demand.provider})."
            )
        if plan.spot is not None:
            est = plan.spot.estimate
            parts.append(
                f"Spot {_money(plan.spot.cost_usd)} expected in {est.hours:,.2f} h "
                f"(+{est.overhead_hours:,.2f} h overhead), P50 {_money(plan.spot.p50_cost_usd)}, "
                f"P90 {_money(plan.spot.p90_cost_usd)}."
            )
        if plan.deadline_ok is not None:
            parts.append(f"Deadline {request.deadline_hours:g} h: {'met' if plan.deadline_ok else 'MISSED'}.")
        if plan.budget_ok is not None:
            parts.append(f"Budget ${request.budget_usd:,.2f}: {'within' if plan.budget_ok else 'OVER'}.")
        if plan.gpu_hours_ok is not None:
            parts.append(f"GPU-hour cap {request.max_gpu_hours:,g}: {'within' if plan.gpu_hours_ok else 'OVER'}.")
        low, high = plan.hours_range
        likely = f"Likely {low:,.2f} h to {high:,.2f} h"
        if plan.cost_range is not None:
            likely += f", {_money(plan.cost_range[0])} to {_money(plan.cost_range[1])}"
        parts.append(f"{likely} (P10-P90; {range_basis(plan).removesuffix(' (P10-P90)')}).")
        if plan.on_demand is not None or plan.spot is not None:
            parts.append(prices_note(plan).rstrip(".") + ".")
        return " ".join(parts)

    # ------------------------------------------------------------------ table

    @Slot(bool)
    def _on_usable_only_toggled(self, checked: bool) -> None:
        self.proxy.set_usable_only(checked)

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

    def save_plan(self, name: str) -> int:
        """Store the current (valid) plan in the history; returns its id."""
        document = self.plan_document()
        if document is None:
            raise RuntimeError("no valid plan to save")
        db = open_db(self.services.db_path)
        try:
            plan_id = save_plan(db, name, document)
        finally:
            db.close()
        self.saved_plan_id = plan_id
        self.planSaved.emit(plan_id)
        return plan_id

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

    def save_dialog(self) -> int | None:
        if self.result is None:
            QMessageBox.information(self, "Save plan", "There is no valid plan to save: fix the marked input first.")
            return None
        name, ok = QInputDialog.getText(self, "Save plan", "Name of the plan:", text=self.default_plan_name())
        if not ok or not name.strip():
            return None
        return self.save_plan(name.strip())

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

    def launch_settings(self) -> dict[str, Any] | None:
        """Trainer settings of the current plan, after saving it (so the run links to it)."""
        if self.result is None:
            return None
        plan_id = self.save_plan(self.default_plan_name())
        plan, request = self.result.plan, self.result.request
        price = None
        if request.pricing_mode == "spot" and plan.spot is not None:
            price = plan.spot.price.usd_per_gpu_hour
        elif plan.on_demand is not None:
            price = plan.on_demand.usd_per_gpu_hour
        setup, fitted = launch_setup(request, plan, self.result.rows)
        settings = trainer_settings(request, self.result.values, plan_id=plan_id, price_per_gpu_hour=price, setup=setup)
        if fitted:
            settings["fitted"] = list(fitted)
        return settings

    @Slot()
    def _on_launch_clicked(self) -> None:
        self.launch()

    def launch(self) -> None:
        settings = self.launch_settings()
        if settings is None:
            QMessageBox.information(self, "Launch", "There is no valid plan to launch: fix the marked input first.")
            return
        self.launchRequested.emit(settings)

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
        if not self.charts_image().save(str(path), "PNG"):
            raise OSError(f"cannot write {path}")

    def report(self) -> Report:
        result = self.result
        report = Report("GPU plan", time.strftime("%Y-%m-%d %H:%M"))
        if result is None:
            report.text("No valid plan.")
            return report
        inputs = inputs_with_form(result.request, result.values)
        inputs.pop("form", None)
        pairs = [
            (k.replace("_", " "), json.dumps(v) if isinstance(v, list) else str(v))
            for k, v in inputs.items()
            if v is not None
        ]
        report.text("Recommendation: " + result.recommendation, bold=True)
        report.text(self.summary_text(result) + " " + self.sources_label.text())
        report.key_values(pairs, columns=3)
        view = self.memory_bar.view
        report.picture(lambda painter, rect, palette: paint_memory_bar(painter, rect, view, palette), 16)
        if result.plan.suggestions:
            report.text("To make it fit: " + "; ".join(result.plan.suggestions))
        report.image(self.chart.grab().toImage(), 55)
        columns, rows = self.export_table()
        dim = [not row.usable for row in result.rows]
        report.table([c[0] for c in COLUMNS], rows, dim=dim)
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
