"""The Sweep pane: plan a budgeted hyperparameter search, start one, and watch it run.

Both halves fill the same typed requests as `gpuplanner sweep plan` / `sweep run` and go through the same
checks (:mod:`gpuplanner.app.sweep_requests`), so a bad input gets the CLI's message, shown under the form. The
estimate, the search itself (:class:`gpuplanner.sweep.runner.SweepRunner`) and the periodic look at its
study (:func:`gpuplanner.sweep.lookback.load_review`) run on worker threads; the GUI thread only lays out.
Closing the window leaves a running search's trials going; starting it again with the same study name
continues it.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.sweep_requests import (
    ScheduleRequest,
    SearchPlanRequest,
    SweepRunRequest,
    search_estimate,
    split_hosts,
    sweep_settings,
)
from gpuplanner.launch.manager import RunManager
from gpuplanner.plan import example
from gpuplanner.plan.inputs import PlanInputs, parse_value
from gpuplanner.plan.model_spec import list_presets
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.planning import calibrated_request
from gpuplanner.sweep.lookback import SearchReview, load_review
from gpuplanner.sweep.runner import SweepResult, SweepRunner
from gpuplanner.sweep.schedule import PRUNERS
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.history.search_view import SearchPlots, TrialTable, summary_text
from gpuplanner.ui.human import human_money
from gpuplanner.ui.palette import is_dark
from gpuplanner.ui.runs.run_controller import RunController
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.sweep.space_editor import SpaceEditor, write_space
from gpuplanner.ui.sweep.sweep_text import estimate_html, run_form_message, verdict_html

WATCH_MS = 1500  # how often a running search's study is read again


class _SweepSignals(JobSignals):
    said = Signal(str)  # a line the search runner says


def _describe(exc: Exception) -> str:
    return f"{exc.field}: {exc.message}" if isinstance(exc, PlanInputError) else str(exc)


def estimate_text(
    request: SearchPlanRequest, catalog: Any, db_path: Any, dark: bool = False
) -> tuple[dict[str, Any], str]:
    """`gpuplanner sweep plan` for the form's request, with the speeds measured in the history at ``db_path``:
    the JSON document and the window's report of it (HTML)."""
    trial = calibrated_request(request.trial, db_path, catalog)
    _estimate, document = search_estimate(replace(request, trial=trial), catalog)
    return document, estimate_html(document, gpu=trial.gpu, dark=dark, verdict=False)


