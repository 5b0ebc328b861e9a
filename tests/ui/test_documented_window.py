"""What the README, the user guide and the welcome say about the window is what the real window has.

The places (their names, how many, their `View` shortcuts) and every menu shortcut are read from a
real :class:`MainWindow` and compared with the words of README.md, docs/index.md, docs/window.md,
docs/window-guide.md and the welcome dialog.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar

from gpuplanner.ui.dialogs.welcome_dialog import PLACES_TEXT
from gpuplanner.ui.main_window import MainWindow
from tests.conftest import REPO_ROOT

DOCUMENTS = ("README.md", "docs/index.md", "docs/window.md", "docs/window-guide.md")
NUMBERS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


@pytest.fixture
def window(qtbot: Any, services: Any) -> Any:
    win = MainWindow(services)
    qtbot.addWidget(win)
    yield win
    win.shutdown(stop_runs=True)
    win._closing_done = True


def menu_actions(menu: QMenu | QMenuBar) -> list[QAction]:
    """Every action of a menu and of its submenus (File > Export plan)."""
    actions = []
    for action in menu.actions():
        if action.menu() is not None:
            actions += menu_actions(action.menu())
        elif not action.isSeparator():
            actions.append(action)
    return actions


def text(document: str) -> str:
    return (REPO_ROOT / document).read_text(encoding="utf-8")


def test_every_document_names_the_windows_places_and_counts_them_right(window: MainWindow) -> None:
    places = [window.sidebar.item(row).text() for row in range(window.sidebar.count())]
    assert [a.text().replace("&", "") for a in window.place_actions] == places
    assert [a.shortcut() for a in window.place_actions] == [QKeySequence(f"Ctrl+{i + 1}") for i in range(len(places))]
    count = NUMBERS[len(places) - 2]
    for document in DOCUMENTS:
        said = re.findall(rf"\b({'|'.join(NUMBERS)}) (?:places|panes)\b", text(document), flags=re.IGNORECASE)
        assert said and {word.lower() for word in said} == {count}, document
        assert all(f"**{place}**" in text(document) for place in places), document
    assert [name for name, _what in PLACES_TEXT] == places  # the welcome lists each place


def test_the_documented_shortcuts_are_the_windows(window: MainWindow) -> None:
    """docs/window.md's Shortcuts section lists every menu shortcut, and each key it lists is one."""
    section = text("docs/window.md").split("## Shortcuts", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`((?:Ctrl\+|F\d)[^`]*)`", section))
    places = re.search(r"`Ctrl\+1`…`Ctrl\+(\d+)` places", section)
    assert places is not None and int(places.group(1)) == len(window.place_actions)
    documented -= {"Ctrl+1", f"Ctrl+{places.group(1)}"}
    keys = {}
    for action in menu_actions(window.menuBar()):
        if action not in window.place_actions and action.shortcuts():
            keys[action.text()] = {s.toString() for s in action.shortcuts()}
    assert keys, "the menus have shortcuts"
    undocumented = [name for name, bound in keys.items() if not bound & documented]
    assert undocumented == []
    bound_anywhere = set().union(*keys.values())
    assert documented - bound_anywhere == set()


def test_the_help_menu_is_documented(window: MainWindow) -> None:
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    names = [a.text().replace("&", "").rstrip("…") for a in help_menu.actions() if not a.isSeparator()]
    assert "Show log" in names
    guide = text("docs/window.md") + text("docs/troubleshooting.md")
    assert [name for name in names if f"Help > {name}" not in guide] == []
