"""The tail of a run's job output (each node's stdout and stderr), kept in the history (schema v10).

The whole output stays in the run's folder on its host (``TAG.out``/``TAG.err``, capped by the wrapper);
the launcher's watcher streams what each file gains (:mod:`gpuplanner.launch.log_streaming`) and keeps the
last :data:`LOG_TAIL_BYTES` here, with how far it read the file (``byte_offset``) and which file that was
(``source``: host and path), so the next read goes on from there and the output outlives the host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import write_transaction

LOG_TAIL_BYTES = 64 * 1024
STREAMS = ("out", "err")


@dataclass(frozen=True)
class LogTail:
    node: int
    stream: str  # "out" (stdout) or "err" (stderr)
    source: str  # host:path of the file read
    offset: int  # bytes of that file read so far
    data: bytes  # its last LOG_TAIL_BYTES (at most)
    updated_at: float

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @property
    def cut(self) -> bool:
        """True when earlier output of the file is not kept here."""
        return self.offset > len(self.data)


def keep_tail(old: bytes, new: bytes, keep: int = LOG_TAIL_BYTES) -> bytes:
    """The last ``keep`` bytes of ``old + new``, starting at a line when a line starts in them."""
    joined = old + new
    if len(joined) <= keep:
        return joined
    tail = joined[-keep:]
    start = tail.find(b"\n")
    return tail[start + 1 :] if 0 <= start < len(tail) - 1 else tail


def save_log_tail(db: Database, run_id: int, node: int, stream: str, source: str, offset: int, data: bytes) -> None:
    """Store the tail of one node's stream and the offset read (replacing what was stored)."""
    if stream not in STREAMS:
        raise ValueError(f"stream: one of {', '.join(STREAMS)}, not {stream!r}")
    with write_transaction(db):
        db.execute(
            "INSERT OR REPLACE INTO run_logs (run_id, node, stream, source, byte_offset, tail, updated_at)"
            " VALUES (?,?,?,?,?,?,?)",
            [run_id, node, stream, source, offset, data[-LOG_TAIL_BYTES:], time.time()],
        )


def _tail(row: Any) -> LogTail:
    node, stream, source, offset, data, updated = row
    return LogTail(int(node), str(stream), str(source), int(offset), bytes(data), float(updated))


def load_log_tail(db: Database, run_id: int, node: int, stream: str) -> LogTail | None:
    """The stored tail of one node's stream, or None when nothing was kept."""
    row = db.execute(
        "SELECT node, stream, source, byte_offset, tail, updated_at FROM run_logs"
        " WHERE run_id = ? AND node = ? AND stream = ?",
        [run_id, node, stream],
    ).fetchone()
    return _tail(row) if row else None


def load_log_tails(db: Database, run_id: int) -> list[LogTail]:
    """Every stored tail of a run, by node then stream (out before err)."""
    rows = db.execute(
        "SELECT node, stream, source, byte_offset, tail, updated_at FROM run_logs WHERE run_id = ?"
        " ORDER BY node, stream DESC",
        [run_id],
    ).fetchall()
    return [_tail(row) for row in rows]
