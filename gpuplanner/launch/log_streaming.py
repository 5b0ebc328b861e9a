"""Job output streamed from a run's host: each node's ``TAG.out`` and ``TAG.err`` in its run directory.

The wrapper writes them (capped, head and tail kept: ``wrapper.py``). The watcher reads what they
gained through the host's backend, like the telemetry (:class:`LogStream`, bounded per poll), and keeps
the last 64 KiB of each in the history (:mod:`gpuplanner.history.run_logs`), from where it read last time;
``gpuplanner runs logs`` reads the whole file from the host, and follows a live run (:class:`LogReader`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import TYPE_CHECKING

from sqlite_utils import Database

from gpuplanner.history.run_logs import keep_tail, load_log_tail, save_log_tail
from gpuplanner.launch import supervisor
from gpuplanner.launch.backend import Backend
from gpuplanner.launch.run_records import load_run

if TYPE_CHECKING:
    from gpuplanner.launch.connections import Connections
    from gpuplanner.launch.run_state import ManagedNode

log = logging.getLogger(__name__)

CHUNK = 1 << 16
MAX_PER_POLL = 1 << 20  # a flood of output is caught up over several polls, never starving the telemetry
SAVE_EVERY_S = 1.0  # the history's copy is written at most this often while output flows (and at the end)


def log_path(run_dir: str, tag: str, stream: str) -> str:
    """The file a node's ``stream`` ("out" or "err") goes to on its host."""
    return f"{run_dir}/{tag}.{stream}"


class LogStream:
    """One node's stdout or stderr, read from where the history's copy ends (same host and file), its
    tail stored in the history."""

    def __init__(self, db: Database, run_id: int, node: int, host: str, run_dir: str, tag: str, stream: str) -> None:
        self.db, self.run_id, self.node, self.stream = db, run_id, node, stream
        self.path = log_path(run_dir, tag, stream)
        self.source = f"{host}:{self.path}"
        stored = load_log_tail(db, run_id, node, stream)
        # Another file (a failover to another host) is read from its start, after the output kept so far.
        self.offset = stored.offset if stored is not None and stored.source == self.source else 0
        self.tail = stored.data if stored is not None else b""
        self._unsaved = False
        self._saved_at = 0.0

    def poll(self, backend: Backend, *, final: bool = False) -> bytes:
        """Read what the file gained (at most :data:`MAX_PER_POLL`; all of it when ``final``) and keep its tail
        in the history; returns the new bytes."""
        new = bytearray()
        while final or len(new) < MAX_PER_POLL:
            data = backend.read(self.path, self.offset, CHUNK)
            if not data:
                break
            self.offset += len(data)
            new += data
            self.tail = keep_tail(self.tail, data)
            self._unsaved = True
            if len(data) < CHUNK:
                break
        if self._unsaved and (final or time.monotonic() - self._saved_at >= SAVE_EVERY_S):
            try:
                save_log_tail(self.db, self.run_id, self.node, self.stream, self.source, self.offset, self.tail)
            except sqlite3.Error as exc:  # a history locked for long: kept here, stored at the next poll
                log.warning(
                    "run %s: could not keep the %s tail of node %s: %s", self.run_id, self.stream, self.node, exc
                )
            else:
                self._unsaved, self._saved_at = False, time.monotonic()
        return bytes(new)


class LogReader:
    """One node's output file of a launched run, read on its host through the launcher's connection
    (``gpuplanner runs logs``). Connection errors are the backend's (:data:`~gpuplanner.launch.connections.DISCONNECTS`,
    :data:`~gpuplanner.launch.connections.PERMANENT`)."""

    def __init__(self, connections: Connections, run_id: int, index: int, node: ManagedNode, stream: str) -> None:
        self.connections = connections
        self.run_id, self.index, self.node, self.stream = run_id, index, node, stream
        self.host = node.host
        self.path = log_path(node.run_dir, node.tag, stream)

    def read(self, offset: int, size: int = CHUNK) -> bytes:
        """Bytes of the file from ``offset`` (b"" at its end or before it exists)."""
        return self.connections.get(self.host).read(self.path, offset, size)

    def ended(self) -> bool:
        """True when the run is over for this file: its process no longer runs and no restart will write
        to it. A run that resumes automatically is not over while its process ended resumable (exit 75, a
        stop signal) or it waits for its restart (``preempted``): the restarted process (a new process
        group in the run's launch document, same host and file) is followed on."""
        if self.node.pgid is not None:
            state = self.connections.get(self.host).state(self.node.run_dir, self.node.tag, self.node.pgid)
            if state.alive:
                return False
            code = state.exit_code
        else:
            code = None
        run = load_run(self.connections.db_path, self.run_id)
        now = run.nodes[self.index] if self.index < len(run.nodes) else None
        if now is not None and now.pgid != self.node.pgid and log_path(now.run_dir, now.tag, self.stream) == self.path:
            if now.host == self.host:
                self.node = now  # restarted in the same place: the same file goes on
                return False
        if run.state not in ("detached", "preempted"):  # a final state is recorded
            return True
        resumable = code == supervisor.EXIT_RESUME or code in supervisor.STOP_SIGNAL_EXITS
        return not (run.auto_resume and (run.state == "preempted" or resumable))
