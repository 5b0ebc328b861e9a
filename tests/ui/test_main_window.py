"""The whole window: first start on an empty data directory, places, menus, settings, closing with runs."""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QKeySequence

from gpuplanner import cli
from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run
from gpuplanner.ui import app as ui_app
from gpuplanner.ui.main_window import PLACES, MainWindow, app_settings
from tests.ui.helpers import wait_for_history, wait_for_result


@pytest.fixture
def window(qtbot: Any, services: Any) -> Any:
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    wait_for_result(qtbot, win.plan_pane)
    yield win
    if not win._closing_done:
        win.shutdown(stop_runs=True)
        win._closing_done = True


def test_first_start_on_an_empty_data_directory(qtbot: Any, window: MainWindow, data_dir: Path) -> None:
    assert not any(data_dir.glob("*.sqlite")) or True  # created on demand, never required
    assert window.windowTitle() == "GPU Planner"
    assert not window.windowIcon().isNull()
    assert window.current_place() == "Plan"
    assert window.plan_pane.result is not None  # the example plan is on screen
    # after the first frame the chart and the Runs pane (reattaching live runs) are built; Hosts and
    # History wait for their first visit
    qtbot.waitUntil(lambda: window.is_built("Runs"), timeout=10_000)
    assert window.plan_pane.chart.rows_shown
    assert not window.is_built("Hosts") and not window.is_built("History")
    wait_for_history(qtbot, window.history_pane)
    assert window.history_pane.proxy.rowCount() == 0
    assert window.width() >= 1024 and window.height() >= 640


def test_places_switch_from_the_sidebar_and_shortcuts(window: MainWindow) -> None:
    for index, name in enumerate(PLACES):
        window.place_actions[index].trigger()
        assert window.current_place() == name
        assert window.stack.currentWidget() is window.panes[index]
        assert window.place_actions[index].shortcut() == QKeySequence(f"Ctrl+{index + 1}")
    window.sidebar.setCurrentRow(0)
    assert window.current_place() == "Plan"


def test_menus_have_shortcuts(window: MainWindow) -> None:
    titles = [a.text() for a in window.menuBar().actions()]
    assert titles == ["&File", "&View", "&Run", "&Help"]
    for action in (
        window.save_action,
        window.open_action,
        window.quit_action,
        window.launch_action,
        window.demo_action,
        *window.export_actions.values(),
    ):
        assert not action.shortcut().isEmpty(), action.text()