def _spin(low: int, high: int, value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    return box


class SweepPane(QWidget):
    planned = Signal(object)  # the search estimate document
    started = Signal(str)  # study name
    watched = Signal(object)  # a SearchReview of the running search
    finished = Signal(object)  # the SweepResult
    inputError = Signal(str)

    def __init__(
        self, services: AppServices, parent: QWidget | None = None, controller: RunController | None = None
    ) -> None:
        super().__init__(parent)
        self.services = services
        self.controller = controller  # the window's shared one: trials show in the Runs pane
        self.runner: SweepRunner | None = None
        self.manager: Any = None
        self.study: str | None = None
        self.review: SearchReview | None = None
        self.result: SweepResult | None = None
        self.estimate: dict[str, Any] | None = None
        self._watching = False
        self._watch_again = False  # the search ended while a look was under way: look once more
        self._marked: list[QWidget] = []  # form fields outlined for the last problem
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(3)  # the search, a look at it, an estimate
        self._signals = _SweepSignals(self)
        self._signals.done.connect(self._on_done)
        self._signals.failed.connect(self._on_failed)
        self._signals.said.connect(self._on_said)
        self._timer = QTimer(self)
        self._timer.setInterval(WATCH_MS)
        self._timer.timeout.connect(self._watch)
        self._build()

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        plan_box = QGroupBox("Plan a search")
        form = QFormLayout(plan_box)
        self.model_combo = QComboBox()
        self.model_combo.addItems(list_presets())
        self.model_combo.setCurrentText(example.MODEL)
        self.gpu_combo = QComboBox()
        self.gpu_combo.addItems(sorted(g.name for g in self.services.catalog.gpus))
        self.gpu_combo.setCurrentText(example.GPU)
        self.samples_edit = QLineEdit("50k")
        self.epochs_spin = _spin(1, 1000, 3)
        self.pricing_combo = QComboBox()
        self.pricing_combo.addItems(["on-demand", "spot"])
        self.plan_trials_spin = _spin(1, 10_000, 27)
        self.plan_pruner_combo = QComboBox()
        self.plan_pruner_combo.addItems(PRUNERS)
        self.min_epochs_spin = QDoubleSpinBox()
        self.min_epochs_spin.setRange(0.0, 1000.0)
        self.min_epochs_spin.setSpecialValueText("auto")
        self.min_epochs_spin.setValue(1.0)
        self.plan_eta_spin = _spin(2, 10, 3)
        self.parallel_spin = _spin(1, 1000, 4)
        self.plan_budget_edit = QLineEdit()
        self.plan_budget_edit.setPlaceholderText("none")
        self.plan_hours_edit = QLineEdit()
        self.plan_hours_edit.setPlaceholderText("none")
        for label, widget in (
            ("Model:", self.model_combo),
            ("GPU:", self.gpu_combo),
            ("Samples per trial:", self.samples_edit),
            ("Epochs per full trial:", self.epochs_spin),
            ("Pricing:", self.pricing_combo),
            ("Trials:", self.plan_trials_spin),
            ("Pruner:", self.plan_pruner_combo),
            ("First milestone (epochs):", self.min_epochs_spin),
            ("Reduction factor:", self.plan_eta_spin),
            ("Trials at once:", self.parallel_spin),
            ("Budget ($):", self.plan_budget_edit),
            ("Max GPU-hours:", self.plan_hours_edit),
        ):
            form.addRow(label, widget)
        self.plan_button = QPushButton("Estimate")
        self.plan_button.clicked.connect(self.plan_search)
        form.addRow("", self.plan_button)

        run_box = QGroupBox("Run a search")
        rform = QFormLayout(run_box)
        self.hosts_edit = QLineEdit("local")
        self.hosts_edit.setToolTip("Hosts to run trials on, one trial at a time per name (local,local: two)")
        self.space_editor = SpaceEditor()
        self.space_edit = QLineEdit()
        self.space_edit.setPlaceholderText("optional: a .toml file instead of the rows above")
        self.study_edit = QLineEdit()
        self.study_edit.setPlaceholderText("default: the space file's name")
        self.run_trials_spin = _spin(1, 10_000, 8)
        self.max_steps_spin = _spin(1, 10_000_000, 90)
        self.min_steps_spin = _spin(0, 10_000_000, 30)
        self.min_steps_spin.setSpecialValueText("auto")
        self.run_pruner_combo = QComboBox()
        self.run_pruner_combo.addItems(PRUNERS)
        self.run_eta_spin = _spin(2, 10, 3)
        self.run_budget_edit = QLineEdit()
        self.run_budget_edit.setPlaceholderText("$ cap of the whole search")
        self.run_hours_edit = QLineEdit()
        self.run_hours_edit.setPlaceholderText("GPU-hour cap (optional)")
        self.tags_edit = QLineEdit()
        self.tags_edit.setPlaceholderText("project=search owner=ana")
        self.flags_edit = QLineEdit()
        self.flags_edit.setPlaceholderText("trainer flags, e.g. --model-config cfg.json --data corpus/")
        run_rows: tuple[tuple[str, QWidget], ...] = (
            ("Hosts:", self.hosts_edit),
            ("Search space:", self.space_editor),
            ("or a space file:", self.space_edit),
            ("Study name:", self.study_edit),
            ("Trials:", self.run_trials_spin),
            ("Steps per full trial:", self.max_steps_spin),
            ("First milestone (steps):", self.min_steps_spin),
            ("Pruner:", self.run_pruner_combo),
            ("Reduction factor:", self.run_eta_spin),
            ("Budget ($):", self.run_budget_edit),
            ("Max GPU-hours:", self.run_hours_edit),
            ("Tags:", self.tags_edit),
            ("Trainer flags:", self.flags_edit),
        )
        for run_label, run_widget in run_rows:
            rform.addRow(run_label, run_widget)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start search")
        self.start_button.clicked.connect(self.start_search)
        self.stop_button = QPushButton("Stop search")
        self.stop_button.setEnabled(False)
        self.stop_button.setToolTip("Stop the running trials at a checkpoint and start no new one")
        self.stop_button.clicked.connect(self.stop_search)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.stop_button)
        rform.addRow("", buttons)

        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.forms = QTabWidget()
        for box, title in ((plan_box, "Plan"), (run_box, "Run")):
            box.setTitle("")
            box.setFlat(True)
            scroll = QScrollArea()
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QFrame.Shape.NoFrame)
            scroll.setWidget(box)
            self.forms.addTab(scroll, title)
        self.forms.setTabToolTip(0, "Estimate a search: GPU-hours, cost and wall time with and without pruning")
        self.forms.setTabToolTip(1, "Start a search on your hosts under a hard cap and watch it")
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.forms, 1)
        lv.addWidget(self.error_label)

        # the caps' verdict on its own word-wrapped line above the estimate: never cut off or scrolled away
        self.verdict_label = QLabel()
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setTextFormat(Qt.TextFormat.RichText)
        self.verdict_label.setVisible(False)
        self.estimate_view = QTextBrowser()
        self.estimate_view.setPlaceholderText(
            "Fill in the search on the left and press Estimate: what one trial costs, the whole search with and "
            "without pruning, and whether it fits the caps."
        )
        self.status_label = QLabel("No search running.")
        self.status_label.setWordWrap(True)
        self.plots = SearchPlots()
        self.table = TrialTable()
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(2000)
        right = QSplitter(Qt.Orientation.Vertical)
        estimate = QWidget()
        ev = QVBoxLayout(estimate)
        ev.setContentsMargins(0, 0, 0, 0)
        ev.addWidget(self.verdict_label)
        ev.addWidget(self.estimate_view, 1)
        right.addWidget(estimate)
        watch = QWidget()
        wv = QVBoxLayout(watch)
        wv.setContentsMargins(0, 0, 0, 0)
        wv.addWidget(self.status_label)
        wv.addWidget(self.plots, 2)
        wv.addWidget(self.table, 2)
        wv.addWidget(self.log_view, 1)
        right.addWidget(watch)
        right.setSizes([220, 560])
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 3)
        splitter.setSizes([400, 860])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(splitter)

    # ------------------------------------------------------------------ plan

    def plan_request(self) -> SearchPlanRequest:
        """The search the form describes (the inputs of `gpuplanner sweep plan`), checked by the planner's own
        input rules; a bad value raises :class:`PlanInputError` naming the flag."""
        budget, hours = (_amount(flag, edit) for flag, edit in _caps(self.plan_budget_edit, self.plan_hours_edit))
        samples = parse_value("samples", self.samples_edit.text().strip() or "0")
        trial = PlanInputs(
            model=self.model_combo.currentText(),
            gpu=self.gpu_combo.currentText(),
            samples=int(samples),
            epochs=float(self.epochs_spin.value()),
            pricing=self.pricing_combo.currentText(),
        ).to_request(default_gpu=example.GPU)
        schedule = ScheduleRequest(
            pruner=self.plan_pruner_combo.currentText(),
            min_resource=self.min_epochs_spin.value() or None,
            reduction_factor=self.plan_eta_spin.value(),
        )
        return SearchPlanRequest(
            trial=trial,
            trials=self.plan_trials_spin.value(),
            schedule=schedule,
            parallel=self.parallel_spin.value(),
            budget_usd=budget,
            max_gpu_hours=hours,
        )

    @Slot()
    def plan_search(self) -> None:
        try:
            request = self.plan_request()
        except ValueError as exc:
            self._show_error(_message(exc))
            return
        self._show_error("")
        catalog, db_path = self.services.catalog, self.services.db_path
        dark = is_dark(self.palette())
        self._pool.start(
            BackgroundJob(
                lambda: (*estimate_text(request, catalog, db_path, dark), request),
                self._signals,
                "plan",
                describe=_describe,
            )
        )

    # ------------------------------------------------------------------ run

    def run_request(self) -> SweepRunRequest:
        """The search the form describes (the inputs of `gpuplanner sweep run`); :func:`sweep_settings` checks it."""
        budget, hours = (_amount(flag, edit) for flag, edit in _caps(self.run_budget_edit, self.run_hours_edit))
        try:
            flags = tuple(shlex.split(self.flags_edit.text()))
        except ValueError as exc:
            raise ValueError(f"Trainer flags: {exc}") from None
        schedule = ScheduleRequest(
            pruner=self.run_pruner_combo.currentText(),
            min_resource=self.min_steps_spin.value() or None,
            reduction_factor=self.run_eta_spin.value(),
        )
        return SweepRunRequest(
            hosts=split_hosts(self.hosts_edit.text()),
            space=self.space_edit.text().strip() or self._editor_space(),
            trials=self.run_trials_spin.value(),
            max_steps=self.max_steps_spin.value(),
            trainer_flags=flags,
            schedule=schedule,
            budget_usd=budget,
            max_gpu_hours=hours,
            study=self.study_edit.text().strip() or None,
            tags=tuple(self.tags_edit.text().replace(",", " ").split()),
        )

    def _editor_space(self) -> str:
        """The editor's rows written as the TOML file the CLI reads, beside the history, named like the study."""
        name = self.study_edit.text().strip() or time.strftime("search-%Y%m%d-%H%M%S")
        path = self.services.db_path.parent / "searches" / f"{name}.toml"
        write_space(self.space_editor.rows(), path)
        return str(path)

    @Slot()
    def start_search(self) -> None:
        if self.runner is not None:
            return
        for edit in self._marked:
            edit.setStyleSheet("")
        self._marked = []
        try:
            # the CLI's checks (space, caps, hosts, tags, flags); reading a small TOML and the hosts table
            settings = sweep_settings(self.run_request(), self.services.db_path)
        except PlanInputError as exc:  # in the form's words, the field marked
            text, label = run_form_message(exc.field, exc.message)
            widget = self._run_fields().get(label or "")
            if widget is not None:
                widget.setStyleSheet("border: 1px solid #c0392b")
                widget.setFocus()
                self._marked.append(widget)
            self._show_error(text if label else _message(exc))
            return
        except ValueError as exc:
            self._show_error(_message(exc))
            return
        self._show_error("")
        # The window's one manager (trials appear in the Runs pane), else one of this search's own.
        self.manager = (
            RunManager(self.services.db_path) if self.controller is None else self.controller.reporting_manager()
        )
        runner = SweepRunner(self.services.db_path, settings, self.manager, self._signals.said.emit)
        self.runner, self.study, self.result = runner, settings.study, None
        self.start_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status_label.setText(f"Search {settings.study}: starting…")
        self.log_view.clear()

        def work() -> SweepResult:
            runner.check_first_trial_fits()
            return runner.run()

        self._pool.start(BackgroundJob(work, self._signals, "run", describe=_describe))
        self._timer.start()
        self.started.emit(settings.study)

    def _run_fields(self) -> dict[str, QWidget]:
        return {
            "Trainer flags": self.flags_edit,
            "Search space": self.space_editor,
            "Budget ($)": self.run_budget_edit,
            "Max GPU-hours": self.run_hours_edit,
            "Hosts": self.hosts_edit,
            "Tags": self.tags_edit,
            "Steps per full trial": self.max_steps_spin,
            "Trials": self.run_trials_spin,
        }

    @Slot()
    def stop_search(self) -> None:
        if self.runner is not None:
            self.runner.request_stop()
            self.stop_button.setEnabled(False)
            self.status_label.setText(f"Search {self.study}: stopping the running trials…")

    @Slot()
    def _watch(self) -> None:
        if self.study is None:
            return
        if self._watching:  # a look is under way, maybe from before the last trial ended: look again after it
            self._watch_again = True
            return
        self._watching, self._watch_again = True, False
        path, study = self.services.db_path, self.study
        self._pool.start(BackgroundJob(lambda: load_review(path, study), self._signals, "watch", describe=_describe))

    # ------------------------------------------------------------------ results

    @Slot(str, int, object)
    def _on_done(self, kind: str, _generation: int, payload: Any) -> None:
        if kind == "plan":
            document, text, request = payload
            self.estimate = document
            self.estimate_view.setHtml(text)
            verdict = verdict_html(document, is_dark(self.palette()))
            self.verdict_label.setText(verdict)
            self.verdict_label.setVisible(bool(verdict))
            # what was estimated is what the Run tab starts: its trial count and caps carry over
            self.run_trials_spin.setValue(request.trials)
            for edit, value in (
                (self.run_budget_edit, request.budget_usd),
                (self.run_hours_edit, request.max_gpu_hours),
            ):
                edit.setText("" if value is None else f"{value:g}")
            self.planned.emit(document)
        elif kind == "watch":
            self._watching = False
            self._show_review(payload)
            if self._watch_again:
                self._watch()
        elif kind == "run":
            self.result = payload
            self._end_run()
            self.status_label.setText(
                f"Search {payload.study}: {payload.stop_reason}; spent {human_money(payload.spent_usd)}"
            )
            self._watch()
            self.finished.emit(payload)

    @Slot(str, int, str)
    def _on_failed(self, kind: str, _generation: int, message: str) -> None:
        if kind == "watch":
            self._watching = False
            if self._watch_again:
                self._watch()
            return
        if kind == "run":
            self._end_run()
            self.status_label.setText(f"Search {self.study} did not run.")
        self._show_error(message)

    @Slot(str)
    def _on_said(self, line: str) -> None:
        self.log_view.appendPlainText(line)

    def _show_review(self, review: SearchReview) -> None:
        self.review = review
        if self.runner is not None:
            self.status_label.setText(summary_text(review))
        self.table.show_review(review)
        self.plots.show_review(review)
        self.watched.emit(review)

    def _end_run(self) -> None:
        self._timer.stop()
        self.runner = None
        if self.manager is not None:
            self.manager.close()  # detaches its watchers; the runs themselves are ended or stopped
            self.manager = None
        self.start_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _show_error(self, message: str) -> None:
        self.error_label.setText(message)
        if message:
            self.inputError.emit(message)

    def shutdown(self) -> None:
        """Leave a running search to its trials (running it again continues it) and wait for the workers."""
        self._timer.stop()
        if self.runner is not None:
            self.runner.request_detach()
        self._pool.waitForDone(15_000)
        if self.manager is not None:
            self.manager.close()
            self.manager = None


def _caps(budget: QLineEdit, hours: QLineEdit) -> tuple[tuple[str, QLineEdit], tuple[str, QLineEdit]]:
    return ("budget-usd", budget), ("max-gpu-hours", hours)


def _amount(flag: str, edit: QLineEdit) -> float | None:
    """A cap typed in the form: empty is none; else the planner's parser and range for the flag."""
    text = edit.text().strip()
    return float(parse_value(flag, text)) if text else None


def _message(exc: Exception) -> str:
    if isinstance(exc, PlanInputError):
        text = str(exc)
        return text if text.startswith(("-", exc.field)) else f"{exc.field}: {exc.message}"
    return str(exc)
