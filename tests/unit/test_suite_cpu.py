"""``GPUPLANNER_TEST_CPU_LOG`` (tests/conftest.py) and its summary (tests/benchmarks/suite_cpu.py): each test's
CPU in its worker and in the processes it started, summed per file and per test."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CPU_LOG_ENV, REPO_ROOT
from tests.inner_pytest import run_inner_pytest

SUITE_CPU = REPO_ROOT / "tests" / "benchmarks" / "suite_cpu.py"

# one test that starts a process and waits for it, one that starts nothing
TESTS = """
import subprocess, sys

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)

def test_starts_nothing():
    assert True
"""


def test_each_test_gets_a_line_with_its_own_and_its_childrens_cpu(tmp_path: Path, capsys) -> None:
    log = tmp_path / "cpu.jsonl"
    files = {
        "conftest.py": (REPO_ROOT / "tests" / "conftest.py").read_text(),
        "test_cpu.py": TESTS,
        "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
    }
    out = run_inner_pytest(tmp_path, files, ["-q", "-p", "no:cacheprovider", str(tmp_path)], {CPU_LOG_ENV: str(log)})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line["test"]: line for line in map(json.loads, log.read_text().splitlines())}
    assert set(lines) == {"test_cpu.py::test_starts_a_process", "test_cpu.py::test_starts_nothing"}
    started, idle = lines["test_cpu.py::test_starts_a_process"], lines["test_cpu.py::test_starts_nothing"]
    assert started["children_cpu_s"] > 0 and idle["children_cpu_s"] == 0
    assert all(line["wall_s"] >= 0 and line["cpu_s"] >= 0 for line in lines.values())

    # the summary: one file, its total the sum of both tests' CPU, the costlier test listed first
    total = sum(line["cpu_s"] + line["children_cpu_s"] for line in lines.values())
    sys_argv = sys.argv
    sys.argv = [str(SUITE_CPU), str(log)]
    try:
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(str(SUITE_CPU), run_name="__main__")
    finally:
        sys.argv = sys_argv
    assert ended.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"2 tests, {total:.0f} CPU-s in all")
    assert f"{total:8.1f} 100.0%  test_cpu.py" in printed
    assert printed.index("test_starts_a_process") < printed.index("test_starts_nothing")


def test_a_missing_log_is_one_line_naming_it(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(SUITE_CPU), str(tmp_path / "none.jsonl")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and f"{tmp_path / 'none.jsonl'}: no such file" in out.stderr
    assert "Traceback" not in out.stderr
