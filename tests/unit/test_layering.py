"""What the import-linter contracts in ``pyproject.toml`` cannot say about the layers.

``lint-imports`` checks the one-way layers, the trainer's independence and where Qt may be imported.
These tests check the rest: the entry point loads the window only inside a function (so a CLI command
never pays for Qt, checked at run time too), and every part of ``gpuplanner`` has a place in the layers
(a new package cannot slip past the contracts).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO_ROOT

QT_MODULES = ("PySide6", "pyqtgraph", "shiboken6")


def module_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def contracts() -> list[dict]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def test_the_entry_point_imports_the_window_only_inside_functions() -> None:
    imports = module_level_imports(REPO_ROOT / "gpuplanner" / "cli.py")
    assert imports, "no imports found in cli.py"
    assert [m for m in imports if m.startswith("gpuplanner.ui") or m.split(".")[0] in QT_MODULES] == []


def test_cli_commands_do_not_load_qt(tmp_path: Path) -> None:
    code = (
        "import sys; from gpuplanner.cli import main; main(['plan', '--model', 'gpt2', '--json']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_every_part_of_gpuplanner_has_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")
    assert layers["containers"] == ["gpuplanner"]
    tails = [tail.strip() for layer in layers["layers"] for tail in layer.split("|")]
    required = {f"gpuplanner.{t}" for t in tails if not t.startswith("(")}
    optional = {f"gpuplanner.{t.strip('()')}" for t in tails if t.startswith("(")}
    parts = {
        f"gpuplanner.{p.stem if p.is_file() else p.name}"
        for p in (REPO_ROOT / "gpuplanner").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
    }
    assert parts, "no gpuplanner parts found"
    assert sorted(parts - required - optional) == []
    assert sorted(required - parts) == []


def test_every_qt_free_window_module_is_held_to_it() -> None:
    """A module of gpuplanner/ui that loads no Qt (directly or through other window modules) is listed in
    the Qt-free contract, so it stays Qt-free."""
    listed = set(next(c for c in contracts() if c["id"] == "qt-free-ui-modules")["source_modules"])
    imports: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "gpuplanner" / "ui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0]
        relative = path.relative_to(REPO_ROOT).with_suffix("")
        imports[".".join(relative.parts)] = modules

    def loads_qt(module: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            m.split(".")[0] in QT_MODULES or (m in imports and m not in seen and loads_qt(m, seen | {module}))
            for m in imports.get(module, [])
        )

    qt_free = {m for m in imports if not m.endswith("__init__") and not loads_qt(m)}
    assert {"gpuplanner.ui.plan.plan_inputs", "gpuplanner.ui.runs.run_telemetry"} <= qt_free
    assert sorted(qt_free - listed) == []


def test_the_window_and_the_commands_are_siblings_over_the_application_layer() -> None:
    """`ui` and `commands` are independent siblings above `app`; the window never imports the CLI's modules
    nor runs SQL itself (no sqlite3 or sqlite_utils import), and the commands never import the window."""
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    assert layers[:4] == ["cli", "ui | commands", "app", "sweep"]
    forbidden = {c["id"]: c for c in contracts() if c["type"] == "forbidden"}
    assert forbidden["ui-not-commands"]["source_modules"] == ["gpuplanner.ui"]
    assert forbidden["ui-not-commands"]["forbidden_modules"] == ["gpuplanner.commands"]
    assert forbidden["commands-not-ui"]["source_modules"] == ["gpuplanner.commands"]
    assert forbidden["commands-not-ui"]["forbidden_modules"] == ["gpuplanner.ui"]
    assert forbidden["ui-no-sql"]["source_modules"] == ["gpuplanner.ui"]
    assert {"sqlite3", "sqlite_utils"} <= set(forbidden["ui-no-sql"]["forbidden_modules"])
    assert {"PySide6", "argparse"} <= set(forbidden["app-headless"]["forbidden_modules"])


def test_lint_imports_holds() -> None:
    """Every import-linter contract is kept (the window imported four CLI modules and sqlite_utils before)."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


# No exceptions: a failed run's record moved to gpuplanner/history/failures.py with the run bookkeeping
SQL_IN_UI_ALLOWED: set[str] = set()


def test_the_window_runs_no_sql_of_its_own() -> None:
    """No window module calls ``execute`` on a database: its queries are functions of history/ or app/."""
    offenders = []
    for path in sorted((REPO_ROOT / "gpuplanner" / "ui").rglob("*.py")):
        if path.name in SQL_IN_UI_ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany", "executescript", "query")
        ]
    assert offenders == []
