"""Help > User guide opens the built guide on this machine when there is one, else the pages online.

The URL the window asks the desktop to open is caught with ``QDesktopServices.setUrlHandler`` for the
``file`` and ``https`` schemes, so no browser starts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QKeySequence

from gpuplanner import user_guide
from gpuplanner.ui import main_window
from gpuplanner.ui.main_window import MainWindow
from tests.conftest import REPO_ROOT


class UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(QUrl(url))


@pytest.fixture
def opened() -> Iterator[list[QUrl]]:
    catcher = UrlCatcher()
    for scheme in ("file", "https", "http"):
        QDesktopServices.setUrlHandler(scheme, catcher, "open")
    yield catcher.urls
    for scheme in ("file", "https", "http"):
        QDesktopServices.unsetUrlHandler(scheme)


@pytest.fixture
def window(qtbot: Any, services: Any) -> Iterator[MainWindow]:
    win = MainWindow(services)
    qtbot.addWidget(win)
    yield win
    win.shutdown(stop_runs=True)


def test_help_menu_has_the_user_guide_first_with_f1(window: MainWindow) -> None:
    help_menu = window.menuBar().actions()[-1].menu()
    assert [a.text() for a in help_menu.actions()] == ["&User guide", "&Welcome", "Show &log", "&About GPU Planner"]
    assert QKeySequence("F1") in window.user_guide_action.shortcuts()


def test_opens_the_built_copy_when_there_is_one(
    window: MainWindow, opened: list[QUrl], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "site" / "index.html"
    index.parent.mkdir()
    index.write_text("<html><title>GPU Planner user guide</title></html>")
    monkeypatch.setattr(user_guide, "local_guide_candidates", lambda: [tmp_path / "missing.html", index])
    window.user_guide_action.trigger()
    assert [u.toLocalFile() for u in opened] == [str(index)]
    assert opened[0].scheme() == "file"


def test_opens_the_pages_online_without_a_built_copy(
    window: MainWindow, opened: list[QUrl], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(user_guide, "local_guide_candidates", lambda: [tmp_path / "site" / "index.html"])
    window.user_guide_action.trigger()
    assert [u.toString() for u in opened] == ["https://github.com/gpuplanner/gpuplanner/blob/main/docs/index.md"]


def test_says_where_the_guide_is_when_nothing_can_open_it(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoBrowser:
        @staticmethod
        def openUrl(url: QUrl) -> bool:
            return False

    monkeypatch.setattr(user_guide, "local_guide_candidates", lambda: [tmp_path / "site" / "index.html"])
    monkeypatch.setattr(main_window, "QDesktopServices", NoBrowser)
    window.user_guide_action.trigger()
    assert window.statusBar().currentMessage() == (
        "Could not open a browser; the user guide is at "
        "https://github.com/gpuplanner/gpuplanner/blob/main/docs/index.md"
    )


def test_where_a_built_guide_is_looked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a checkout: what `make docs` writes
    assert user_guide.local_guide_candidates()[-1] == REPO_ROOT / "build" / "site" / "index.html"
    # the frozen bundle looks in its own folder first
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    candidates = user_guide.local_guide_candidates()
    assert candidates[0] == tmp_path / "docs" / "index.html"
    assert user_guide.local_user_guide() == next((c for c in candidates if c.is_file()), None)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.html").write_text("<html></html>")
    assert user_guide.local_user_guide() == tmp_path / "docs" / "index.html"
