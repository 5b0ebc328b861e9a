"""Reading telemetry from files and byte streams into the store, resuming where the last read stopped."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import BinaryIO

from sqlite_utils import Database

from gpuplanner.history.ingest import DEFAULT_BATCH, Ingestor, IngestStats
from trainer.protocol import EVENTS_FILE

CHUNK = 1 << 20


def events_file(path: str | os.PathLike[str]) -> Path:
    """``RUN_DIR/events.jsonl`` for a run directory, or the file itself."""
    p = Path(path)
    return p / EVENTS_FILE if p.is_dir() else p


def ingest_file(
    db: Database,
    run_id: int,
    path: str | os.PathLike[str],
    *,
    source: str | None = None,
    follow: bool = False,
    poll_s: float = 0.5,
    stop: threading.Event | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> IngestStats:
    """Ingest a (growing) events file from where it was last read.

    With ``follow`` it keeps reading as the file grows until a ``run_end`` record is stored and the
    file stops growing, or ``stop`` is set. A file shorter than the stored offset (replaced or
    truncated) is read again from the start; already stored records are ignored.
    """
    file = events_file(path)
    source = source or str(file.resolve())
    ingestor = Ingestor(db, run_id, source, batch_size=batch_size)
    if file.stat().st_size < ingestor.resume_offset:
        ingestor = Ingestor(db, run_id, source, batch_size=batch_size, resume=False)
    with open(file, "rb") as handle:
        handle.seek(ingestor.resume_offset)
        while True:
            chunk = handle.read(CHUNK)
            if chunk:
                ingestor.feed_bytes(chunk)
                continue
            stats = ingestor.flush()
            if not follow or (stop is not None and stop.is_set()) or _ended(db, run_id):
                return stats
            if stop is not None:
                stop.wait(poll_s)
            else:
                time.sleep(poll_s)


def ingest_stream(
    db: Database,
    run_id: int,
    stream: BinaryIO,
    source: str,
    *,
    batch_size: int = DEFAULT_BATCH,
    flush_every_s: float = 1.0,
) -> IngestStats:
    """Ingest a byte stream (a subprocess's stdout, an SSH channel) until EOF.

    The stream must start at ``stream_position(db, run_id, source).offset`` (ask the remote side for
    the bytes from there, e.g. ``tail -c +OFFSET+1``); records already stored are ignored anyway.
    Buffered records are written at least every ``flush_every_s`` seconds while data flows.
    """
    ingestor = Ingestor(db, run_id, source, batch_size=batch_size)
    last_flush = time.monotonic()
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(CHUNK)
        if not chunk:
            return ingestor.flush()
        ingestor.feed_bytes(chunk)
        if time.monotonic() - last_flush >= flush_every_s:
            ingestor.flush()
            last_flush = time.monotonic()


def _ended(db: Database, run_id: int) -> bool:
    row = db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()
    return row is not None and row[0] != "running"
