"""The history file and the settings folder are the user's alone (issue 27 item 6): the history is created
0600 in a 0700 data folder (its -wal and -shm files follow), an older 0644 history is tightened when opened,
a folder the user chose for --db is left as it is, and a device given as --db is never chmodded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run
from gpuplanner.paths import config_dir, data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_history_is_private_with_its_wal() -> None:
    previous = os.umask(0o022)
    try:
        with open_db() as db:
            create_run(db, name="a run")
    finally:
        os.umask(previous)
    folder = data_dir()
    files = sorted(folder.glob("history.sqlite*"))
    assert folder / "history.sqlite" in files
    assert mode(folder) == 0o700
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_an_older_readable_history_is_tightened(tmp_path: Path) -> None:
    file = tmp_path / "chosen" / "h.sqlite"
    with open_db(file) as db:
        create_run(db, name="a run")
    os.chmod(file, 0o644)
    os.chmod(file.parent, 0o755)
    with open_db(file) as db:
        assert db.execute("SELECT name FROM runs").fetchone()[0] == "a run"
    assert mode(file) == 0o600
    assert mode(file.parent) == 0o755  # a folder the user chose is theirs to set


def test_a_device_is_never_chmodded() -> None:
    before = mode(Path("/dev/null"))
    with pytest.raises(Exception):  # noqa: B017, PT011 (whatever SQLite says, /dev/null keeps its mode)
        with open_db("/dev/null") as db:
            create_run(db)
    assert mode(Path("/dev/null")) == before


def test_the_settings_folder_is_private() -> None:
    from gpuplanner.ui.settings import app_settings  # the window's settings, as the window opens them

    folder = config_dir()
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    settings = app_settings()
    settings.setValue("probe", 1)
    settings.sync()
    assert mode(folder) == 0o700 and (folder / "window.ini").exists()
