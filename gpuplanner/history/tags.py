"""Run tags: optional ``key=value`` labels (``project=search``, ``owner=ana``) for attributing spend.

Tags live in ``run_tags`` (schema v4), one value per run and key. They are written in the same
``BEGIN IMMEDIATE`` transaction as the run they belong to (:func:`gpuplanner.history.runs.create_run`)
or, later, by :func:`set_tags`, which only adds or replaces the keys it is given: two processes tagging
one run at once keep both their keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
MAX_KEY = 64
MAX_VALUE = 200


class TagError(ValueError):
    """A tag that cannot be stored; the message says what is wrong and how to write it."""


def parse_tag(text: str) -> tuple[str, str]:
    """``key=value`` as a (key, value) pair; whitespace around either side is dropped."""
    if not isinstance(text, str) or "=" not in text:
        raise TagError(f"{text!r} is not key=value (e.g. --tag project=search)")
    key, _, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not key:
        raise TagError(f"{text!r} has an empty key: write key=value (e.g. project=search)")
    if len(key) > MAX_KEY or not KEY_PATTERN.fullmatch(key):
        raise TagError(
            f"key {key!r}: letters, digits, '_', '.' and '-' only, starting with a letter or digit, "
            f"at most {MAX_KEY} characters"
        )
    if not value:
        raise TagError(f"{text!r} has an empty value: write {key}=VALUE")
    if len(value) > MAX_VALUE or any(ord(c) < 32 for c in value):
        raise TagError(f"value of {key!r}: at most {MAX_VALUE} printable characters")
    return key, value


def parse_tags(texts: Iterable[str] | None) -> dict[str, str]:
    """Every ``key=value`` of a repeatable flag; one key given twice with two values is an error."""
    tags: dict[str, str] = {}
    for text in texts or ():
        key, value = parse_tag(text)
        if key in tags and tags[key] != value:
            raise TagError(f"{key!r} is given twice ({tags[key]!r} and {value!r}): give each key once")
        tags[key] = value
    return tags


def check_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    """Tags given as a mapping (the launch dialog, the API) checked by the same rules as the flags."""
    return parse_tags(f"{k}={v}" for k, v in (tags or {}).items())


def insert_tags(db: Database, run_id: int, tags: Mapping[str, str]) -> None:
    """Add or replace ``tags`` of one run inside the caller's write transaction."""
    for key, value in check_tags(tags).items():
        db.execute(
            "INSERT INTO run_tags (run_id, key, value) VALUES (?, ?, ?)"
            " ON CONFLICT(run_id, key) DO UPDATE SET value = excluded.value",
            [run_id, key, value],
        )


def set_tags(db: Database, run_id: int, tags: Mapping[str, str], *, remove: Sequence[str] = ()) -> None:
    """Add or replace ``tags`` of a run and drop the keys in ``remove``, in one write transaction."""
    tags = check_tags(tags)
    with write_transaction(db):
        if db.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone() is None:
            raise HistoryError(f"no run with id {run_id}")
        insert_tags(db, run_id, tags)
        for key in remove:
            db.execute("DELETE FROM run_tags WHERE run_id = ? AND key = ?", [run_id, key])


def tags_of(db: Database, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, str]]:
    """Tags per run (every run when ``run_ids`` is None); runs without tags are absent."""
    sql = "SELECT run_id, key, value FROM run_tags"
    params: list[int] = []
    if run_ids is not None:
        params = list(run_ids)
        if not params:
            return {}
        sql += f" WHERE run_id IN ({', '.join('?' for _ in params)})"
    out: dict[int, dict[str, str]] = {}
    for run_id, key, value in db.execute(sql + " ORDER BY run_id, key", params).fetchall():
        out.setdefault(run_id, {})[key] = value
    return out


def tag_keys(db: Database) -> list[str]:
    """Every key used, sorted (the window's group-by choices)."""
    return [row[0] for row in db.execute("SELECT DISTINCT key FROM run_tags ORDER BY key").fetchall()]


def format_tags(tags: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(tags.items()))
