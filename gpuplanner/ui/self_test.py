"""``gpuplanner --self-test``: prove that this installation works, headless, without touching the user's data.

It runs in a private temporary data and settings folder with ``QT_QPA_PLATFORM=offscreen`` and
prints one line per check (``PASS``, ``FAIL`` or ``SKIP`` and a detail), then a summary line:

- ``resources``: the shipped data, the icon and the trainer's sources (the payload) are where the
  app looks for them (checkout, installed wheel or frozen bundle alike);
- ``imports``: every ``gpuplanner`` module and the libraries loaded at run time import (a frozen
  bundle that misses one fails here with the ``ModuleNotFoundError``);
- ``planner``: the rows of ``gpuplanner compare --json`` on the example workload are ranked and finite;
- ``window``, one ``pane ...`` line per pane, ``plots``: the main window opens, every pane is
  shown and grabbed to a non-empty image, and so is every pyqtgraph plot;
- ``plan pane``: the Plan pane's comparison table fills in;
- ``trainer python`` and ``training``: a tiny local run of the bundled trainer (CPU, so its GPU
  telemetry is simulated) is ingested into the history, which must hold its step records and GPU
  samples marked simulated. Without a Python that has torch (see :mod:`gpuplanner.trainer_python`)
  both are reported ``SKIP`` with the reason and do not fail the self-test.

Exit status 0 when nothing failed (skips allowed), 1 otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import math
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

TRAIN_DEADLINE_S = 300.0
PANE_SETTLE_S = 10.0
THIRD_PARTY_MODULES = (
    "numpy",
    "pyqtgraph",
    "pyqtgraph.exporters",
    "sqlite_utils",
    "paramiko",
    "pynvml",
    "PySide6.QtCore",
    "PySide6.QtGui",
    "PySide6.QtWidgets",
    "PySide6.QtSvg",
    "trainer.protocol",
)
# Trainer settings of the self-test's run: the demo model, a handful of steps, simulated GPU telemetry.
TRAIN_ARGS = (
    "--seq-len",
    "64",
    "--micro-batch",
    "4",
    "--max-steps",
    "12",
    "--device",
    "cpu",
    "--gpu-interval-s",
    "0.2",
    "--log-interval-s",
    "0",
    "--checkpoint-every-minutes",
    "0",
    "--num-workers",
    "0",
    "--no-events-stdout",
)


class Skip(Exception):
    """A check that cannot run here; the message says why (reported, not a failure)."""


class SelfTest:
    """Runs named checks in order, printing one line each; remembers failures and skips."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.failures: list[str] = []
        self.skips: list[str] = []
        self.passed = 0

    def line(self, status: str, name: str, detail: str) -> None:
        print(f"{status} {name}: {detail}", file=self.out, flush=True)

    def check(self, name: str, fn: Callable[[], str]) -> bool:
        try:
            detail = fn()
        except Skip as exc:
            self.skips.append(name)
            self.line("SKIP", name, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - a self-test reports every failure and goes on
            reason = f"{type(exc).__name__}: {exc}"
            self.failures.append(f"{name}: {reason}")
            self.line("FAIL", name, reason)
            if os.environ.get("GPUPLANNER_SELF_TEST_TRACEBACK"):
                traceback.print_exc(file=self.out)
            return False
        self.passed += 1
        self.line("PASS", name, detail)
        return True

    def summary(self) -> int:
        if self.failures:
            print(
                f"self-test: FAILED ({len(self.failures)} of {self.passed + len(self.failures) + len(self.skips)}"
                f" checks): {'; '.join(self.failures)}",
                file=self.out,
                flush=True,
            )
            return 1
        skipped = f", {len(self.skips)} skipped ({', '.join(self.skips)})" if self.skips else ""
        print(f"self-test: passed ({self.passed} checks{skipped})", file=self.out, flush=True)
        return 0


# ----------------------------------------------------------------------------------------- setup


@contextlib.contextmanager
def private_environment(root: Path) -> Iterator[Path]:
    """Point data, settings, history and Qt's settings at ``root``; restore the environment after."""
    saved = dict(os.environ)
    values = {
        "GPUPLANNER_DATA_DIR": root / "data",
        "GPUPLANNER_CONFIG_DIR": root / "config",
        "XDG_CONFIG_HOME": root / "xdg-config",  # Qt's old settings place (read once to migrate)
        "XDG_DATA_HOME": root / "xdg-data",
        "XDG_CACHE_HOME": root / "xdg-cache",
    }
    for key, path in values.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[key] = str(path)
    os.environ.pop("GPUPLANNER_DB", None)
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    try:
        yield root
    finally:
        os.environ.clear()
        os.environ.update(saved)


# ---------------------------------------------------------------------------------------- checks


def check_resources() -> str:
    from gpuplanner.resources import is_frozen, resource_path, resources_dir, trainer_source_dir

    folder = resources_dir()
    for parts in (
        ("catalog", "gpus.toml"),
        ("catalog", "prices.csv"),
        ("models", "presets.json"),
        ("demo", "tiny-gpt2.json"),
        ("icons", "gpuplanner.svg"),
    ):
        resource_path(*parts)
    payload = trainer_source_dir()
    missing = [
        name
        for name in ("__init__.py", "__main__.py", "cli.py", "loop.py", "protocol.py")
        if not (payload / name).is_file()
    ]
    if missing:
        raise FileNotFoundError(f"trainer sources in {payload} lack {', '.join(missing)}")
    where = "frozen bundle" if is_frozen() else "installed" if folder.name == "_resources" else "checkout"
    return f"{where}: {folder}; trainer sources {payload}"


def _gpuplanner_modules() -> list[str]:
    import gpuplanner

    names = []
    for info in pkgutil.walk_packages(gpuplanner.__path__, "gpuplanner."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        names.append(info.name)
    return names


def check_imports() -> str:
    names = _gpuplanner_modules()
    if len(names) < 10:
        raise RuntimeError(f"found only {len(names)} gpuplanner modules: {', '.join(names)}")
    for name in [*THIRD_PARTY_MODULES, *names]:
        importlib.import_module(name)
    return f"{len(names)} gpuplanner modules and {len(THIRD_PARTY_MODULES)} libraries"


def _finite_numbers(value: Any, where: str = "") -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _finite_numbers(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite_numbers(item, f"{where}[{i}]")


def check_planner() -> str:
    from gpuplanner.app.compare_row import example_comparison
    from gpuplanner.export.tables import to_json

    rows = json.loads(to_json(example_comparison()))  # the rows of `gpuplanner compare --json`
    if not rows:
        raise RuntimeError("the comparison table is empty")
    _finite_numbers(rows, "rows")
    best = rows[0]
    if best.get("rank") != 1 or not (isinstance(best.get("cost_usd"), (int, float)) and best["cost_usd"] > 0):
        raise RuntimeError(f"the best row has no rank 1 and positive cost: {best}")
    from gpuplanner.ui.human import human_money

    return (
        f"{len(rows)} rows; best {best.get('gpus')} x {best.get('gpu')} {best.get('pricing')}"
        f" {human_money(best['cost_usd'])} in {best.get('hours', float('nan')):.1f} h"
    )


# ------------------------------------------------------------------------------------ window part


def _process_events(seconds: float = 0.0) -> None:
    from PySide6.QtCore import QCoreApplication, QEventLoop

    end = time.monotonic() + seconds
    while True:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        if time.monotonic() >= end:
            return
        time.sleep(0.01)


def _image_detail(widget: Any) -> str:
    """Grab ``widget``; raise unless the image is non-empty and not a single flat colour."""
    image = widget.grab().toImage()
    if image.isNull() or image.width() < 8 or image.height() < 8:
        raise RuntimeError(f"{type(widget).__name__} grabbed an empty image ({image.width()}x{image.height()})")
    colours = set()
    step_x, step_y = max(1, image.width() // 40), max(1, image.height() // 40)
    for y in range(0, image.height(), step_y):
        for x in range(0, image.width(), step_x):
            colours.add(image.pixel(x, y))
    if len(colours) < 2:
        raise RuntimeError(f"{type(widget).__name__} rendered one flat colour")
    return f"{image.width()}x{image.height()}, {len(colours)} colours"


def _panes(window: Any) -> list[Any]:
    """The window's panes: ``window.panes`` when it has them, else its widgets named ``*Pane``."""
    from PySide6.QtWidgets import QWidget

    declared = getattr(window, "panes", None)
    if declared:
        return list(declared)
    seen: list[Any] = []
    for widget in window.findChildren(QWidget):
        if type(widget).__name__.endswith("Pane") and widget not in seen:
            seen.append(widget)
    return seen


def _show_pane(window: Any, pane: Any) -> None:
    """Make ``pane`` the current page of whichever tab or stack widget holds it."""
    from PySide6.QtWidgets import QStackedWidget, QTabWidget

    child, parent = pane, pane.parentWidget()
    while parent is not None and parent is not window:
        if isinstance(parent, (QStackedWidget, QTabWidget)) and parent.indexOf(child) >= 0:
            parent.setCurrentIndex(parent.indexOf(child))
        child, parent = parent, parent.parentWidget()


class WindowChecks:
    """The main window and its panes, built once, checked one pane at a time."""

    def __init__(self, selftest: SelfTest) -> None:
        self.selftest = selftest
        self.app: Any = None
        self.window: Any = None
        self.panes: list[Any] = []

    def open(self) -> str:
        from PySide6.QtWidgets import QApplication

        from gpuplanner.ui.main_window import MainWindow
        from gpuplanner.ui.services import AppServices

        self.app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "gpuplanner"])
        started = time.monotonic()
        self.window = MainWindow(AppServices.from_environment())
        self.window.resize(1280, 800)
        self.window.show()
        _process_events(0.2)
        self.panes = _panes(self.window)
        if not self.panes:
            raise RuntimeError("the main window has no panes")
        names = ", ".join(type(p).__name__ for p in self.panes)
        return f"shown in {time.monotonic() - started:.2f} s with {len(self.panes)} panes ({names})"

    def visit(self, pane: Any) -> str:
        _show_pane(self.window, pane)
        _process_events(0.3)
        if not pane.isVisible():
            raise RuntimeError(f"{type(pane).__name__} is not visible after selecting it")
        return _image_detail(pane)

    def plots(self) -> str:
        import pyqtgraph as pg

        count = 0
        for pane in self.panes:
            _show_pane(self.window, pane)
            _process_events(0.2)
            for plot in pane.findChildren(pg.GraphicsView):
                if not plot.isVisible():
                    continue
                _image_detail(plot)
                count += 1
        if count == 0:
            raise RuntimeError("no visible pyqtgraph plot in any pane")
        return f"{count} plots rendered"

    def plan_table(self) -> str:
        from PySide6.QtWidgets import QAbstractItemView

        plan = next((p for p in self.panes if type(p).__name__ == "PlanPane"), None)
        if plan is None:
            raise RuntimeError("no PlanPane in the window")
        _show_pane(self.window, plan)
        deadline = time.monotonic() + PANE_SETTLE_S
        while time.monotonic() < deadline:
            for view in plan.findChildren(QAbstractItemView):
                model = view.model()
                if model is not None and model.rowCount() > 0 and model.columnCount() > 1:
                    return f"{model.rowCount()} rows in the comparison table"
            _process_events(0.1)
        raise RuntimeError(f"the Plan pane's table stayed empty for {PANE_SETTLE_S:.0f} s")

    def close(self) -> str:
        from PySide6.QtCore import QThreadPool

        if self.window is not None:
            self.window.close()
            _process_events(0.2)
            self.window.deleteLater()
            _process_events(0.1)
            self.window = None
        if not QThreadPool.globalInstance().waitForDone(10_000):
            raise RuntimeError("worker threads still running 10 s after the window closed")
        return "closed"


# ---------------------------------------------------------------------------------- training part


def train_tiny_run(python: Path, run_dir: Path, db_path: Path, *, deadline_s: float = TRAIN_DEADLINE_S) -> str:
    """Train the demo model a few steps with ``python``, ingest its events, check the history holds them."""
    from gpuplanner.history.db import open_db
    from gpuplanner.history.runs import create_run, get_run
    from gpuplanner.history.stored_records import record_counts
    from gpuplanner.history.tail import ingest_file
    from gpuplanner.resources import resource_path
    from gpuplanner.trainer_python import trainer_env

    command = [
        str(python),
        "-m",
        "trainer",
        "train",
        "--run-dir",
        str(run_dir),
        "--model-config",
        str(resource_path("demo", "tiny-gpt2.json")),
        "--data",
        str(resource_path("demo", "corpus")),
        *TRAIN_ARGS,
    ]
    env = trainer_env()
    env.setdefault("OMP_NUM_THREADS", "1")
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=deadline_s,
            cwd=run_dir.parent,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the tiny run did not finish within {deadline_s:.0f} s") from None
    seconds = time.monotonic() - started
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"trainer exited {result.returncode}: {tail}")
    db = open_db(db_path)
    try:
        run_id = create_run(db, name="self-test", host="localhost", gpu_count=1, source=str(run_dir))
        ingest_file(db, run_id, run_dir)
        counts = record_counts(db, run_id)
        steps, gpu_all, gpu_sim = counts.steps, counts.gpu_samples, counts.simulated_gpu_samples
        status = get_run(db, run_id).status
    finally:
        db.close()
    if steps < 1:
        raise RuntimeError("the history holds no step records of the run")
    if gpu_all < 1 or gpu_sim != gpu_all:
        raise RuntimeError(f"expected simulated GPU samples only, got {gpu_sim} simulated of {gpu_all}")
    if status != "finished":
        raise RuntimeError(f"the run's status in the history is {status!r}, not 'finished'")
    return f"{steps} steps and {gpu_all} simulated GPU samples in the history, {seconds:.1f} s"


# ------------------------------------------------------------------------------------------ main


def run_self_test(out: TextIO | None = None, *, train: bool = True) -> int:
    """Run every check; returns the exit status (0 passed, 1 failed)."""
    out = out or sys.stdout
    selftest = SelfTest(out)
    print(
        f"self-test: gpuplanner {_version()} on Python {sys.version.split()[0]}"
        f"{' (frozen)' if getattr(sys, 'frozen', False) else ''}",
        file=out,
        flush=True,
    )

    # The Python for the trainer is looked up in the user's real environment (their own
    # trainer venv lives in their data folder), before everything moves to the private folder.
    lookup: Any = None

    def find_python() -> str:
        nonlocal lookup
        if not train:
            raise Skip("training not requested")
        from gpuplanner.trainer_python import find_trainer_python

        lookup = find_trainer_python()
        if lookup.python is None:
            raise Skip(lookup.message)
        return lookup.message

    root = Path(tempfile.mkdtemp(prefix="gpuplanner-self-test-"))
    try:
        with private_environment(root):
            selftest.check("resources", check_resources)
            selftest.check("imports", check_imports)
            selftest.check("planner", check_planner)
            window = WindowChecks(selftest)
            if selftest.check("window", window.open):
                for pane in window.panes:
                    selftest.check(f"pane {type(pane).__name__}", functools.partial(window.visit, pane))
                selftest.check("plots", window.plots)
                selftest.check("plan pane", window.plan_table)
            selftest.check("window closed", window.close)
        selftest.check("trainer python", find_python)
        with private_environment(root):

            def training() -> str:
                if lookup is None or lookup.python is None:
                    raise Skip("no Python with torch (see 'trainer python' above)")
                from gpuplanner.history.db import resolve_db_path

                run_dir = root / "runs" / "self-test"
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                return train_tiny_run(lookup.python.executable, run_dir, resolve_db_path())

            selftest.check("training", training)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return selftest.summary()


def _version() -> str:
    from gpuplanner import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    return run_self_test(train="--no-train" not in (argv or []))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
