"""The one-way arrows of ARCHITECTURE.md, checked on the source tree.

Only ``gpuplanner/ui/`` may import PySide6 or pyqtgraph; ``trainer/`` never imports ``gpuplanner``;
nothing imports ``gpuplanner.ui``; ``gpuplanner/plan/`` imports no other part of the app.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

QT_MODULES = ("PySide6", "pyqtgraph", "PyQt5", "PyQt6", "shiboken6")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def python_files(folder: str) -> list[Path]:
    return sorted((REPO_ROOT / folder).rglob("*.py"))


def violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in files:
        for lineno, module in imported_modules(path):
            if module.split(".")[0] in forbidden or any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(REPO_ROOT)}:{lineno} imports {module}")
    return bad


def test_qt_only_inside_ui() -> None:
    files = [p for p in python_files("gpuplanner") if "ui" not in p.relative_to(REPO_ROOT / "gpuplanner").parts[:1]]
    assert files, "no gpuplanner sources found"
    assert violations(files, QT_MODULES) == []


def test_trainer_does_not_import_gpuplanner() -> None:
    files = python_files("trainer")
    assert files
    assert violations(files, ("gpuplanner",)) == []


def module_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_nothing_imports_ui() -> None:
    """Only the entry point opens the window, and it imports the UI lazily inside a function, so
    `gpuplanner plan` and friends never load Qt."""
    entry = REPO_ROOT / "gpuplanner" / "cli.py"
    files = [
        p
        for p in python_files("gpuplanner")
        if "ui" not in p.relative_to(REPO_ROOT / "gpuplanner").parts[:1] and p != entry
    ]
    files += python_files("trainer")
    assert violations(files, ("gpuplanner.ui",)) == []
    assert [m for m in module_level_imports(entry) if m.startswith("gpuplanner.ui")] == []


def test_cli_commands_do_not_load_qt(tmp_path: Path) -> None:
    code = (
        "import sys; from gpuplanner.cli import main; main(['plan', '--model', 'gpt2', '--json']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_plan_is_pure() -> None:
    others = (
        "gpuplanner.history",
        "gpuplanner.launch",
        "gpuplanner.export",
        "gpuplanner.ui",
        "gpuplanner.cli",
        "gpuplanner.commands",
        "sqlite3",
        "sqlite_utils",
        "paramiko",
        "socket",
    )
    assert violations(python_files("gpuplanner/plan"), others) == []


def test_protocol_imports_nothing_heavy() -> None:
    heavy = ("torch", "transformers", "numpy", "pynvml", "peft")
    assert violations([REPO_ROOT / "trainer" / "protocol.py"], heavy) == []


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom PySide6.QtCore import QObject\n")
    assert imported_modules(bad) == [(1, "os"), (2, "PySide6.QtCore")]
