"""The window's settings live in ``window.ini`` in the app's config folder, and move there once from
Qt's old organisation/application file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from gpuplanner.ui.main_window import MainWindow
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.settings import app_settings, legacy_settings_file
from tests.ui.helpers import wait_for_result


def _legacy_store() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "GPU Planner", "gpuplanner")


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_window_settings_land_in_gpuplanner_config_dir(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _private_qsettings: Path
) -> None:
    config = tmp_path / "my-config"
    monkeypatch.setenv("GPUPLANNER_CONFIG_DIR", str(config))
    services = AppServices(db_path=tmp_path / "history.sqlite", config_dir=config)
    window = MainWindow(services)
    qtbot.addWidget(window)
    window.show()
    wait_for_result(qtbot, window.plan_pane)
    window.show_place("History")
    window.save_settings()
    window.shutdown(stop_runs=True)
    window._closing_done = True

    ini = config / "window.ini"
    assert ini.is_file()
    stored = QSettings(str(ini), QSettings.Format.IniFormat)
    assert stored.value("window/place") == "History"
    assert json.loads(stored.value("plan/inputs"))  # the form's values
    assert "low_util_pct" in json.loads(stored.value("alerts/settings"))
    assert _files_under(_private_qsettings) == []  # nothing in Qt's own settings folder
    assert not legacy_settings_file().exists()


def test_old_settings_are_copied_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("GPUPLANNER_CONFIG_DIR", str(config))
    old = _legacy_store()
    old.setValue("welcome/dismissed", True)
    old.setValue("window/place", "Runs")
    old.sync()
    del old
    assert legacy_settings_file().is_file()

    settings = app_settings()
    assert Path(settings.fileName()) == config / "window.ini"
    assert settings.value("welcome/dismissed", False, type=bool) is True
    assert settings.value("window/place") == "Runs"
    settings.setValue("window/place", "Plan")
    settings.sync()
    del settings

    old = _legacy_store()  # a later change in the old place is not copied again over the new file
    old.setValue("window/place", "Sweep")
    old.sync()
    del old
    assert app_settings().value("window/place") == "Plan"


def test_no_old_settings_means_a_fresh_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANNER_CONFIG_DIR", str(tmp_path / "config"))
    settings = app_settings()
    assert settings.value("welcome/dismissed", False, type=bool) is False
    settings.setValue("demo/steps", 120)
    settings.sync()
    assert (tmp_path / "config" / "window.ini").is_file()
    assert not legacy_settings_file().exists()
