"""A pytest run inside a test: the suite's own hooks (tests/conftest.py) checked on a few made-up tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import CPU_LOG_ENV, REPO_ROOT


def run_inner_pytest(
    folder: Path, files: dict[str, str], args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Write ``files`` (name -> text) into ``folder`` and run ``python -m pytest ARGS`` there, with this
    repository importable, no plugin loaded unless ``args`` names it (Qt and the rest cost seconds per start),
    the outer run's CPU log left alone, and ``env`` added."""
    for name, text in files.items():
        (folder / name).write_text(text)
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})}
    if CPU_LOG_ENV not in (env or {}):
        environment.pop(CPU_LOG_ENV, None)  # the inner tests are not the suite's
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
