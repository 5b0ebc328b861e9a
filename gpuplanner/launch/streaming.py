"""Telemetry of one events file into the history, from the byte offset last committed.

Node 0 of a run writes ``events.jsonl``; node N > 0 of a multi-node run writes its GPU samples to
``events.nodeN.jsonl`` (its own lane of seq numbers, see ``trainer.telemetry.NODE_SEQ_STRIDE``), in its
own run directory or in the one a Slurm job's nodes share. Each file is one stream.

A :class:`NodeStream` reads what the file gained since the stored position (the history's
``Ingestor`` commits records and the offset in one transaction), so after a reconnect or an app
restart it continues exactly there: nothing lost, nothing twice (records already stored by ``seq``
are dropped anyway, which also makes two nodes sharing one file harmless).
"""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database

from gpuplanner.history.ingest import Ingestor
from gpuplanner.launch.backend import Backend
from trainer.protocol import EVENTS_FILE

CHUNK = 1 << 18


def source_name(host: str, run_dir: str, filename: str = EVENTS_FILE) -> str:
    """The stream's name in the history (``stream_positions.source``): one per host, run dir and file."""
    return f"{host}:{run_dir}/{filename}"


class NodeStream:
    def __init__(self, db: Database, run_id: int, host: str, run_dir: str, filename: str = EVENTS_FILE) -> None:
        self.path = f"{run_dir}/{filename}"
        self.ingestor = Ingestor(db, run_id, source_name(host, run_dir, filename), batch_size=2000)
        self.position = self.ingestor.resume_offset

    def poll(self, backend: Backend) -> list[dict[str, Any]]:
        """Read and store what is new (up to a few chunks); returns the records stored or seen."""
        records: list[dict[str, Any]] = []
        for _ in range(16):
            data = backend.read(self.path, self.position, CHUNK)
            if not data:
                break
            self.position += len(data)
            parsed = self.ingestor.parser.feed(data)
            self.ingestor.feed_records(parsed)
            records.extend(parsed)
            if len(data) < CHUNK:
                break
        if self.ingestor.parser.offset != self.ingestor.stats.offset or records:
            self.ingestor.flush()
        return records
