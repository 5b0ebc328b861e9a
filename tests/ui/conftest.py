"""UI test setup: offscreen Qt (tests/conftest.py), settings in a temp folder, a temp history per test.

Every test gets its own QSettings location (INI files under a temp folder) and :class:`AppServices`
pointing at a fresh history file in the test's private data directory, so tests never see each
other's state or the user's.
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


def wait_for_history(qtbot: Any, pane: Any, timeout: int = 10_000) -> None:
    """Wait until the History pane's worker has answered every load it was asked for."""
    qtbot.waitUntil(lambda: not pane.is_loading(), timeout=timeout)


def wait_for_result(qtbot: Any, pane: Any, timeout: int = 10_000) -> None:
    """Wait until the Plan pane has no calculation pending and shows a result."""
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result is not None, timeout=timeout)
