"""Shared test setup: Qt offscreen before any QApplication exists, a private config and data dir."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the real user's settings or history."""
    base = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("GPUPLANNER_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("GPUPLANNER_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("GPUPLANNER_CACHE_DIR", str(base / "cache"))
    monkeypatch.delenv("GPUPLANNER_DB", raising=False)


# -- the time budget of an unmarked test (issue 25) --------------------------------------------------------
# An unmarked test whose call phase takes longer than BUDGET_S of wall time fails: slow tests are marked
# ``slow`` (real training, real sshd, real searches) or made fast (a protocol fake, a barrier). The budget is
# scaled by the machine's load so a busy machine does not make the suite flaky: BUDGET_S x max(1, load
# average over the last minute / CPU count). ``GPUPLANNER_TEST_BUDGET_S`` sets BUDGET_S (0: no budget).
BUDGET_S = 5.0
BUDGET_ENV = "GPUPLANNER_TEST_BUDGET_S"


def time_budget_s() -> tuple[float, str]:
    """The wall-time budget of an unmarked test's call phase now, and how it was reached (for the message)."""
    try:
        base = float(os.environ.get(BUDGET_ENV, BUDGET_S))
    except ValueError:
        base = BUDGET_S
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        load = 0.0
    scale = max(1.0, load / cpus)
    return base * scale, f"{base:g} s x max(1, load {load:.2f} / {cpus} CPUs)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or item.get_closest_marker("slow") is not None:
        return
    budget, how = time_budget_s()
    if budget > 0 and call.duration > budget:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid}: the call took {call.duration:.1f} s, over the {budget:.1f} s budget of an unmarked"
            f" test ({how}); mark it `slow` or make it wait on a barrier instead of a clock"
        )


# -- where the suite's CPU goes (issue 25) ----------------------------------------------------------------
# ``GPUPLANNER_TEST_CPU_LOG=FILE`` appends one JSON line per test: its wall time (setup, call and teardown)
# and the CPU seconds it used in the worker and in the processes it started and reaped (a trainer run, a
# monitor, ssh); what daemons it talked to (sshd's sessions, slurmd's jobs) spent is not counted. The suite
# is CPU-bound on two cores, so this, not wall time, says which tests to make cheaper:
# `tests/benchmarks/suite_cpu.py FILE` sums it per test and per file.
CPU_LOG_ENV = "GPUPLANNER_TEST_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    path = os.environ.get(CPU_LOG_ENV)
    if not path:
        return (yield)
    import json
    import resource
    import time

    def cpu(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    start = (time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN))
    result = yield
    line = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - start[0], 3),
        "cpu_s": round(cpu(resource.RUSAGE_SELF) - start[1], 3),
        "children_cpu_s": round(cpu(resource.RUSAGE_CHILDREN) - start[2], 3),
    }
    with open(path, "a", encoding="utf-8") as log:  # one short append per line: workers do not interleave
        log.write(json.dumps(line) + "\n")
    return result


# Launching on this machine first checks, once per process, that an interpreter can import torch and
# transformers (seconds; more on a busy machine): done in the setup phase of a test that may launch, so the
# budget above measures the test, not which test of a worker happened to launch first.
LAUNCHING_DIRS = ("launch", "sweep", "ui", "history", "trainer")


def pytest_runtest_setup(item: pytest.Item) -> None:
    parts = Path(str(item.path)).relative_to(REPO_ROOT).parts if str(item.path).startswith(str(REPO_ROOT)) else ()
    if len(parts) > 1 and parts[0] == "tests" and parts[1] in LAUNCHING_DIRS and not item.get_closest_marker("slow"):
        from gpuplanner.launch import local_backend
        from gpuplanner.launch.hosts import HostError

        try:
            local_backend.find_python()
        except HostError:
            pass  # no trainer interpreter: the test that launches says so itself


# -- xdist groups under pytest 9.2 ---------------------------------------------------------------------
# `--dist loadgroup` sends the tests of one ``xdist_group`` to one worker (the Slurm tests share one cluster
# per worker; the window's host and run panes share one launcher) by giving each a node id ending in
# ``@group``. pytest-xdist 3.8 writes that id to ``item._nodeid``, which pytest 9.2 no longer reads (node
# ids became ``NodeId`` values in ``item._id``), so every group was silently spread over both workers. This
# hook, after xdist's, gives the id its suffix where xdist's did not take (tests/unit/test_xdist_groups.py).
def xdist_group_names(item: pytest.Item) -> list[str]:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return sorted(names)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set on the workers of `--dist loadgroup`
        return
    for item in items:
        names = xdist_group_names(item)
        if not names or item.nodeid.rfind("@") > item.nodeid.rfind("]"):  # no group, or xdist's suffix took
            continue
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")  # type: ignore[attr-defined]


# -- Qt tests collect Python's cycles on the GUI thread only (gpuplanner/ui/gui_gc.py) -------------------------
# Without it a pane's worker thread (computing a plan, reading the history) could run the collector and
# finalise Qt objects of an earlier test's window there: "QBasicTimer::stop: Failed. Possibly trying to stop
# from a different thread", and a heap corrupted by a widget destroyed off the GUI thread. The window's
# deferred deletions and a last collection happen on this thread before the next test starts.
@pytest.fixture(autouse=True)
def _gc_on_the_gui_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    if "qtbot" not in request.fixturenames:
        yield
        return
    from PySide6.QtCore import QCoreApplication, QEvent

    from gpuplanner.ui.gui_gc import GuiThreadCollector

    request.getfixturevalue("qapp")
    collector = GuiThreadCollector()
    collector.start()
    yield
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    collector.stop()
