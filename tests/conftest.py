"""Shared test setup: Qt offscreen before any QApplication exists, a private config and data dir."""

from __future__ import annotations

import os
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
