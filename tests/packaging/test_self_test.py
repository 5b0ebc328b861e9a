"""`gpuplanner --self-test`: the checks report PASS/FAIL/SKIP, and the whole thing passes here, offscreen."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.ui import self_test
from tests.conftest import REPO_ROOT


def test_summary_passes_with_skips_and_fails_with_a_reason() -> None:
    out = io.StringIO()
    runner = self_test.SelfTest(out)
    runner.check("good", lambda: "fine")

    def skipped() -> str:
        raise self_test.Skip("no torch here")

    runner.check("training", skipped)
    assert runner.summary() == 0
    assert out.getvalue().splitlines() == [
        "PASS good: fine",
        "SKIP training: no torch here",
        "self-test: passed (1 checks, 1 skipped (training))",
    ]

    def broken() -> str:
        raise ModuleNotFoundError("No module named 'pyqtgraph.x'")

    runner.check("imports", broken)
    assert runner.summary() == 1
    assert "FAIL imports: ModuleNotFoundError: No module named 'pyqtgraph.x'" in out.getvalue()
    assert out.getvalue().splitlines()[-1].startswith("self-test: FAILED (1 of 3 checks): imports:")


def test_private_environment_keeps_the_users_folders_untouched(tmp_path: Path) -> None:
    before = dict(os.environ)
    with self_test.private_environment(tmp_path):
        from gpuplanner.history.db import resolve_db_path
        from gpuplanner.paths import config_dir, data_dir

        assert data_dir() == tmp_path / "data" and config_dir() == tmp_path / "config"
        assert resolve_db_path().is_relative_to(tmp_path)
        assert os.environ["QT_QPA_PLATFORM"] == "offscreen"
        assert os.environ["XDG_CONFIG_HOME"] == str(tmp_path / "xdg-config")
    assert dict(os.environ) == before


def test_finite_numbers_are_checked_deeply() -> None:
    self_test._finite_numbers({"a": [1, 2.5, None, "x", True], "b": {"c": 0.0}})
    with pytest.raises(ValueError, match=r"rows\[1\].cost_usd"):
        self_test._finite_numbers([{"cost_usd": 1.0}, {"cost_usd": float("inf")}], "rows")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_self_test_passes_offscreen(tmp_path: Path) -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "gpuplanner", "--self-test"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=400,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("self-test: passed"), output
    for name in ("resources", "imports", "planner", "window", "plots", "plan pane", "training"):
        assert any(line.startswith(f"PASS {name}:") for line in lines), f"{name} did not pass:\n{output}"
    assert sum(line.startswith("PASS pane ") for line in lines) >= 4, output
    # Nothing was written to the user's data folder (the test's private one stands in for it).
    assert not Path(os.environ["GPUPLANNER_DATA_DIR"]).exists() or not any(
        Path(os.environ["GPUPLANNER_DATA_DIR"]).iterdir()
    )
