"""A deleted run's id is never given again (issue 27 item 2): runs.id had no AUTOINCREMENT, so after
`runs delete` of the newest run the next run took its id (and its folder, and resumed from its checkpoint).
Schema v9 keeps every deleted id; an older history migrates and keeps its ids."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run, delete_run


def test_a_deleted_runs_id_is_never_given_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.sqlite"
    with open_db(path) as db:
        ids = [create_run(db, name=f"r{i}") for i in range(3)]
        assert ids == [1, 2, 3]
        delete_run(db, 3)
        assert create_run(db, name="after the newest was deleted") == 4
    assert main(["runs", "delete", "4", "--db", str(path)]) == 0
    capsys.readouterr()
    with open_db(path) as db:
        db.execute("DELETE FROM runs")  # whatever deletes the rows, their ids stay taken
        assert create_run(db, name="in an emptied history") == 5
        assert sorted(r[0] for r in db.execute("SELECT id FROM deleted_run_ids")) == [1, 2, 3, 4]


def test_a_v8_history_migrates_and_goes_on_above_its_ids(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with open_db(path) as db:
        for i in range(2):
            create_run(db, name=f"r{i}")
    raw = sqlite3.connect(path)  # back to v8: without the tombstones, as an older version left it
    raw.executescript(
        "DROP TRIGGER runs_keep_deleted_ids; DROP TABLE deleted_run_ids;"
        " DELETE FROM _sqlite_migrations WHERE name = 'm010_run_ids_never_reused'; PRAGMA user_version = 8;"
    )
    raw.close()
    with open_db(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 10
        delete_run(db, 2)
        assert create_run(db, name="new") == 3
