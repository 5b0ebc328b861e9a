"""The first-start welcome: shown once the window is up, until "Don't show this again"; Help > Welcome."""

from __future__ import annotations

from typing import Any

from gpuplanner.ui.main_window import MainWindow, app_settings
from tests.ui.helpers import wait_for_result


def open_window(qtbot: Any, services: Any) -> MainWindow:
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    wait_for_result(qtbot, win.plan_pane)
    qtbot.waitUntil(lambda: win.is_built("Runs"), timeout=10_000)
    return win


def close_window(win: MainWindow) -> None:
    if not win._closing_done:
        win.shutdown(stop_runs=True)
        win._closing_done = True


def test_the_welcome_shows_once_until_dismissed(qtbot: Any, services: Any, monkeypatch: Any) -> None:
    win = open_window(qtbot, services)
    try:
        dialog = win.welcome_dialog
        assert dialog.isVisible() and not dialog.isModal()
        body = dialog.layout().itemAt(0).widget().text()
        for place in ("Plan", "Hosts", "Runs", "History"):
            assert f"<b>{place}</b>" in body
        assert str(services.db_path) in body and str(services.config_dir) in body
        # "Try a demo run" closes it and starts the demo in Runs
        started: list[int] = []
        monkeypatch.setattr(win.runs_pane, "start_demo_run", lambda: started.append(1))
        dialog.dont_show.setChecked(True)
        dialog.demo_button.click()
        assert started == [1] and not dialog.isVisible() and win.current_place() == "Runs"
        assert app_settings().value("welcome/dismissed", False, type=bool) is True
    finally:
        close_window(win)
    again = open_window(qtbot, services)
    try:
        qtbot.wait(50)
        assert getattr(again, "welcome_dialog", None) is None  # dismissed for good
        again.welcome_action.trigger()  # Help > Welcome
        assert again.welcome_dialog.isVisible() and again.welcome_dialog.dont_show.isChecked()
        again.welcome_dialog.dont_show.setChecked(False)
        again.welcome_dialog.close_button.click()
        assert app_settings().value("welcome/dismissed", True, type=bool) is False
    finally:
        close_window(again)