def test_demo_and_launch_go_to_the_runs_pane(qtbot: Any, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(window.runs_pane, "start_demo_run", lambda: calls.append("demo"))
    monkeypatch.setattr(window.runs_pane, "open_launch_dialog", lambda settings: calls.append(settings))
    window.demo_action.trigger()
    assert calls == ["demo"] and window.current_place() == "Runs"
    window.show_place("Plan")
    window.launch_action.trigger()  # the plan is saved off the GUI thread first, then the dialog opens
    qtbot.waitUntil(lambda: len(calls) == 2, timeout=10_000)
    assert window.current_place() == "Runs"
    settings = calls[1]
    assert settings["model"] == "llama-3.1-8b" and settings["precision"] == "bf16-mixed" and settings["plan_id"] >= 1


def test_run_finished_refreshes_the_history(qtbot: Any, window: MainWindow, services: Any) -> None:
    db = open_db(services.db_path)
    try:
        run_id = create_run(db, name="ended", gpu_type="L4", gpu_count=1, price_usd_per_gpu_hour=0.8)
    finally:
        db.close()
    window.runs_pane.runFinished.emit(run_id)
    wait_for_history(qtbot, window.history_pane)
    assert window.history_pane.proxy.rowCount() == 1
    assert window.history_pane.selected_run_ids() == [run_id]


def test_window_state_and_last_inputs_are_remembered(qtbot: Any, services: Any, _private_qsettings: Path) -> None:
    first = MainWindow(services)
    qtbot.addWidget(first)
    first.show()
    wait_for_result(qtbot, first.plan_pane)
    first.plan_pane.form.set_values({"micro-batch": "3", "budget-usd": "77"})
    first.show_place("History")
    first.resize(1100, 700)
    assert first.close()
    assert (services.config_dir / "window.ini").is_file(), "settings are written in the config folder"
    assert not list(_private_qsettings.rglob("*.ini")), "nothing in Qt's own settings folder"
    assert app_settings().value("window/place") == "History"
    second = MainWindow(services)
    qtbot.addWidget(second)
    second.show()
    wait_for_result(qtbot, second.plan_pane)
    try:
        assert second.current_place() == "History"
        values = second.plan_pane.form.values()
        assert (values["micro-batch"], values["budget-usd"]) == ("3", "77")
        assert second.plan_pane.result.request.budget_usd == 77.0
    finally:
        second.shutdown(stop_runs=True)
        second._closing_done = True


@pytest.mark.parametrize("answer", ["cancel", "detach", "stop"])
def test_closing_with_live_runs_asks(window: MainWindow, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    stops: list[bool] = []
    monkeypatch.setattr(window, "has_live_runs", lambda: True)
    monkeypatch.setattr(window, "ask_about_live_runs", lambda: answer)
    real_shutdown = window.run_controller.shutdown  # the shared controller stops or detaches the runs

    def shutdown(stop_runs: bool) -> None:
        stops.append(stop_runs)
        real_shutdown(stop_runs)  # the controller's thread still has to end

    monkeypatch.setattr(window.run_controller, "shutdown", shutdown)
    closed = window.close()
    if answer == "cancel":
        assert not closed and window.isVisible() and stops == []
        monkeypatch.setattr(window, "has_live_runs", lambda: False)
        assert window.close()
        assert stops == [False]
    else:
        assert closed and stops == [answer == "stop"]


def test_settings_go_to_the_config_folder() -> None:
    settings = app_settings()
    assert settings.format() == QSettings.Format.IniFormat
    assert Path(settings.fileName()) == Path(os.environ["GPUPLANNER_CONFIG_DIR"]) / "window.ini"


def test_gpuplanner_without_subcommand_opens_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(ui_app, "main", lambda argv=None: calls.append(argv) or 0)
    assert cli.main([]) == 0
    assert calls == [[]]
    assert cli.main(["--theme", "dark", "--db", "elsewhere.sqlite"]) == 0  # the window's own options
    assert calls[-1] == ["--db", "elsewhere.sqlite", "--theme", "dark"]
    assert cli.main(["--theme", "dark", "catalog", "list"]) == 2 and len(calls) == 2  # not a command's flag


def test_app_main_runs_the_event_loop(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[MainWindow] = []

    def fake_exec(self: Any) -> int:
        window = next(w for w in self.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible())
        shown.append(window)
        wait_for_result(qtbot, window.plan_pane)
        window.shutdown(stop_runs=True)
        window._closing_done = True
        window.close()
        window.deleteLater()
        return 0

    monkeypatch.setattr(type(ui_app.QApplication.instance()), "exec", fake_exec)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main() installs the crash report; put it back after
    before = sys.excepthook
    assert ui_app.main(["--theme", "dark"]) == 0
    assert shown and os.environ.get("QT_QPA_PLATFORM") == "offscreen"
    assert sys.excepthook is not before and sys.excepthook.__qualname__ == "make_hook.<locals>.hook"
    log = Path(os.environ["GPUPLANNER_DATA_DIR"]) / "logs" / "gpuplanner.log"  # written while it ran
    assert "the window started" in log.read_text(encoding="utf-8")
    assert not any(isinstance(h, RotatingFileHandler) for h in logging.getLogger("gpuplanner").handlers)  # closed
    ui_app.create_application((), theme="light")


def test_plan_table_fits_at_1280x800(qtbot: Any, window: MainWindow) -> None:
    """Every column of the comparison, deadline and budget included, without a horizontal scroll."""
    window.resize(1280, 800)
    window.plan_pane.form.set_values({"deadline-hours": "12", "budget-usd": "40"})
    window.plan_pane.recalculate()
    wait_for_result(qtbot, window.plan_pane)
    qtbot.waitUntil(lambda: window.plan_pane.result.request.budget_usd == 40.0, timeout=10_000)
    table = window.plan_pane.table
    qtbot.wait(50)
    header = table.horizontalHeader()
    assert not table.isColumnHidden(11)
    assert header.length() <= table.viewport().width() + 1, (header.length(), table.viewport().width())
    assert not table.horizontalScrollBar().isVisible()


def test_a_measured_speed_recalculates_the_plan(window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(window.plan_pane, "recalculate", lambda: calls.append(True) or True)
    window.runs_pane.speedMeasured.emit({"tokens_per_s": 1.0, "recorded_id": 1})
    assert calls == [True]
