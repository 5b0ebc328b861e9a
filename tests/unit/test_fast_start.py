"""The window imports the history without sqlite-utils' optional pandas support (start-up), and pandas
still imports afterwards for whoever asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from gpuplanner.app.fast_start import import_history_without_pandas
import_history_without_pandas()
import sqlite_utils.db
assert "pandas" not in sys.modules and sqlite_utils.db.pd is None
import pandas
assert sys.modules["pandas"] is pandas
print("ok")
"""


def test_history_imports_without_pandas_and_pandas_still_imports() -> None:
    pytest.importorskip("pandas")  # without pandas there is nothing to hide
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
