"""The Runs pane: launch runs (or a demo run), watch them live, stop, kill, preempt and resume them.

Data flow: the launcher's watcher threads call :class:`RunController`'s callbacks, which re-emit the
records as queued signals; :meth:`RunsPane._on_records` (GUI thread) appends them to the run's ring
buffers (:class:`RunTelemetry`); one 15 Hz timer redraws the plots of the selected run and a 1 s timer
updates the text (progress, ETA, spend, state, alerts). Blocking work (launch, stop, resume, database
queries for alerts) runs on the controller's worker thread.

Signals:
    runFinished(int run_id)  a run ended (finished, failed, stopped, killed); the History pane reloads
    alertSettingsChanged()   the user changed the alert settings (``services.alert_settings``)
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.run_status import ACTIVE_STATES, ENDED_STATES, FINAL_STATES
from gpuplanner.history.slurm_queue import queue_text
from gpuplanner.ui.alert_banner import AlertBanner
from gpuplanner.ui.gpu_table import GpuTable
from gpuplanner.ui.human import NO_PRICE, human_duration, human_money
from gpuplanner.ui.launch_dialog import LaunchDialog, LaunchRequest, demo_dir
from gpuplanner.ui.live_plots import LivePlots
from gpuplanner.ui.passphrase_dialog import PassphrasePrompter
from gpuplanner.ui.run_controller import RunController
from gpuplanner.ui.run_telemetry import RunTelemetry
from gpuplanner.ui.time_bars import TimeBars
from gpuplanner.ui.trust_dialog import ask_trust, show_changed_key

REDRAW_HZ = 15
ALERT_EVERY_S = 5.0
WINDOWS = (("Last 10 minutes", 600.0), ("Last hour", 3600.0), ("Full history", 0.0))
PLOTS_MIN_HEIGHT = 300  # six plots in two rows: about 110 px of data each at the least
GPU_TABLE_HEIGHT = 130  # the header, three GPUs' rows and the note under them (drag the handle for more)


DEMO_STEPS_KEY = "demo/steps"
DEMO_STEPS = 3000  # about a minute and a half on one CPU core: time to try Stop and Simulate preemption


def demo_steps() -> int:
    """How many steps the demo run trains (the settings' ``demo/steps``, else :data:`DEMO_STEPS`)."""
    from gpuplanner.ui.launch_dialog import _settings_store

    try:
        stored = _settings_store().value(DEMO_STEPS_KEY, DEMO_STEPS)
        steps = int(stored) if isinstance(stored, (int, float, str)) else DEMO_STEPS
    except (TypeError, ValueError):
        return DEMO_STEPS
    return max(10, steps)


def demo_request(max_steps: int | None = None) -> LaunchRequest:
    """The demo run: the shipped tiny GPT-2 config and corpus on this machine, fast telemetry; it trains
    ``max_steps`` (default :func:`demo_steps`), checkpointing every 250 steps so Resume has one to use."""
    if max_steps is None:
        max_steps = demo_steps()
    every = str(max(10, min(250, max_steps // 4)))
    demo = demo_dir()
    args = [
        "--model-config",
        str(demo / "tiny-gpt2.json"),
        "--data",
        str(demo / "corpus"),
        "--seq-len",
        "64",
        "--micro-batch",
        "8",
        "--max-steps",
        str(max_steps),
        "--lr",
        "2e-3",
        "--warmup-steps",
        "20",
        "--eval-every-steps",
        every,
        "--eval-batches",
        "2",
        "--checkpoint-every-steps",
        every,
        "--checkpoint-every-minutes",
        "0",
        "--log-interval-s",
        "0.25",
        "--gpu-interval-s",
        "0.5",
    ]
    return LaunchRequest(host_name="local", trainer_args=args, name="Demo run (tiny GPT-2)", gpus=1)


def _money(value: float | None) -> str:
    return "—" if value is None else human_money(value)


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else human_duration(seconds)


@dataclass
class RunEntry:
    """What the pane knows about one run it shows."""

    run_id: int
    telemetry: RunTelemetry
    name: str
    host: str
    item: QListWidgetItem
    state: str = "starting"
    status: Any = None
    request: LaunchRequest | None = None
    run_dir: str | None = None
    exit_code: int | None = None
    finished_emitted: bool = False
    alerts: list[tuple[str, ...]] = field(default_factory=list)
    alerts_checked: float = 0.0
    failure: dict[str, Any] | None = None  # error and stderr tail of a failed run (history/failures.py)
    time_breakdown: Any = None  # where the billed time went (history/time_breakdown.py), from the history
    failure_requested: bool = False


class RunsPane(QWidget):
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
        self.demo_button.setToolTip("Train a tiny GPT-2 on this machine for a minute to see the live plots")
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
        self.title_label = QLabel("No run yet: launch one, or try the demo run.")
        self.title_label.setStyleSheet("font-weight: bold; font-size: 13pt")
        self.state_label = QLabel()
        self.simulated_badge = QLabel("SIMULATED GPU telemetry: no GPU on this host")
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
        self.failure_panel = QWidget()
        flay = QVBoxLayout(self.failure_panel)
        flay.setContentsMargins(0, 0, 0, 0)
        self.failure_label = QLabel()
        self.failure_label.setWordWrap(True)
        self.failure_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.failure_label.setStyleSheet("color: #b00020; font-weight: bold")
        self.failure_text = QPlainTextEdit()
        self.failure_text.setReadOnly(True)
        self.failure_text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.failure_text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.failure_text.setMaximumHeight(150)
        self.failure_text.setToolTip("The last lines the trainer wrote to stderr on the host (kept in the history)")
        flay.addWidget(self.failure_label)
        flay.addWidget(self.failure_text)
        self.failure_panel.setVisible(False)
        rlay.addWidget(self.failure_panel)
        self.plots = LivePlots()
        self.plots.setMinimumHeight(PLOTS_MIN_HEIGHT)
        self.gpu_table = GpuTable()
        self.gpu_table.setVisible(False)
        # the plots take the height; the GPUs' table under them keeps a few rows (drag the handle for more)
        self.plots_split = QSplitter(Qt.Orientation.Vertical)
        self.plots_split.setChildrenCollapsible(False)
        self.plots_split.addWidget(self.plots)
        self.plots_split.addWidget(self.gpu_table)
        self.plots_split.setStretchFactor(0, 1)
        self.plots_split.setStretchFactor(1, 0)
        self.plots_split.setSizes([10_000, GPU_TABLE_HEIGHT])
        rlay.addWidget(self.plots_split, 1)
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
    def hosts_for_dialog(self) -> list[tuple[str, str, float | None]]:
        from gpuplanner.launch.hosts import list_hosts

        return [(h.name, h.display_name, h.price_usd_per_gpu_hour) for h in list_hosts(self.services.db_path)]

    def make_launch_dialog(self, settings: dict[str, Any]) -> LaunchDialog:
        """The launch dialog for ``settings``. A plan's (they carry its ``plan_id``) get a host with the plan's
        GPUs (:func:`~gpuplanner.ui.plan_launch.with_host`) and no demo corpus; others default to the demo's."""
        from gpuplanner.launch.hosts import list_hosts
        from gpuplanner.ui.plan_launch import with_host

        hosts = list_hosts(self.services.db_path)
        from_plan = settings.get("plan_id") is not None
        if from_plan:
            settings = with_host(settings, hosts, self.services.catalog)
        return LaunchDialog(
            [(h.name, h.display_name, h.price_usd_per_gpu_hour) for h in hosts],
            settings,
            self,
            on_measure=self.measure,
            defaults={} if from_plan else {"data": [str(demo_dir() / "corpus")]},
            on_check=self.check_launch,
        )

    def check_launch(self, values: dict[str, Any], dialog: LaunchDialog) -> None:
        """The pre-launch checks (``RunManager.preflight``) on the worker thread; the answer goes to ``dialog``."""
        host = values.get("host")

        def job(manager: Any) -> list[str]:
            return list(manager.preflight(str(host), values))

        def answer(problems: list[str], note: str | None = None) -> None:
            try:
                if dialog.isVisible():
                    dialog.check_finished(problems, note)
            except RuntimeError:  # the dialog is gone
                pass

        self.controller.submit(job, answer, lambda exc: answer([], f"Could not check the settings on {host}: {exc}"))

    def open_launch_dialog(self, settings: dict[str, Any]) -> None:
        """The launch dialog prefilled from the Plan pane's settings; launches on OK."""
        dialog = self.make_launch_dialog(settings)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            request = dialog.request()
            if request.planned_cost_usd is None and settings:
                request.planned_cost_usd = settings.get("planned_cost_usd")
            self.launch(request)

    def measure(self, request: LaunchRequest, dialog: LaunchDialog | None = None) -> None:
        """``trainer bench`` of the request's settings on its host, on a thread of its own; the result goes
        to the message line (and to ``dialog`` when it is still open) and to ``speedMeasured`` (the Plan
        pane recalculates with it)."""
        self._measure_dialog = dialog
        self._say(f"Measuring the speed on {request.host_name} (trainer bench, about a minute)…", error=False)
        self.controller.bench(
            request,
            lambda result: self._on_measured(result, request),
            lambda exc: self._on_measure_failed(exc, request),
        )

    def _say(self, text: str, error: bool = True) -> None:
        """The line above the plots: problems in red, progress and results in the normal colour."""
        self.message_label.setStyleSheet("color: #b00020" if error else "")
        self.message_label.setText(text)

    def _measurement_answer(self, text: str, error: bool) -> None:
        """A measurement's outcome: on the message line, and in the launch dialog if it is still open."""
        self._say(text, error)
        dialog, self._measure_dialog = self._measure_dialog, None
        if dialog is not None:
            try:
                if dialog.isVisible():
                    dialog.show_measurement(text, error)
            except RuntimeError:  # the dialog is gone
                pass

    def _on_measured(self, result: dict[str, Any], request: LaunchRequest) -> None:
        mfu = f", MFU {result['mfu']:.1%}" if isinstance(result.get("mfu"), (int, float)) else ""
        text = (
            f"Measured on {request.host_name} ({result.get('device')}, {result.get('precision')}): "
            f"{result.get('tokens_per_s', 0):,.0f} tokens/s, {result.get('step_time_s', 0) * 1000:,.0f} ms "
            f"per step{mfu}. "
        )
        if "recorded_id" in result and result.get("catalog_knows_gpu") is False:
            text += (
                f"Recorded as bench result #{result['recorded_id']}, but the catalog knows no GPU named "
                f"{result['recorded_gpu_type']!r}, so the Plan pane cannot use it "
                "(`gpuplanner hosts bench --gpu-type` records it under a catalog name)."
            )
        elif "recorded_id" in result:
            text += (
                f"Recorded as bench result #{result['recorded_id']} for {result['recorded_gpu_type']}: "
                "the Plan pane uses it for this model, method, precision and sequence length."
            )
        else:
            text += f"Not recorded ({result.get('not_recorded')})."
        self._measurement_answer(text, error=False)
        self.speedMeasured.emit(result)

    def _on_measure_failed(self, exc: Exception, request: LaunchRequest) -> None:
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        if isinstance(exc, UnknownHostKey):
            self._say("")
            if ask_trust(exc, self):
                self.measure(request, self._measure_dialog)
            else:
                self._measurement_answer(f"Not measured: the key of {exc.hostname} was not trusted.", error=True)
            return
        if isinstance(exc, ChangedHostKey):
            self._measurement_answer(f"Refused: the host key of {exc.hostname} changed.", error=True)
            show_changed_key(exc, self)
            return
        self._measurement_answer(f"Measuring failed: {exc}", error=True)

    def start_demo_run(self) -> None:
        """Launch the tiny demo run on this machine."""
        self.launch(demo_request())

    def launch(self, request: LaunchRequest) -> None:
        """Launch on the worker thread; a new host key is asked about here, then the launch is retried."""
        self._say(f"Launching on {request.host_name}…", error=False)
        self.controller.launch(
            request, lambda run_id: self._on_launched(run_id, request), lambda exc: self._on_launch_failed(exc, request)
        )

    def has_live_runs(self) -> bool:
        return bool(self.controller.live_runs())

    def shutdown(self, stop_runs: bool) -> None:
        """Stop (gracefully) or detach every live run, stop the timers and the worker thread."""
        if self._shut_down:
            return
        self._shut_down = True
        self.redraw_timer.stop()
        self.text_timer.stop()
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

    def _on_launched(self, run_id: int, request: LaunchRequest) -> None:
        self._say("")
        self._add_entry(run_id, request.name or f"Run {run_id}", request.host_name, request=request)
        self._update_text()

    def _on_launch_failed(self, exc: Exception, request: LaunchRequest) -> None:
        from gpuplanner.launch.hosts import HostError
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        if isinstance(exc, UnknownHostKey):
            self._say("")
            if ask_trust(exc, self):
                self.launch(request)
            else:
                self._say(f"Not launched: the key of {exc.hostname} was not trusted.")
            return
        if isinstance(exc, ChangedHostKey):
            self._say(f"Refused: the host key of {exc.hostname} changed.")
            show_changed_key(exc, self)
            return
        prefix = "Host problem" if isinstance(exc, HostError) else "Launch failed"
        self._say(f"{prefix}: {exc}")

    def _reattach(self) -> None:
        """Pick up runs a previous session left running (they went on detached): backfill, then follow."""
        if self._shut_down:
            return
        db_path = self.services.db_path

        def job(manager: Any) -> tuple[list[tuple[int, str, str, RunTelemetry]], Any]:
            from gpuplanner.history.db import connect
            from gpuplanner.history.failures import load_failure
            from gpuplanner.history.runs import list_runs
            from gpuplanner.history.stops import stopped_by_user

            db = connect(db_path)
            try:
                last = None  # the newest run launched from here that ended: shown (selected) when none runs
                for run in list_runs(db):
                    if run.status == "running" or not (run.launch or {}).get("launch"):
                        continue
                    tel = RunTelemetry(run.id)
                    tel.planned_cost_usd = run.planned_cost_usd
                    tel.price_per_gpu_hour = run.price_usd_per_gpu_hour
                    tel.backfill_from_history(db, run.id)
                    state = ENDED_STATES.get(run.status, run.status)
                    if run.status == "preempted" and stopped_by_user(db, run.id):  # recorded by an older version
                        state = "stopped"
                    failure = load_failure(db, run.id) if run.status == "failed" else None
                    last = (run.id, run.name or f"Run {run.id}", run.host or "?", tel, state, failure)
                    break
                found = []
                for run in list_runs(db, status="running"):
                    if not (run.launch or {}).get("launch"):
                        continue
                    tel = RunTelemetry(run.id)
                    tel.planned_cost_usd = run.planned_cost_usd
                    tel.price_per_gpu_hour = run.price_usd_per_gpu_hour
                    tel.backfill_from_history(db, run.id)
                    try:
                        manager.attach(
                            run.id, on_records=self.controller.on_records, on_status=self.controller.on_status
                        )
                    except Exception:
                        continue
                    found.append((run.id, run.name or f"Run {run.id}", run.host or "?", tel))
                return found, last
            finally:
                db.close()

        self.controller.submit(
            job, self._on_reattached, lambda exc: self._say(f"Could not reattach to running runs: {exc}")
        )

    def _on_reattached(self, answer: tuple[list[tuple[int, str, str, RunTelemetry]], Any]) -> None:
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
        failure = entry.failure or {}
        error = failure.get("error") or entry.telemetry.end_error
        code = entry.exit_code if entry.exit_code is not None else failure.get("exit_code")
        head = "Failed" + (f" (exit {code})" if code is not None else "")
        if error:
            head += f": {error}"
        elif entry.failure is None:
            head += ": reading the error from the host…"
        tail = failure.get("stderr_tail") or ""
        if entry.failure is not None and not tail:
            tail = failure.get("stderr_problem") or "(the trainer wrote nothing to stderr)"
        self.failure_label.setText(head)
        if self.failure_text.toPlainText() != tail:
            self.failure_text.setPlainText(tail)
            self.failure_text.verticalScrollBar().setValue(self.failure_text.verticalScrollBar().maximum())
        self.failure_text.setVisible(bool(tail))
        self.failure_panel.setVisible(True)

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
            from gpuplanner.history.alerts import refresh_alerts
            from gpuplanner.history.analytics import summarize
            from gpuplanner.history.db import connect
            from gpuplanner.history.runs import get_run
            from gpuplanner.history.time_breakdown import from_dict

            db = connect(db_path)
            try:  # evaluated under the window's alert settings and stored with the run
                alerts: list[tuple[str, ...]] = [
                    (a.kind, a.message, (a.diagnosis or {}).get("text", ""))
                    for a in refresh_alerts(db, run_id, settings)
                ]
                planned = get_run(db, run_id).planned_cost_usd
                breakdown = from_dict(summarize(db, run_id, with_alerts=False).time_breakdown)
            finally:
                db.close()
            return alerts, planned, breakdown

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
        if entry is None:
            self.gpu_table.setVisible(False)
            self.simulated_badge.setVisible(False)
            self.alert_banner.set_alerts([])
            return
        tel = entry.telemetry
        rows = tel.gpu_table()
        self.gpu_table.setVisible(bool(rows))
        tallest = self.gpu_table.maximumHeight()
        self.gpu_table.show_rows(rows)
        if self.gpu_table.maximumHeight() != tallest:  # fewer GPUs than rows room: the plots take the rest
            sizes = self.plots_split.sizes()
            table = min(max(sizes[1], GPU_TABLE_HEIGHT), self.gpu_table.maximumHeight())
            self.plots_split.setSizes([sum(sizes) - table, table])
        self.title_label.setText(f"#{entry.run_id} {entry.name}")
        code = f", exit {entry.exit_code}" if entry.exit_code is not None else ""
        end = f" ({tel.end_status})" if tel.end_status and tel.end_status != entry.state else ""
        device = f" · {tel.device}" if tel.device else ""
        queue = getattr(entry.status, "queue", None)  # a Slurm job: its wait in the queue and the reason
        queued = f" · {html.escape(queue_text(queue))}" if queue else ""
        self.state_label.setText(f"on {entry.host}{device} · <b>{entry.state}</b>{end}{code}{queued}")
        self.simulated_badge.setVisible(bool(tel.simulated))
        frac = tel.progress()
        step = tel.current_step()
        if frac is None:
            self.progress.setValue(0)
            self.progress.setFormat("waiting for the first step…" if entry.state in ACTIVE_STATES else "—")
        else:
            self.progress.setValue(int(frac * 1000))
            self.progress.setFormat(f"step {step:,} of {tel.steps_total:,} ({frac:.0%})")
        eta = tel.eta_s() if entry.state in ("running", "starting") else None
        self.eta_label.setText(f"Elapsed {_duration(tel.elapsed_s())} · ETA {_duration(eta)}")
        spend = tel.spend_usd()
        if tel.price_per_gpu_hour is None and not spend:  # unknown, not $0
            parts = [f"Spend: {NO_PRICE} (none set for this host)"]
        else:
            parts = [f"Spend {_money(spend)}"]
        if tel.budget_usd:
            parts.append(f"of budget {_money(tel.budget_usd)}" + (f" ({spend / tel.budget_usd:.0%})" if spend else ""))
        if tel.planned_cost_usd:
            parts.append(f"· plan {_money(tel.planned_cost_usd)}")
        projected = tel.projected_cost_usd()
        if projected is not None and entry.state in ACTIVE_STATES:
            parts.append(f"· projected {_money(projected)}")
        self.spend_label.setText(" ".join(parts))
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
        from gpuplanner.ui.alert_settings_dialog import edit_alert_settings

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
