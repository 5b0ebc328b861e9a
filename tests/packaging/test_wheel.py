"""The wheel carries resources/: build it, install it in a fresh virtual environment, run it elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_installed_wheel_finds_its_resources(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    wheel = next(dist.glob("gpuplanner-*.whl"))
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    # Dependencies come from the test environment's site-packages, appended after the fresh one,
    # so `gpuplanner` itself can only be the installed wheel (a plain path in a .pth does not run
    # the editable install's own .pth hooks).
    fresh_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (fresh_site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import gpuplanner.resources as r; print(r.resources_dir())"],
        check=True,
        capture_output=True,
        text=True,
        cwd=elsewhere,
    ).stdout.strip()
    assert Path(where).is_relative_to(fresh_site) and Path(where).name == "_resources"
    result = subprocess.run(
        [str(env_dir / "bin" / "gpuplanner"), "compare", "--json"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows[0]["rank"] == 1 and rows[0]["gpu"] and rows[0]["cost_usd"] > 0
