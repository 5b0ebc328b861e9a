"""The Runs pane: launch runs (or a demo run), watch them live, stop, kill, preempt and resume them.

Data flow: the launcher's watcher threads call :class:`RunController`'s callbacks, which re-emit the
records as queued signals; :meth:`RunsPane._on_records` (GUI thread) appends them to the run's ring
buffers (:class:`RunTelemetry`); one 15 Hz timer redraws the plots of the selected run and a 1 s timer
updates the text (progress, ETA, spend, state, alerts). Blocking work (launch, stop, resume, database
queries for alerts) runs on the controller's worker thread.

Its parts live beside it: launching and "Measure speed" (:mod:`run_launching`, mixed in), the words of
the labels (:mod:`run_status_text`), the worker's history reads (:mod:`runs_history`), the failure panel
(:mod:`run_failure_panel`), one run's entry (:mod:`run_entry`) and the demo run (:mod:`run_demo`).

Signals:
    runFinished(int run_id)  a run ended (finished, failed, stopped, killed); the History pane reloads
    alertSettingsChanged()   the user changed the alert settings (``services.alert_settings``)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.run_status import ACTIVE_STATES, FINAL_STATES
from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog
from gpuplanner.ui.dialogs.passphrase_dialog import PassphrasePrompter
from gpuplanner.ui.runs.alert_banner import AlertBanner
from gpuplanner.ui.runs.gpu_table import GpuTable
from gpuplanner.ui.runs.launch_request import LaunchRequest
from gpuplanner.ui.runs.live_plots import LivePlots
from gpuplanner.ui.runs.run_controller import RunController
from gpuplanner.ui.runs.run_demo import DEMO_PROMISE, DEMO_STEPS, demo_request
from gpuplanner.ui.runs.run_entry import RunEntry
from gpuplanner.ui.runs.run_failure_panel import FailurePanel
from gpuplanner.ui.runs.run_launching import RunLaunching
from gpuplanner.ui.runs.run_status_text import (
    NO_RUN,
    elapsed_eta,
    failure_text,
    progress,
    spend_line,
    state_line,
    waiting_text,
)
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from gpuplanner.ui.runs.runs_history import Found, LastEnded, run_alerts, runs_to_reattach
from gpuplanner.ui.widgets.log_view import LogView
from gpuplanner.ui.widgets.time_bars import TimeBars

REDRAW_HZ = 15
ALERT_EVERY_S = 5.0
WINDOWS = (("Last 10 minutes", 600.0), ("Last hour", 3600.0), ("Full history", 0.0))
PLOTS_MIN_HEIGHT = 300  # six plots in two rows: about 110 px of data each at the least
PLOTS_ROOM = 470  # what the plots keep when the GPUs' table asks for rows: about 110 px of data at 1280x800
GPU_TABLE_HEIGHT = 130  # before the first rows: the header, three rows and the note (the table then asks for its rows)


class RunsPane(RunLaunching, QWidget):
    """See the module docstring."""

    runFinished = Signal(int)
    speedMeasured = Signal(object)  # a trainer bench result (recorded for the planner when on a GPU)
    alertSettingsChanged = Signal()  # the user changed the alert settings (services.alert_settings)

    def __init__(self, services: Any, parent: QWidget | None = None, controller: RunController | None = None) -> None:
        super().__init__(parent)
        self.services = services
        self.runs: dict[int, RunEntry] = {}
        self._pending: dict[int, list[list[dict[str, Any]]]] = {}
        self._pending_status: dict[int, Any] = {}
        self._shut_down = False
        self._measure_dialog: LaunchDialog | None = None  # a launch dialog waiting for a measurement
        self._launching: str | None = None  # the host a launch is under way on (no run id yet)
        # The window's shared controller (one RunManager for every pane), else one of its own (standalone).
        self._owns_controller = controller is None
        if controller is None:
            self.passphrase = PassphrasePrompter(self)  # asks for encrypted keys' passphrases (worker thread)
            controller = RunController(self._make_manager, self, passphrase=self.passphrase)
        self.controller = controller
        self.controller.recordsArrived.connect(self._on_records)
        self.controller.statusChanged.connect(self._on_status)
        self.controller.runLaunched.connect(self._on_run_launched)
        self._build()
        self.redraw_timer = QTimer(self)
        self.redraw_timer.setInterval(int(1000 / REDRAW_HZ))
        self.redraw_timer.timeout.connect(self._on_redraw_timer)
        self.redraw_timer.start()
        self.text_timer = QTimer(self)
        self.text_timer.setInterval(1000)
        self.text_timer.timeout.connect(self._on_text_timer)
        self.text_timer.start()
        self._update_text()
        QTimer.singleShot(0, self._reattach)

    def _make_manager(self) -> Any:
        from gpuplanner.launch.manager import RunManager

        return RunManager(self.services.db_path, passphrase_callback=self.passphrase)

    # -- layout ---------------------------------------------------------------------------------
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.new_button = QPushButton("New run…")
        self.new_button.setToolTip("Launch the bundled trainer on this machine or an SSH host")
        self.new_button.clicked.connect(self._on_new_clicked)
        self.demo_button = QPushButton("Try a demo run")
        self.demo_button.setToolTip(
            f"Train a tiny GPT-2 for {DEMO_STEPS:,} steps on this machine ({DEMO_PROMISE}) to see the live plots"
        )
        self.demo_button.clicked.connect(self.start_demo_run)
        self.window_combo = QComboBox()
        for label, seconds in WINDOWS:
            self.window_combo.addItem(label, seconds)
        self.window_combo.setToolTip("Scroll with the newest data, or show the whole run")
        self.window_combo.currentIndexChanged.connect(self._on_window_changed)
        self.message_label = QLabel()
        self.message_label.setStyleSheet("color: #b00020")
        self.message_label.setWordWrap(True)
        top.addWidget(self.new_button)
        top.addWidget(self.demo_button)
        top.addWidget(self.message_label, 1)
        self.alert_settings_button = QPushButton("Alert settings…")
        self.alert_settings_button.setToolTip(
            "When an alert fires: utilisation threshold and window, memory, data wait…"
        )
        self.alert_settings_button.clicked.connect(self._on_alert_settings_clicked)
        top.addWidget(QLabel("Plots:"))
        top.addWidget(self.window_combo)
        top.addWidget(self.alert_settings_button)
        layout.addLayout(top)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.run_list = QListWidget()
        self.run_list.setMinimumWidth(170)
        # a long run name wraps instead of running off the list (no sideways scrolling)
        self.run_list.setWordWrap(True)
        self.run_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.run_list.setResizeMode(QListView.ResizeMode.Adjust)
        self.run_list.currentItemChanged.connect(self._on_current_changed)
        splitter.addWidget(self.run_list)
        right = QWidget()
        rlay = QVBoxLayout(right)
        rlay.setContentsMargins(4, 0, 0, 0)
        head = QHBoxLayout()
        self.title_label = QLabel("No run yet")
        self.title_label.setStyleSheet("font-weight: bold; font-size: 13pt")
        self.state_label = QLabel()
        self.simulated_badge = QLabel("SIMULATED GPU")  # short: never cut at 1024 px wide (the tooltip says why)
        self.simulated_badge.setStyleSheet(
            "background: #ffe0b2; color: #7a3e00; border: 1px solid #e08a00;"
            " border-radius: 3px; padding: 1px 6px; font-weight: bold"
        )
        self.simulated_badge.setToolTip(
            "The trainer found no NVIDIA GPU; utilisation, memory and power follow the "
            "training loop's busy time and are not measurements"
        )
        self.simulated_badge.setVisible(False)
        head.addWidget(self.title_label)
        head.addWidget(self.state_label)
        head.addStretch(1)
        head.addWidget(self.simulated_badge)
        rlay.addLayout(head)
        prog = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("—")
        self.eta_label = QLabel("ETA —")
        self.spend_label = QLabel("Spend —")
        prog.addWidget(self.progress, 2)
        prog.addWidget(self.eta_label)
        prog.addWidget(self.spend_label, 1)
        rlay.addLayout(prog)
        self.alert_banner = AlertBanner()
        rlay.addWidget(self.alert_banner)
        self.time_bars = TimeBars(compact=True)
        self.time_bars.setToolTip("Where this run's billed time went so far (from the history)")
        self.time_bars.setVisible(False)
        rlay.addWidget(self.time_bars)
        self.failure_panel = FailurePanel()
        self.failure_label, self.failure_text = self.failure_panel.label, self.failure_panel.text
        rlay.addWidget(self.failure_panel)
        self.plots = LivePlots()
        self.plots.setMinimumHeight(PLOTS_MIN_HEIGHT)
        self.gpu_table = GpuTable()
        self.gpu_table.setVisible(False)
        self.gpu_table.room_above = PLOTS_ROOM
        # the plots take the height; the GPUs' table under them keeps a few rows (drag the handle for more)
        self.plots_split = QSplitter(Qt.Orientation.Vertical)
        self.plots_split.setChildrenCollapsible(False)
        self.plots_split.addWidget(self.plots)
        self.plots_split.addWidget(self.gpu_table)
        self.plots_split.setStretchFactor(0, 1)
        self.plots_split.setStretchFactor(1, 0)
        self.plots_split.setSizes([10_000, GPU_TABLE_HEIGHT])
        # one honest state before there is data: words in place of the plots, never empty 0-1 axes
        self.waiting_label = QLabel(NO_RUN)
        self.waiting_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.waiting_label.setWordWrap(True)
        self.waiting_label.setStyleSheet("color: palette(placeholder-text); font-size: 12pt")
        self.plots_stack = QStackedWidget()
        self.plots_stack.addWidget(self.plots_split)
        self.plots_stack.addWidget(self.waiting_label)
        self.plots_stack.setCurrentWidget(self.waiting_label)
        self.log_view = LogView(lambda: self.services.db_path)  # the selected run's job output
        self.detail_tabs = QTabWidget()
        self.detail_tabs.setDocumentMode(True)
        self.detail_tabs.addTab(self.plots_stack, "Plots")
        self.detail_tabs.addTab(self.log_view, "Logs")
        rlay.addWidget(self.detail_tabs, 1)
        buttons = QHBoxLayout()
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Graceful stop: the trainer checkpoints and exits (resume it later)")
        self.kill_button = QPushButton("Kill")
        self.kill_button.setToolTip("Kill the process group now: work since the last checkpoint is lost")
        self.preempt_button = QPushButton("Simulate preemption")
        self.preempt_button.setToolTip("Stop like a spot interruption, then resume automatically after 5 s")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Restart from the newest checkpoint in the run directory")
        self.folder_button = QPushButton("Open run folder")
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.kill_button.clicked.connect(self._on_kill_clicked)
        self.preempt_button.clicked.connect(self._on_preempt_clicked)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.folder_button.clicked.connect(self._on_folder_clicked)
        for b in (self.stop_button, self.kill_button, self.preempt_button, self.resume_button, self.folder_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        rlay.addLayout(buttons)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([200, 1000])
        layout.addWidget(splitter, 1)

    # -- public API -----------------------------------------------------------------------------
    def _say(self, text: str, error: bool = True) -> None:
        """The line above the plots: problems in red, progress and results in the normal colour."""
        self.message_label.setStyleSheet("color: #b00020" if error else "")
        self.message_label.setText(text)

    def start_demo_run(self) -> None:
        """Launch the tiny demo run on this machine."""
        self.launch(demo_request())

    def has_live_runs(self) -> bool:
        return bool(self.controller.live_runs())

    def shutdown(self, stop_runs: bool) -> None:
        """Stop (gracefully) or detach every live run, stop the timers and the worker thread."""
        if self._shut_down:
            return
        self._shut_down = True
        self.redraw_timer.stop()
        self.text_timer.stop()
        self.log_view.shutdown()
        if self._owns_controller:  # the window shuts its shared controller down itself
            self.controller.shutdown(stop_runs)

    def current(self) -> RunEntry | None:
        item = self.run_list.currentItem()
        return None if item is None else self.runs.get(item.data(Qt.ItemDataRole.UserRole))

    # -- launching ------------------------------------------------------------------------------
    def _add_entry(
        self,
        run_id: int,
        name: str,
        host: str,
        telemetry: RunTelemetry | None = None,
        request: LaunchRequest | None = None,
    ) -> RunEntry:
        entry = self.runs.get(run_id)
        if entry is not None:
            return entry
        item = QListWidgetItem()
        item.setData(Qt.ItemDataRole.UserRole, run_id)
        tel = telemetry or RunTelemetry(run_id)
        tel.run_id = run_id
        if request is not None:
            tel.budget_usd = request.budget_usd
            tel.planned_cost_usd = request.planned_cost_usd
            tel.price_per_gpu_hour = request.price_per_gpu_hour
        entry = RunEntry(run_id, tel, name, host, item, request=request)
        self.runs[run_id] = entry
        self.run_list.insertItem(0, item)
        for records in self._pending.pop(run_id, []):
            tel.add_records(records)
        status = self._pending_status.pop(run_id, None)
        if status is not None:
            self._apply_status(entry, status)
        self._update_item(entry)
        self.run_list.setCurrentItem(item)
        return entry

    @Slot(int, str, str)
    def _on_run_launched(self, run_id: int, name: str, host: str) -> None:
        """A run started by another pane (a search's trial) through the shared controller: shown here too."""
        if not self._shut_down and run_id not in self.runs:
            self._add_entry(run_id, name, host)
            self._update_text()

    def _reattach(self) -> None:
        """Pick up runs a previous session left running (they went on detached): backfill, then follow."""
        if self._shut_down:
            return
        db_path = self.services.db_path

        def job(manager: Any) -> tuple[list[Found], LastEnded | None]:
            return runs_to_reattach(db_path, manager, self.controller.on_records, self.controller.on_status)

        self.controller.submit(
            job, self._on_reattached, lambda exc: self._say(f"Could not reattach to running runs: {exc}")
        )

    def _on_reattached(self, answer: tuple[list[Found], LastEnded | None]) -> None:
        found, last = answer
        if last is not None and last[0] not in self.runs:
            run_id, name, host, tel, state, failure = last
            entry = self._add_entry(run_id, name, host, telemetry=tel)
            entry.state, entry.finished_emitted = state, True
            entry.failure, entry.failure_requested = failure, failure is not None
            if failure and isinstance(failure.get("exit_code"), int):
                entry.exit_code = failure["exit_code"]
            self._update_item(entry)
            self._update_text()
        for run_id, name, host, tel in found:  # a running run is what the pane shows first
            self._add_entry(run_id, name, host, telemetry=tel)

    # -- producers (slots for the controller's queued signals) ----------------------------------
    @Slot(int, object)
    def _on_records(self, run_id: int, records: list[dict[str, Any]]) -> None:
        entry = self.runs.get(run_id)
        if entry is None:
            self._pending.setdefault(run_id, []).append(records)
            return
        entry.telemetry.add_records(records)

    @Slot(object)
    def _on_status(self, status: Any) -> None:
        entry = self.runs.get(status.run_id)
        if entry is None:
            self._pending_status[status.run_id] = status
            return
        self._apply_status(entry, status)
        self._update_item(entry)
        if entry is self.current():
            self._update_text()

    def _apply_status(self, entry: RunEntry, status: Any) -> None:
        entry.status = status
        entry.state = status.state
        entry.run_dir = status.run_dir or entry.run_dir
        entry.exit_code = status.exit_code
        entry.host = status.host or entry.host
        if status.state in FINAL_STATES:
            if not entry.finished_emitted:
                entry.finished_emitted = True
                entry.alerts_checked = 0.0
                if status.state == "failed" and not entry.failure_requested:
                    entry.failure_requested = True
                    self._load_failure(entry)  # runFinished once the failure is read
                else:
                    self.runFinished.emit(entry.run_id)
        elif status.state in ACTIVE_STATES:
            entry.finished_emitted = False
            entry.failure_requested, entry.failure = False, None

    def _load_failure(self, entry: RunEntry) -> None:
        """The failed run's error and stderr tail, as the launcher recorded them, from the history (worker thread)."""
        run_id = entry.run_id

        def job(manager: Any) -> dict[str, Any]:
            return manager.failure(run_id) or {"error": None, "stderr_tail": ""}

        def done(detail: dict[str, Any]) -> None:
            entry.failure = detail
            if entry is self.current():
                self._update_text()
            self.runFinished.emit(entry.run_id)  # the History pane reloads, the failure stored

        def failed(exc: Exception) -> None:
            entry.failure = {"error": entry.telemetry.end_error, "stderr_tail": "", "stderr_problem": str(exc)}
            if entry is self.current():
                self._update_text()
            self.runFinished.emit(entry.run_id)

        if not self._shut_down:
            self.controller.submit(job, done, failed)

    def _update_failure(self, entry: RunEntry | None) -> None:
        """The failure panel: why the run failed (the error) and the last lines of the trainer's stderr."""
        if entry is None or entry.state != "failed":
            self.failure_panel.setVisible(False)
            return
        self.failure_panel.show_failure(*failure_text(entry.failure, entry.exit_code, entry.telemetry.end_error))

    # -- timers ---------------------------------------------------------------------------------
    @Slot()
    def _on_redraw_timer(self) -> None:
        entry = self.current()
        self.plots.redraw(entry.telemetry if entry else None)

    @Slot()
    def _on_text_timer(self) -> None:
        self._update_text()
        entry = self.current()
        if entry is not None and time.monotonic() - entry.alerts_checked > ALERT_EVERY_S:
            self._check_alerts(entry)

    def _check_alerts(self, entry: RunEntry) -> None:
        """Alerts from the history's rules (alerts.run_alerts) on the worker thread, plus over-plan."""
        entry.alerts_checked = time.monotonic()
        db_path, run_id = self.services.db_path, entry.run_id

        settings = self.services.alert_settings

        def job(manager: Any) -> tuple[list[tuple[str, ...]], float | None, Any]:
            return run_alerts(db_path, run_id, settings)

        def done(result: tuple[list[tuple[str, ...]], float | None, Any]) -> None:
            alerts, planned, breakdown = result
            if planned and not entry.telemetry.planned_cost_usd:
                entry.telemetry.planned_cost_usd = planned
            entry.alerts = alerts
            entry.time_breakdown = breakdown
            if entry is self.current():
                self._update_alerts(entry)
                self._update_time_bars(entry)

        if not self._shut_down:
            self.controller.submit(job, done, lambda exc: None)

    def _update_alerts(self, entry: RunEntry) -> None:
        alerts: list[tuple[str, ...]] = list(entry.alerts)
        over = entry.telemetry.over_plan()
        if over:
            alerts.append(("over_plan", over))
        self.alert_banner.set_alerts(alerts)

    def _update_time_bars(self, entry: RunEntry | None) -> None:
        """The run's time breakdown bar: once the trainer reported phases, or the run has ended."""
        breakdown = entry.time_breakdown if entry is not None else None
        show = breakdown is not None and (breakdown.recorded or entry.state in FINAL_STATES)  # type: ignore[union-attr]
        if show and breakdown is not None:
            self.time_bars.set_bars([("Where the time went", breakdown)])
        self.time_bars.setVisible(bool(show))

    def _update_item(self, entry: RunEntry) -> None:
        entry.item.setText(f"#{entry.run_id} {entry.name}\n{entry.host} · {entry.state}")
        entry.item.setToolTip(entry.item.text())

    def _update_text(self) -> None:
        entry = self.current()
        for button in (self.stop_button, self.kill_button, self.preempt_button, self.resume_button, self.folder_button):
            button.setEnabled(False)
        self._update_failure(entry)
        waiting = waiting_text(entry.state if entry else None, entry.telemetry if entry else None, self._launching)
        self.waiting_label.setText(waiting or "")
        self.plots_stack.setCurrentWidget(self.waiting_label if waiting else self.plots_split)
        if entry is None:
            self.title_label.setText(f"Starting on {self._launching}…" if self._launching else "No run yet")
            self.state_label.setText("")
            self.gpu_table.setVisible(False)
            self.simulated_badge.setVisible(False)
            self.alert_banner.set_alerts([])
            return
        tel = entry.telemetry
        rows = tel.gpu_table()
        self.gpu_table.setVisible(bool(rows) and not waiting)
        self.gpu_table.show_rows(rows, ended=entry.state in FINAL_STATES)  # it asks the splitter for its rows
        self.title_label.setText(f"#{entry.run_id} {entry.name}")
        queue = getattr(entry.status, "queue", None)  # a Slurm job: its wait in the queue and the reason
        self.state_label.setText(state_line(entry.host, entry.state, tel, entry.exit_code, queue))
        self.simulated_badge.setVisible(bool(tel.simulated))
        value, text = progress(tel, entry.state)
        self.progress.setValue(value)
        self.progress.setFormat(text)
        self.eta_label.setText(elapsed_eta(tel, entry.state))
        self.spend_label.setText(spend_line(tel, entry.state))
        active = entry.state in ACTIVE_STATES
        self.stop_button.setEnabled(active or entry.state in ("preempted",))
        self.kill_button.setEnabled(active or entry.state in ("preempted", "stopping"))
        self.preempt_button.setEnabled(entry.state == "running")
        resumable = entry.state in ("stopped", "preempted", "failed", "killed")
        self.resume_button.setEnabled(resumable and tel.checkpoints > 0)
        self.resume_button.setToolTip(
            "Restart from the newest checkpoint in the run directory"
            if tel.checkpoints or not resumable
            else "No checkpoint was written: there is nothing to resume from (launch the run again)"
        )
        self.folder_button.setEnabled(bool(entry.run_dir))
        self._update_alerts(entry)

    # -- user actions ---------------------------------------------------------------------------
    @Slot()
    def _on_alert_settings_clicked(self) -> None:
        from gpuplanner.ui.dialogs.alert_settings_dialog import edit_alert_settings

        chosen = edit_alert_settings(self.services.alert_settings, self)
        if chosen is not None:
            self.apply_alert_settings(chosen)

    def apply_alert_settings(self, settings: Any) -> None:
        """Evaluate under new alert settings from now on (the current run at once)."""
        self.services.alert_settings = settings
        self.alertSettingsChanged.emit()
        entry = self.current()
        if entry is not None:
            self._check_alerts(entry)

    @Slot()
    def _on_new_clicked(self) -> None:
        self.open_launch_dialog({})

    @Slot(int)
    def _on_window_changed(self, index: int) -> None:
        seconds = self.window_combo.itemData(index)
        self.plots.set_follow(bool(seconds), seconds or None)
        self._on_redraw_timer()

    @Slot(QListWidgetItem, QListWidgetItem)
    def _on_current_changed(self, current: QListWidgetItem | None, previous: QListWidgetItem | None) -> None:
        entry = self.current()
        self.plots.set_telemetry(entry.telemetry if entry else None)
        self.log_view.show_run(entry.run_id if entry else None)
        self._update_time_bars(entry)
        self._update_text()
        if entry is not None:
            self._check_alerts(entry)

    def _control(self, action: str) -> None:
        entry = self.current()
        if entry is None:
            return
        run_id = entry.run_id
        calls = {
            "stop": lambda m: m.stop(run_id, by="window"),
            "kill": lambda m: m.kill(run_id),
            "preempt": lambda m: m.simulate_preemption(run_id),
            "resume": lambda m: m.resume(run_id),
        }
        self._say("")
        if action == "resume":
            entry.finished_emitted = False
        if action == "stop":  # the plots call the trainer's next "preempted" a stop (the history stores it so)
            entry.telemetry.user_stopped = True
        self.controller.submit(calls[action], None, lambda exc: self._say(f"{action.capitalize()} failed: {exc}"))

    @Slot()
    def _on_stop_clicked(self) -> None:
        self._control("stop")

    @Slot()
    def _on_kill_clicked(self) -> None:
        self._control("kill")

    @Slot()
    def _on_preempt_clicked(self) -> None:
        self._control("preempt")

    @Slot()
    def _on_resume_clicked(self) -> None:
        self._control("resume")

    @Slot()
    def _on_folder_clicked(self) -> None:
        entry = self.current()
        if entry is None or not entry.run_dir:
            return
        if Path(entry.run_dir).is_dir():
            QDesktopServices.openUrl(QUrl.fromLocalFile(entry.run_dir))
        else:
            self.message_label.setStyleSheet("")
            self._say(f"Run folder on {entry.host}: {entry.run_dir}", error=False)
