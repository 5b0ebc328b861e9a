"""UI test fixtures: offscreen Qt (tests/conftest.py), settings in a temp folder, a temp history per test.

Every test gets its own QSettings location (INI files under a temp folder) and :class:`AppServices`
pointing at a fresh history file in the test's private data directory (``services``) or in its
``tmp_path`` (``tmp_services``, which the Runs pane fixture uses), so tests never see each other's
state or the user's. Plain helpers live in ``tests/ui/helpers.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from gpuplanner.ui.services import AppServices


@pytest.fixture(autouse=True)
def _private_qsettings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("qsettings")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
        QSettings.setPath(QSettings.Format.IniFormat, scope, str(folder))
    yield folder


@pytest.fixture
def services() -> AppServices:
    """Services over the test's private data/config directories (set by tests/conftest.py)."""
    return AppServices.from_environment()


@pytest.fixture
def data_dir() -> Path:
    return Path(os.environ["GPUPLANNER_DATA_DIR"])


@pytest.fixture
def tmp_services(tmp_path: Path) -> AppServices:
    """Services over a history and config folder inside the test's ``tmp_path`` (the Runs and Hosts tests
    look at them there)."""
    return AppServices(db_path=tmp_path / "history.sqlite", config_dir=tmp_path / "config")


@pytest.fixture
def plan_pane(qtbot: Any, services: AppServices) -> Iterator[Any]:
    """The Plan pane at the size it has in a 1280x800 window, its first result shown."""
    from gpuplanner.ui.plan.plan_pane import PlanPane
    from tests.ui.helpers import wait_for_result

    widget = PlanPane(services)
    qtbot.addWidget(widget)
    widget.resize(1160, 760)
    widget.show()
    wait_for_result(qtbot, widget)
    yield widget
    widget.shutdown()


@pytest.fixture
def runs_pane(qtbot: Any, tmp_services: AppServices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from gpuplanner.ui.runs import runs_pane as module

    monkeypatch.setattr(
        module.RunsPane,
        "_make_manager",
        lambda self: __import__("gpuplanner.launch.manager", fromlist=["RunManager"]).RunManager(
            self.services.db_path, local_runs_root=tmp_path / "runs"
        ),
    )
    pane = module.RunsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    yield pane
    for entry in list(pane.runs.values()):
        if entry.state not in module.FINAL_STATES:
            try:
                pane.controller.manager.kill(entry.run_id)
            except Exception:
                pass
    pane.shutdown(stop_runs=False)
