"""The main window: a sidebar for the places (``PLACES``: Plan, Hosts, Runs, History, Sweep), the menu bar, settings.

Window geometry, splitter positions, the current place and the planner's last inputs are kept in
:func:`gpuplanner.ui.settings.app_settings`: ``window.ini`` in the app's config folder
(``$GPUPLANNER_CONFIG_DIR`` or ``~/.config/gpuplanner``), beside the app's other settings.

Closing the window while runs are live asks whether to detach (runs go on; the app reattaches
next time) or stop them.

Start-up shows the Plan pane first: the Hosts and History panes are built on their first visit, and
the cost chart and the Runs pane (which reattaches live runs) right after the first frame, so
pyqtgraph and paramiko load after the window is on screen. ``hosts_pane``, ``runs_pane`` and
``history_pane`` build their pane when read.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QByteArray, QSize, QTimer, QUrl, Slot
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeySequence, QPaintEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QStyle,
    QWidget,
)

from gpuplanner import __version__
from gpuplanner.history.alert_rules import AlertSettings
from gpuplanner.ui.palette import app_icon
from gpuplanner.ui.plan.plan_form_fields import FIELD_BY_KEY
from gpuplanner.ui.plan.plan_pane import PlanPane
from gpuplanner.ui.runs.run_controller import make_shared_controller
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.settings import app_settings
from gpuplanner.user_guide import ONLINE_USER_GUIDE, local_user_guide

PLACES = ("Plan", "Hosts", "Runs", "History", "Sweep")
PLACE_ICONS = (
    QStyle.StandardPixmap.SP_FileDialogDetailedView,
    QStyle.StandardPixmap.SP_DriveNetIcon,
    QStyle.StandardPixmap.SP_MediaPlay,
    QStyle.StandardPixmap.SP_FileDialogContentsView,
    QStyle.StandardPixmap.SP_BrowserReload,
)


FALLBACK_KEYS = {
    QKeySequence.StandardKey.Save: "Ctrl+S",
    QKeySequence.StandardKey.Open: "Ctrl+O",
    QKeySequence.StandardKey.Print: "Ctrl+P",
    QKeySequence.StandardKey.Quit: "Ctrl+Q",
    QKeySequence.StandardKey.Refresh: "F5",
    QKeySequence.StandardKey.HelpContents: "F1",
}


class MainWindow(QMainWindow):
    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.services = services
        self.setWindowTitle("GPU Planner")
        self.setWindowIcon(app_icon())
        self.setMinimumSize(QSize(1024, 640))
        self.resize(1280, 800)
        # The application's one RunManager (behind one controller): Hosts, Runs and Sweep share it.
        self.run_controller = make_shared_controller(services.db_path, self)
        self.plan_pane = PlanPane(services, defer_chart=True)
        self._built: dict[str, QWidget] = {"Plan": self.plan_pane}
        self._first_frame_seen = False

        self.stack = QStackedWidget()
        self.stack.addWidget(self.plan_pane)
        for _name in PLACES[1:]:
            self.stack.addWidget(QWidget())  # replaced by the pane on its first visit
        self.sidebar = QListWidget()
        self.sidebar.setAccessibleName("Places")
        self.sidebar.setIconSize(QSize(22, 22))
        self.sidebar.setSpacing(2)
        for name, icon in zip(PLACES, PLACE_ICONS):
            item = QListWidgetItem(self.style().standardIcon(icon), name)
            item.setSizeHint(QSize(100, 36))
            self.sidebar.addItem(item)
        self.sidebar.setFixedWidth(118)
        self.sidebar.currentRowChanged.connect(self._on_place_changed)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.sidebar)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        self.plan_pane.launchRequested.connect(self._on_launch_requested)
        self._build_menus()
        self.statusBar().showMessage(f"History: {services.db_path}", 8000)
        self.sidebar.setCurrentRow(0)
        self._closing_done = False
        self.restore_settings()

    # ------------------------------------------------------------------ menus

    def _action(
        self, text: str, slot: Any, shortcut: QKeySequence.StandardKey | str | None = None, tip: str = ""
    ) -> QAction:
        action = QAction(text, self)
        if isinstance(shortcut, QKeySequence.StandardKey):
            bindings = QKeySequence.keyBindings(shortcut)  # the platform's own keys, where it has them
            action.setShortcuts(bindings or [QKeySequence(FALLBACK_KEYS[shortcut])])
        elif shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        action.triggered.connect(slot)
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.save_action = self._action(
            "&Save plan…", self._on_save_plan, QKeySequence.StandardKey.Save, "Store the current plan in the history"
        )
        self.open_action = self._action(
            "&Open plan…", self._on_open_plan, QKeySequence.StandardKey.Open, "Reopen a saved plan"
        )
        file_menu.addAction(self.save_action)
        file_menu.addAction(self.open_action)
        export = file_menu.addMenu("&Export plan")
        self.export_actions = {
            "csv": self._action("Comparison as &CSV…", self._on_export_csv, "Ctrl+Shift+C"),
            "markdown": self._action("Comparison as &Markdown…", self._on_export_markdown, "Ctrl+Shift+M"),
            "png": self._action("Charts as &PNG…", self._on_export_png, "Ctrl+Shift+P"),
            "pdf": self._action("One-page PDF &report…", self._on_export_pdf, QKeySequence.StandardKey.Print),
        }
        for action in self.export_actions.values():
            export.addAction(action)
        file_menu.addSeparator()
        self.own_hardware_action = self._action(
            "Own &hardware price…",
            self._on_own_hardware,
            tip="The amortised price per GPU-hour of a machine you own, for the comparison or a host",
        )
        file_menu.addAction(self.own_hardware_action)
        file_menu.addSeparator()
        self.quit_action = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.quit_action.setMenuRole(QAction.MenuRole.QuitRole)
        file_menu.addAction(self.quit_action)

        view = bar.addMenu("&View")
        self.place_actions = []
        for index, name in enumerate(PLACES):
            action = QAction(f"&{name}", self)
            action.setShortcut(QKeySequence(f"Ctrl+{index + 1}"))
            action.setData(index)
            action.triggered.connect(self._on_place_action)
            view.addAction(action)
            self.place_actions.append(action)
        view.addSeparator()
        self.refresh_action = self._action(
            "&Refresh history", self._on_refresh_history, QKeySequence.StandardKey.Refresh
        )
        view.addAction(self.refresh_action)

        run = bar.addMenu("&Run")
        self.launch_action = self._action(
            "&Launch this plan…", self._on_launch_plan, "Ctrl+L", "Open the launch dialog with the plan's settings"
        )
        self.demo_action = self._action(
            "Try a &demo run",
            self._on_demo_run,
            "Ctrl+D",
            "Train a tiny model on this machine and watch it live (simulated GPU if none)",
        )
        run.addAction(self.launch_action)
        run.addAction(self.demo_action)
        self.alert_settings_action = self._action(
            "&Alert settings…",
            self._on_alert_settings,
            tip="When Runs and History raise an alert (utilisation threshold and window, memory, data wait…)",
        )
        run.addAction(self.alert_settings_action)

        help_menu = bar.addMenu("&Help")
        self.user_guide_action = self._action(
            "&User guide",
            self._on_user_guide,
            QKeySequence.StandardKey.HelpContents,
            "Open the user guide: the copy on this machine if there is one, else the pages online",
        )
        help_menu.addAction(self.user_guide_action)
        self.welcome_action = self._action(
            "&Welcome", self.show_welcome, tip="What the places do, a demo run, where your data lives"
        )
        help_menu.addAction(self.welcome_action)
        self.show_log_action = self._action(
            "Show &log", self.show_log, tip="The window's log file: errors on any thread, with their tracebacks"
        )
        help_menu.addAction(self.show_log_action)
        self.about_action = self._action("&About GPU Planner", self._on_about)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        help_menu.addAction(self.about_action)

    # ------------------------------------------------------------------ panes, built when first needed

    @property
    def hosts_pane(self) -> Any:
        return self.pane("Hosts")

    @property
    def runs_pane(self) -> Any:
        return self.pane("Runs")

    @property
    def history_pane(self) -> Any:
        return self.pane("History")

    @property
    def panes(self) -> tuple[QWidget, ...]:
        return tuple(self.pane(name) for name in PLACES)

    def is_built(self, name: str) -> bool:
        return name in self._built

    def pane(self, name: str) -> Any:
        """The pane of a place, built (and put in the stack) on first use."""
        built = self._built.get(name)
        if built is not None:
            return built
        index = PLACES.index(name)
        pane: QWidget
        if name == "Hosts":
            from gpuplanner.ui.hosts.hosts_pane import HostsPane

            pane = HostsPane(self.services, controller=self.run_controller)
        elif name == "Runs":
            from gpuplanner.ui.runs.runs_pane import RunsPane

            pane = RunsPane(self.services, controller=self.run_controller)
            pane.runFinished.connect(self._on_run_finished)
            pane.alertSettingsChanged.connect(self._on_alert_settings_changed)
            pane.speedMeasured.connect(self._on_speed_measured)
        elif name == "Sweep":
            from gpuplanner.ui.sweep.sweep_pane import SweepPane

            pane = SweepPane(self.services, controller=self.run_controller)
            pane.finished.connect(lambda _result: self._on_refresh_history() if self.is_built("History") else None)
        else:
            from gpuplanner.ui.history.history_pane import HistoryPane

            pane = HistoryPane(self.services)
            pane.carryToPlan.connect(self._on_carry_to_plan)
            pane.exported.connect(lambda text: self.statusBar().showMessage(text, 15000))
            state = app_settings().value("history/splitter")
            if isinstance(state, QByteArray) and not state.isEmpty():
                pane.splitter.restoreState(state)
        self._built[name] = pane
        placeholder = self.stack.widget(index)
        current = self.stack.currentIndex()
        self.stack.insertWidget(index, pane)
        if placeholder is not None:
            self.stack.removeWidget(placeholder)
            placeholder.deleteLater()
        self.stack.setCurrentIndex(current)
        return pane

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self._first_frame_seen:
            self._first_frame_seen = True
            # Two hops: whatever else waits for this first frame runs before the heavier imports.
            QTimer.singleShot(0, self._after_first_frame)

    @Slot()
    def _after_first_frame(self) -> None:
        QTimer.singleShot(0, self._build_after_first_frame)

    @Slot()
    def _build_after_first_frame(self) -> None:
        if self._closing_done:
            return
        self.plan_pane.ensure_chart()
        self.pane("Runs")  # reattaches runs left going by the last session
        if not app_settings().value("welcome/dismissed", False, type=bool):
            self.show_welcome()  # the first start (until "Don't show this again")

    @Slot(int)
    def _on_place_changed(self, row: int) -> None:
        if 0 <= row < len(PLACES):
            self.pane(PLACES[row])
            self.stack.setCurrentIndex(row)

    @Slot(int)
    def _on_run_finished(self, run_id: int) -> None:
        self.pane("History").on_run_finished(run_id)
        self.plan_pane.recalculate()  # a finished run may calibrate the plan

    def _on_speed_measured(self, _result: object) -> None:
        self.plan_pane.recalculate()  # a recorded bench result calibrates the plan

    @Slot(dict)
    def _on_carry_to_plan(self, inputs: dict) -> None:
        """An alert's suggested settings from History become a new plan."""
        self.plan_pane.carry_inputs(inputs)
        self.show_place("Plan")
        self.statusBar().showMessage("The Plan form holds the alert's suggested settings", 8000)

    @Slot()
    def _on_alert_settings(self) -> None:
        from gpuplanner.ui.dialogs.alert_settings_dialog import edit_alert_settings

        chosen = edit_alert_settings(self.services.alert_settings, self)
        if chosen is not None:
            if self.is_built("Runs"):
                self.runs_pane.apply_alert_settings(chosen)  # emits alertSettingsChanged
            else:
                self.services.alert_settings = chosen
                self._on_alert_settings_changed()

    @Slot()
    def _on_alert_settings_changed(self) -> None:
        app_settings().setValue("alerts/settings", json.dumps(self.services.alert_settings.as_dict()))
        if self.is_built("History"):
            self.history_pane.refresh()

    @Slot()
    def _on_refresh_history(self) -> None:
        self.pane("History").refresh()

    # ------------------------------------------------------------------ places

    def show_place(self, name: str) -> None:
        self.sidebar.setCurrentRow(PLACES.index(name))

    def current_place(self) -> str:
        return PLACES[self.stack.currentIndex()]

    @Slot()
    def _on_place_action(self) -> None:
        action = self.sender()
        if isinstance(action, QAction):
            self.sidebar.setCurrentRow(int(action.data()))

    # ------------------------------------------------------------------ actions

    @Slot()
    def _on_save_plan(self) -> None:
        self.show_place("Plan")
        self.plan_pane.save_dialog()

    @Slot()
    def _on_open_plan(self) -> None:
        self.show_place("Plan")
        self.plan_pane.open_dialog()

    @Slot()
    def _on_export_csv(self) -> None:
        self.plan_pane.export_dialog("csv")

    @Slot()
    def _on_export_markdown(self) -> None:
        self.plan_pane.export_dialog("markdown")

    @Slot()
    def _on_export_png(self) -> None:
        self.plan_pane.export_dialog("png")

    @Slot()
    def _on_export_pdf(self) -> None:
        self.plan_pane.export_dialog("pdf")

    @Slot()
    def _on_launch_plan(self) -> None:
        self.plan_pane.launch()

    @Slot(dict)
    def _on_launch_requested(self, settings: dict) -> None:
        self.show_place("Runs")
        self.runs_pane.open_launch_dialog(settings)

    @Slot()
    def _on_demo_run(self) -> None:
        self.show_place("Runs")
        self.runs_pane.start_demo_run()

    def user_guide_url(self) -> QUrl:
        """The built guide on this machine when there is one (``make docs``), otherwise the pages online."""
        local = local_user_guide()
        return QUrl.fromLocalFile(str(local)) if local is not None else QUrl(ONLINE_USER_GUIDE)

    @Slot()
    def _on_own_hardware(self) -> None:
        self.open_own_hardware()

    def open_own_hardware(self) -> Any:
        """Show the Own hardware dialog (one at a time, not modal) and return it."""
        from gpuplanner.ui.dialogs.ownership_dialog import OwnHardwareDialog

        dialog = getattr(self, "own_hardware_dialog", None)
        if dialog is None:
            dialog = OwnHardwareDialog(self.services, self)
            dialog.machineSaved.connect(self._on_machine_saved)
            dialog.hostPriceSet.connect(self._on_host_price_set)
            self.own_hardware_dialog = dialog
        if dialog.isVisible():
            dialog.raise_()  # already open: bring it to the front
        else:
            dialog.show()
        return dialog

    @Slot(str)
    def _on_machine_saved(self, _name: str) -> None:
        self.plan_pane.reload_catalog()

    @Slot(str, float)
    def _on_host_price_set(self, _name: str, _price: float) -> None:
        if self.is_built("Hosts"):
            self.hosts_pane.reload()

    @Slot()
    def show_welcome(self) -> Any:
        """Show the welcome (not modal) and return it."""
        from gpuplanner.ui.dialogs.welcome_dialog import WelcomeDialog

        dialog = getattr(self, "welcome_dialog", None)
        if dialog is None:
            dialog = WelcomeDialog(self.services.db_path, self.services.config_dir, self)
            dialog.demoRequested.connect(self._on_demo_run)
            dialog.guideRequested.connect(self._on_user_guide)
            dialog.finished.connect(self._on_welcome_finished)
            self.welcome_dialog = dialog
        dialog.dont_show.setChecked(bool(app_settings().value("welcome/dismissed", False, type=bool)))
        dialog.show()
        return dialog

    @Slot(int)
    def _on_welcome_finished(self, _result: int) -> None:
        settings = app_settings()
        settings.setValue("welcome/dismissed", self.welcome_dialog.dont_show.isChecked())
        settings.sync()

    @Slot()
    @Slot()
    def show_log(self) -> Any:
        """Help > Show log: the log file in a read-only viewer (one, not modal, reloaded each time); returns it."""
        from gpuplanner.ui.app_log import log_path
        from gpuplanner.ui.dialogs.log_dialog import LogDialog

        dialog = getattr(self, "log_dialog", None)
        if dialog is None:
            dialog = LogDialog(log_path(), self)
            self.log_dialog = dialog
        else:
            dialog.reload()
        dialog.show()
        return dialog

    def _on_user_guide(self) -> None:
        url = self.user_guide_url()
        if not QDesktopServices.openUrl(url):
            self.statusBar().showMessage(f"Could not open a browser; the user guide is at {url.toString()}", 15000)

    @Slot()
    def _on_about(self) -> None:
        QMessageBox.about(
            self,
            "About GPU Planner",
            f"<b>GPU Planner {__version__}</b><p>Plan what a GPU training run costs, launch it, "
            f"watch it live and look back at what it really cost.</p><p>History: {self.services.db_path}</p>",
        )

    # ------------------------------------------------------------------ settings

    def save_settings(self) -> None:
        settings = app_settings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState())
        settings.setValue("window/place", self.current_place())
        if self.plan_pane.user_sized_splitter:  # details, table, chart (the old two-part layout had another key)
            settings.setValue("plan/details-splitter", self.plan_pane.splitter.saveState())
        if self.is_built("History"):
            settings.setValue("history/splitter", self.history_pane.splitter.saveState())
        settings.setValue("plan/inputs", json.dumps(self.plan_pane.form.values()))
        settings.setValue("alerts/settings", json.dumps(self.services.alert_settings.as_dict()))
        settings.sync()

    def restore_settings(self) -> None:
        settings = app_settings()
        raw_alerts = settings.value("alerts/settings")
        if isinstance(raw_alerts, str) and raw_alerts:
            try:
                self.services.alert_settings = AlertSettings.from_dict(json.loads(raw_alerts))
            except (ValueError, TypeError, AttributeError):  # a damaged entry: the defaults
                pass
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        state = settings.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        value = settings.value("plan/details-splitter")
        if isinstance(value, QByteArray) and not value.isEmpty():
            self.plan_pane.restore_splitter(value)
        place = settings.value("window/place")
        if place in PLACES:
            self.show_place(str(place))
        raw = settings.value("plan/inputs")
        if isinstance(raw, str) and raw:
            try:
                values = json.loads(raw)
            except json.JSONDecodeError:
                values = None
            if isinstance(values, dict):
                self.plan_pane.form.set_values({k: str(v) for k, v in values.items() if k in FIELD_BY_KEY})
                self.plan_pane.recalculate()

    # ------------------------------------------------------------------ closing

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closing_done:
            event.accept()
            return
        stop_runs = False
        if self.has_live_runs():
            answer = self.ask_about_live_runs()
            if answer == "cancel":
                event.ignore()
                return
            stop_runs = answer == "stop"
        self.save_settings()
        self.shutdown(stop_runs)
        self._closing_done = True
        event.accept()

    def has_live_runs(self) -> bool:
        """Runs watched by the shared manager, whichever pane started them."""
        return bool(self.run_controller.live_runs())

    def ask_about_live_runs(self) -> str:
        """ "detach", "stop" or "cancel": what to do with live runs when the window closes."""
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Runs are still going",
            "Some runs are still going. Detach (they keep running; GPU Planner reattaches "
            "and catches up when it opens again) or stop them?",
            parent=self,
        )
        detach = box.addButton("Detach", QMessageBox.ButtonRole.AcceptRole)
        stop = box.addButton("Stop runs", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(detach)
        box.exec()
        clicked = box.clickedButton()
        return "detach" if clicked is detach else "stop" if clicked is stop else "cancel"

    def shutdown(self, stop_runs: bool = False) -> None:
        """Stop every pane's background work (the Runs pane detaches or stops its runs)."""
        self._closing_done = True  # nothing more gets built after this
        dialog = getattr(self, "own_hardware_dialog", None)
        if dialog is not None:
            dialog.shutdown()
        self.plan_pane.shutdown()
        if self.is_built("Runs"):
            self.runs_pane.shutdown(stop_runs)
        if self.is_built("Hosts"):
            self.hosts_pane.shutdown()
        if self.is_built("History"):
            self.history_pane.shutdown()
        if self.is_built("Sweep"):
            self.pane("Sweep").shutdown()
        self.run_controller.shutdown(stop_runs)  # after the panes: stops or detaches every live run
