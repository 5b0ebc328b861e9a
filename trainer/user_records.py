"""The records a user's job writes through ``gpuplanner_telemetry`` (``$GPUPLANNER_TELEMETRY_FILE``), read by
the command monitor (``trainer exec``); standard library only.

The file is read incrementally: each poll reads only what it gained (at most :data:`READ_PER_POLL`), and an
unfinished last line is held in a buffer of at most :data:`MAX_LINE_BYTES`; a longer line is skipped up to
its newline with one warning, so a job that writes a huge line (or never ends one) costs the monitor no
more memory than that and no re-reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .telemetry import warn

MAX_LINE_BYTES = 64 * 1024
READ_SIZE = 64 * 1024
READ_PER_POLL = 16 * READ_SIZE


class UserRecords:
    """Reads ``gpuplanner_telemetry``'s file from a byte offset; complete lines only."""

    KINDS = ("step", "eval")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # bytes of the file read so far (into records, the buffer or a skipped line)
        self.bad = 0
        self.too_long = 0
        self._buffer = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES: dropped up to its newline

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished last line held (at most MAX_LINE_BYTES)."""
        return len(self._buffer)

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                out: list[dict[str, Any]] = []
                read = 0
                while read < READ_PER_POLL:
                    chunk = fh.read(READ_SIZE)
                    if not chunk:
                        break
                    read += len(chunk)
                    self.offset += len(chunk)
                    out.extend(self._feed(chunk))
                return out
        except FileNotFoundError:
            return []

    def _feed(self, chunk: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            if self._skipping:
                if end < 0:
                    return out
                self._skipping, start = False, end + 1
                continue
            if end < 0:
                self._buffer += chunk[start:]
                if len(self._buffer) > MAX_LINE_BYTES:
                    self._skip_long(len(self._buffer))
                    self._buffer.clear()
                    self._skipping = True
                return out
            line = bytes(self._buffer) + chunk[start:end]
            self._buffer.clear()
            start = end + 1
            if len(line) > MAX_LINE_BYTES:
                self._skip_long(len(line))
                continue
            record = self._parse(line)
            if record is not None:
                out.append(record)
        return out

    def _skip_long(self, size: int) -> None:
        self.bad += 1
        self.too_long += 1
        warn(
            f"a line of more than {MAX_LINE_BYTES // 1024} KiB in {self.path.name} was skipped"
            f" ({size // 1024} KiB read of it); records are one short JSON line each"
        )

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            self.bad += 1
            return None
        if not isinstance(rec, dict) or rec.get("kind") not in self.KINDS:
            self.bad += 1
            return None
        return rec
