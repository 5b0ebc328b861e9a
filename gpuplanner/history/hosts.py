"""Host rows: the machines a user launches on, with their price and what the last probe found.

The ``hosts`` table (schema v1) has ``name``, ``address``, ``gpu_type``, ``gpu_count``,
``price_usd_per_gpu_hour`` and ``created_at``. How to reach a host (kind, hostname, port, user,
identity file, ProxyJump, Python), its pricing (on-demand or spot) and the last probe document are
kept as one JSON object in ``address``, so no schema change was needed. Callers get plain dicts;
:mod:`gpuplanner.launch.hosts` turns them into ``Host`` values.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction

COLUMNS = ("gpu_type", "gpu_count", "price_usd_per_gpu_hour")


def _row_to_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    name, address, gpu_type, gpu_count, price, created_at = row
    try:
        details = json.loads(address) if address else {}
    except ValueError:  # an address written by something else: keep it as the hostname
        details = {"hostname": address}
    if not isinstance(details, dict):
        details = {}
    details.update(
        name=name, gpu_type=gpu_type, gpu_count=gpu_count, price_usd_per_gpu_hour=price, created_at=created_at
    )
    return details


def list_host_rows(db: Database) -> list[dict[str, Any]]:
    """Every stored host, by name."""
    rows = db.execute(
        "SELECT name, address, gpu_type, gpu_count, price_usd_per_gpu_hour, created_at FROM hosts ORDER BY name"
    ).fetchall()
    return [_row_to_dict(row) for row in rows]


def get_host_row(db: Database, name: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT name, address, gpu_type, gpu_count, price_usd_per_gpu_hour, created_at FROM hosts WHERE name = ?",
        [name],
    ).fetchone()
    return _row_to_dict(row) if row else None


def _split(values: dict[str, Any]) -> tuple[str, list[Any]]:
    details = {k: v for k, v in values.items() if k not in COLUMNS and k not in ("name", "created_at")}
    return json.dumps(details, sort_keys=True), [values.get(k) for k in COLUMNS]


def insert_host_row(db: Database, values: dict[str, Any]) -> None:
    """Add a host; :class:`HistoryError` if the name is taken."""
    address, columns = _split(values)
    with write_transaction(db):
        if db.execute("SELECT 1 FROM hosts WHERE name = ?", [values["name"]]).fetchone():
            raise HistoryError(f"a host named {values['name']!r} exists already")
        db.execute(
            "INSERT INTO hosts (name, address, gpu_type, gpu_count, price_usd_per_gpu_hour, created_at)"
            " VALUES (?,?,?,?,?,?)",
            [values["name"], address, *columns, time.time()],
        )


def upsert_host_row(db: Database, values: dict[str, Any]) -> None:
    """Replace a host's values (insert it when missing), keeping its id and creation time."""
    address, columns = _split(values)
    with write_transaction(db):
        cursor = db.execute(
            "UPDATE hosts SET address = ?, gpu_type = ?, gpu_count = ?, price_usd_per_gpu_hour = ? WHERE name = ?",
            [address, *columns, values["name"]],
        )
        if cursor.rowcount == 0:
            db.execute(
                "INSERT INTO hosts (name, address, gpu_type, gpu_count, price_usd_per_gpu_hour, created_at)"
                " VALUES (?,?,?,?,?,?)",
                [values["name"], address, *columns, time.time()],
            )


def delete_host_row(db: Database, name: str) -> None:
    """Remove a host (runs keep their host name; their host id becomes NULL)."""
    with write_transaction(db):
        if db.execute("DELETE FROM hosts WHERE name = ?", [name]).rowcount == 0:
            raise HistoryError(f"no host named {name!r}")
