"""Opening the history database: where it lives, connection settings, migrations with a backup first.

The file is ``--db`` if given, else ``$GPUPLANNER_DB``, else ``data_dir()/history.sqlite``. Every
connection uses WAL (readers never wait for the writer), foreign keys, and a busy timeout; writers
take the write lock up front (``BEGIN IMMEDIATE``) so a reader-turned-writer never fails with
"database is locked".
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlite_utils import Database

from gpuplanner.history.schema import MIGRATIONS, SCHEMA_VERSION
from gpuplanner.paths import data_dir, private_file, private_folder

DB_FILENAME = "history.sqlite"
BUSY_TIMEOUT_MS = 30_000


class HistoryError(Exception):
    """A request the history cannot serve (unknown run, newer schema, ...); the message says why."""


def resolve_db_path(cli_value: str | os.PathLike[str] | None = None) -> Path:
    """The database file: the ``--db`` value, else ``$GPUPLANNER_DB``, else the data directory's."""
    if cli_value:
        return Path(cli_value).expanduser()
    env = os.environ.get("GPUPLANNER_DB")
    if env:
        return Path(env).expanduser()
    return data_dir() / DB_FILENAME


def connect(path: str | os.PathLike[str]) -> Database:
    """A connection with the history's settings, without touching the schema."""
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    db = Database(conn)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA foreign_keys = ON")
    if db.journal_mode != "wal":
        db.enable_wal()
    db.execute("PRAGMA synchronous = NORMAL")
    return db


@contextmanager
def write_transaction(db: Database) -> Iterator[Database]:
    """One write transaction that holds the write lock from its start; rolls back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")


@contextmanager
def read_snapshot(db: Database) -> Iterator[Database]:
    """Reads that see one consistent state of the file (WAL snapshot), whatever writers do meanwhile."""
    db.execute("BEGIN")
    try:
        yield db
    finally:
        db.execute("ROLLBACK")


def schema_version(db: Database) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def backup_file(db: Database, path: Path, version: int) -> Path:
    """Copy the database (consistently, through SQLite) next to it before a migration."""
    target = path.with_name(f"{path.name}.v{version}-{time.strftime('%Y%m%d-%H%M%S')}.bak")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.v{version}-{time.strftime('%Y%m%d-%H%M%S')}-{n}.bak")
    dest = sqlite3.connect(str(target))
    try:
        db.conn.backup(dest)
    finally:
        dest.close()
    return target


def migrate(db: Database, path: Path | None = None) -> Path | None:
    """Apply pending migrations in one write transaction; back the file up first if it held data.

    Returns the backup file made, if any.
    """
    if schema_version(db) > SCHEMA_VERSION:
        raise HistoryError(f"history database schema v{schema_version(db)} is newer than this app (v{SCHEMA_VERSION})")
    if not MIGRATIONS.pending(db):
        return None
    backup = None
    if path is not None and db.table_names():
        backup = backup_file(db, path, schema_version(db))
    with write_transaction(db):
        if MIGRATIONS.pending(db):  # another process may have migrated while we waited for the lock
            MIGRATIONS.apply(db)
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS.applied(db))}")
    return backup


def open_db(path: str | os.PathLike[str] | None = None, *, create: bool = True) -> Database:
    """Open (and create or migrate) the history database; ``path`` None resolves it as the CLI does."""
    file = resolve_db_path(path)
    if not create and not file.exists():
        raise HistoryError(f"no history database at {file}")
    if file.is_dir():
        raise HistoryError(f"{file} is a folder, not a history database file")
    try:
        if file.parent == data_dir():  # the app's own folder: private; a folder the user chose is left as it is
            private_folder(file.parent)
        else:
            file.parent.mkdir(parents=True, exist_ok=True)
        private_file(file)  # 0600, and SQLite gives its -wal and -shm files the database's mode
    except OSError as exc:
        raise HistoryError(f"cannot create the folder of the history database {file}: {exc.strerror or exc}") from None
    try:
        db = connect(file)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(_open_error(file, exc)) from None
    try:
        tables = db.table_names()
        if tables and MIGRATIONS.migrations_table not in tables:
            raise HistoryError(f"{file} is a SQLite database of something else, not a GPU Planner history")
        migrate(db, file)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise HistoryError(_open_error(file, exc)) from None
    except BaseException:
        db.close()
        raise
    return db


def explain_error(exc: sqlite3.Error) -> str:
    """A SQLite error of the history in words a user can act on (one line, no traceback)."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (
            f"the run history is locked by another process (waited {BUSY_TIMEOUT_MS // 1000} s): "
            "nothing was changed; try again when it is done"
        )
    if "readonly" in text or "read-only" in text:
        return "the run history is read-only here (file, folder or disk): nothing was changed"
    if "disk" in text and ("full" in text or "I/O" in text):
        return f"the run history could not be written ({text}): nothing was changed"
    return f"the run history: {text}"


def _open_error(file: Path, exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "encrypted" in text:
        return f"{file} is not a GPU Planner history database (SQLite says: {text})"
    return f"cannot open the history database {file}: {text}"
