"""Telemetry writer: appends records to ``RUN_DIR/events.jsonl`` and echoes them to stdout.

``seq`` continues from the highest seq already in the file, so it rises across resumes. Writing
never crashes or stalls training: file errors (a full disk) and stdout errors (a closed pipe) are
reported once on stderr and the affected sink is dropped or retried quietly; stdout is written by a
background thread through a bounded queue, so a reader that does not drain the pipe cannot block the
loop (records that do not fit are dropped and counted).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from . import protocol


def last_seq(path: Path) -> int:
    """Highest valid seq in an events file, -1 when there is none."""
    if not path.exists():
        return -1
    parser = protocol.StreamParser()
    best = -1
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            for rec in parser.feed(chunk):
                best = max(best, rec["seq"])
    rest = parser.feed(b"\n")  # a last line without newline may still be complete JSON
    for rec in rest:
        best = max(best, rec["seq"])
    return best


# Node N > 0 of a multi-node job writes its GPU samples to a file of its own (:func:`node_events_file`)
# whose seq numbers start at N x this, so that every node's records reach the history beside node 0's
# (which rise from 0) without colliding, whether the nodes share one run directory or not.
NODE_SEQ_STRIDE = 1 << 40


def node_events_file(node_rank: int) -> str:
    """The events file a node writes in its run directory: ``events.jsonl`` on node 0, else its own."""
    return protocol.EVENTS_FILE if node_rank <= 0 else f"events.node{node_rank}.jsonl"


def node_rank_from_env(rank: int, local_world: int) -> int:
    """This process's node rank: torchrun's ``$GROUP_RANK``, else its rank over the processes per node."""
    try:
        return max(0, int(os.environ["GROUP_RANK"]))
    except (KeyError, ValueError):
        return max(0, rank // max(1, local_world))


def node_telemetry(run_dir: Path, node_rank: int) -> Telemetry:
    """The writer of a node's own records (node 0's go through the run's main :class:`Telemetry`)."""
    return Telemetry(run_dir / node_events_file(node_rank), seq_floor=node_rank * NODE_SEQ_STRIDE)


def _seq_floor() -> int:
    try:
        return max(0, int(os.environ.get("TRAINER_SEQ_START", "0")))
    except ValueError:
        return 0


def warn(message: str) -> None:
    try:
        # one write per line: ranks share stderr, and print's separate newline lets their lines run together
        sys.stderr.write(f"trainer: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Telemetry:
    """Thread-safe record emitter. ``enabled=False`` (non-zero ranks) makes every call a no-op."""

    def __init__(
        self,
        path: Path | None,
        stdout: TextIO | None = None,
        enabled: bool = True,
        queue_size: int = 10000,
        seq_floor: int | None = None,
    ) -> None:
        self.enabled = enabled
        self.path = path
        self._lock = threading.Lock()
        self._fh = None
        self._reported: set[str] = set()
        self.dropped = 0
        self.seq = 0
        self._queue: queue.Queue[str | None] | None = None
        self._thread: threading.Thread | None = None
        if not enabled:
            return
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                # $TRAINER_SEQ_START: a floor set by a launcher that moved the run to a fresh run
                # directory (another host), so seq keeps rising across hosts too.
                # ``seq_floor``: a node's own lane (see NODE_SEQ_STRIDE).
                self.seq = max(last_seq(path) + 1, _seq_floor() if seq_floor is None else seq_floor)
                self._fh = open(path, "a", encoding="utf-8")
                if path.stat().st_size > 0:
                    with open(path, "rb") as check:
                        check.seek(-1, 2)
                        if check.read(1) != b"\n":
                            self._fh.write("\n")  # a killed writer left half a line: end it
            except OSError as exc:
                self._report("file", f"cannot write {path}: {exc}; telemetry goes to stdout only")
                self._fh = None
        if stdout is not None:
            self._stdout: TextIO | None = stdout
            self._queue = queue.Queue(maxsize=queue_size)
            self._thread = threading.Thread(target=self._pump, name="telemetry-stdout", daemon=True)
            self._thread.start()

    def _report(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            warn(message)

    def emit(self, kind: str, *, at: float | None = None, **fields: Any) -> dict[str, Any] | None:
        """Write one record; ``at`` is its time ``t`` when not now (``run_start``: the process start)."""
        if not self.enabled:
            return None
        with self._lock:
            record = protocol.make_record(kind, self.seq, time.time() if at is None else at, **fields)
            self.seq += 1
            line = protocol.encode(record)
            if self._fh is not None:
                try:
                    self._fh.write(line)
                    self._fh.flush()
                except (OSError, ValueError) as exc:
                    self._report("file", f"writing {self.path} failed ({exc}); training goes on")
        if self._queue is not None:
            try:
                self._queue.put_nowait(line)
            except queue.Full:
                self.dropped += 1
        return record

    def _pump(self) -> None:
        assert self._queue is not None
        while True:
            line = self._queue.get()
            if line is None:
                return
            if self._stdout is None:
                continue
            try:
                self._stdout.write(line)
                self._stdout.flush()
            except (OSError, ValueError) as exc:
                self._report("stdout", f"stdout closed ({exc}); records still go to the events file")
                self._stdout = None

    def sync(self) -> None:
        """fsync the events file (before a checkpoint is declared complete)."""
        import os

        with self._lock:
            if self._fh is not None:
                try:
                    self._fh.flush()
                    os.fsync(self._fh.fileno())
                except (OSError, ValueError):
                    pass

    def close(self, timeout: float = 2.0) -> None:
        if self._queue is not None and self._thread is not None:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                pass
            self._thread.join(timeout)
        with self._lock:
            if self._fh is not None:
                try:
                    self._fh.close()
                except OSError:
                    pass
                self._fh = None


class StepRateLimiter:
    """Lets a step record through every ``every`` steps and no more often than ``interval_s``."""

    def __init__(self, every: int, interval_s: float) -> None:
        self.every = max(1, every)
        self.interval_s = interval_s
        self._last = float("-inf")

    def due(self, step: int, now: float, force: bool = False) -> bool:
        if force or (step % self.every == 0 and now - self._last >= self.interval_s):
            self._last = now
            return True
        return False
