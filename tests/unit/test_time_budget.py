"""The time budget of an unmarked test (tests/conftest.py): a test over it fails with a message naming the
budget and the load it was scaled by; a ``slow`` test is never held to it; the budget grows with the load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import BUDGET_ENV, REPO_ROOT, time_budget_s
from tests.inner_pytest import run_inner_pytest

# A test that waits on a pipe the test writes to only after 0.3 s: it lasts at least that long on any
# machine, and the budget it is held to (0.001 s x the load) is far below that.
WAITS = """
import os, threading, time
import pytest

def _late(fd):
    time.sleep(0.3)
    os.write(fd, b"x")

def wait_on_pipe():
    r, w = os.pipe()
    threading.Thread(target=_late, args=(w,)).start()
    assert os.read(r, 1) == b"x"

def test_unmarked_over_budget():
    wait_on_pipe()

@pytest.mark.slow
def test_marked_slow():
    wait_on_pipe()

def test_quick():
    assert True
"""


def test_an_unmarked_test_over_its_budget_fails_and_a_slow_one_passes(tmp_path: Path) -> None:
    files = {
        "conftest.py": (REPO_ROOT / "tests" / "conftest.py").read_text(),
        "test_waits.py": WAITS,
        "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
    }
    out = run_inner_pytest(tmp_path, files, ["-q", "-p", "no:cacheprovider", str(tmp_path)], {BUDGET_ENV: "0.001"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 2 passed" in out.stdout, out.stdout
    assert "FAILED test_waits.py::test_unmarked_over_budget" in out.stdout
    assert "over the" in out.stdout and "budget of an unmarked test (0.001 s x max(1, load" in out.stdout
    assert "mark it `slow`" in out.stdout


def test_the_budget_scales_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = os.cpu_count() or 1
    monkeypatch.setenv(BUDGET_ENV, "5")
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * cpus, 0.0, 0.0))
    budget, how = time_budget_s()
    assert budget == pytest.approx(20.0) and how == f"5 s x max(1, load {4.0 * cpus:.2f} / {cpus} CPUs)"
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert time_budget_s()[0] == pytest.approx(5.0)  # a quiet machine: never below the base
    monkeypatch.setenv(BUDGET_ENV, "0")
    assert time_budget_s()[0] == 0.0  # no budget
