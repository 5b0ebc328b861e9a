"""A history that is locked past the wait, or read-only: every writing command says so in one line and
exits 1, with nothing changed (issue 27 item 11: `runs tag`, `hosts add` and `hosts set-price` raised
sqlite3.OperationalError)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history import db as history_db
from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run

WRITERS = [
    ("runs", "tag", "1", "project=x"),
    ("hosts", "add", "box", "--hostname", "10.0.0.9"),
    ("hosts", "set-price", "local", "2.5"),
]


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "h" / "history.sqlite"
    with open_db(path) as db:
        create_run(db, name="one")
    return path


def _one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], db: Path) -> str:
    code = main([*argv, "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 1, (argv, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_history_locked_past_the_wait_is_one_line(
    history: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_db, "BUSY_TIMEOUT_MS", 100)
    holder = sqlite3.connect(history, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction, held
    try:
        for argv in WRITERS:
            err = _one_line(capsys, argv, history)
            assert f"gpuplanner {argv[0]}: error: the run history is locked by another process" in err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with open_db(history) as db:
        assert db.execute("SELECT COUNT(*) FROM run_tags").fetchone()[0] == 0


def test_sqlite_errors_read_as_what_to_do() -> None:
    assert "read-only" in history_db.explain_error(sqlite3.OperationalError("attempt to write a readonly database"))
    assert "locked by another process" in history_db.explain_error(sqlite3.OperationalError("database is locked"))
    full = history_db.explain_error(sqlite3.OperationalError("database or disk is full"))
    assert "could not be written" in full and "nothing was changed" in full
