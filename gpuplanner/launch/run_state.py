"""A launched run as the run manager holds it in memory, and what it tells whoever watches it.

:class:`ManagedRun` is one run (its nodes, launch settings and live state), :class:`RunStatus` the
snapshot the manager reports of it; ``ManagedRun.set_state`` announces a state to the run's
``on_status`` callbacks and ``ManagedRun.deliver`` hands each new telemetry record once to its
``on_records`` callbacks, on the calling thread (the run's watcher, or the thread asking for a stop).
``ManagedRun.launch_doc()`` is the ``launch`` document the history keeps of it
(:mod:`~gpuplanner.launch.run_records`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuplanner.history.slurm_queue import QueueState
from trainer.telemetry import NODE_SEQ_STRIDE

# The run manager's one logger: its modules all log under the manager's name, so the log file's lines
# say "gpuplanner.launch.manager" whichever of them wrote it.
log = logging.getLogger("gpuplanner.launch.manager")

FINAL_STATES = ("finished", "failed", "stopped", "killed")

RecordsCallback = Callable[[int, list[dict[str, Any]]], None]
StatusCallback = Callable[["RunStatus"], None]


@dataclass(frozen=True)
class RunStatus:
    run_id: int
    # starting|running|stopping|preempted|resuming|finished|failed|stopped|killed|detached|unreachable;
    # final: FINAL_STATES. "preempted" waits for an automatic restart while the watcher is alive.
    state: str
    pid: int | None
    exit_code: int | None
    last_seq: int | None
    host: str
    run_dir: str
    restarts: int
    reconnects: int = 0
    last_reconnect_s: float | None = None
    error: str | None = None
    # a Slurm run's job in the queue: job_id, state, reason (the last pending one), submit_t, start_t
    queue: QueueState | None = None


class RunError(RuntimeError):
    """A request about a run that cannot be served (unknown run, wrong state); the message says why."""


@dataclass
class ManagedNode:
    """One node's process of a run: where it runs, its process group (a Slurm job id) and how it ended."""

    host: str
    run_dir: str
    tag: str
    pgid: int | None = None
    command: list[str] = field(default_factory=list)
    done: bool = False
    exit_code: int | None = None


@dataclass
class ManagedRun:
    run_id: int
    trainer_args: list[str]
    nodes: list[ManagedNode]
    gpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    auto_resume: bool = False
    fallback_hosts: list[str] = field(default_factory=list)
    max_restarts: int = 3
    budget_usd: float | None = None
    price: float | None = None  # the run's own price per GPU-hour (None: each host's)
    rdzv_port: int | None = None
    command: list[str] = field(default_factory=list)  # the user's own command (empty: the bundled trainer)
    workdir: str | None = None  # the command's working directory on the host (None: the run dir)
    max_gpu_hours: float | None = None  # the monitor's GPU-hour cap (user commands)
    launched_at: float | None = None  # start of the current billed span (launch, or a resume by hand)
    lane_seq: dict[int, int] = field(default_factory=dict)  # last seq delivered per node lane (nodes > 0)
    restarts: int = 0
    state: str = "starting"
    exit_code: int | None = None
    last_seq: int | None = None
    user_action: str | None = None
    resume_after_s: float | None = None
    resume_now: bool = False
    on_records: list[RecordsCallback] = field(default_factory=list)
    on_status: list[StatusCallback] = field(default_factory=list)
    thread: threading.Thread | None = None
    stop_evt: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    reconnects: int = 0
    last_reconnect_s: float | None = None
    generations: dict[str, int | None] = field(default_factory=dict)  # the connections being followed
    disconnected_at: float | None = None
    error: str | None = None
    orphans: list[ManagedNode] = field(default_factory=list)  # nodes left on an unreachable host (failover)
    queue: QueueState | None = None  # RunStatus.queue

    @property
    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

    def watched(self) -> bool:
        """Whether a watcher thread follows the run in this process now."""
        return self.thread is not None and self.thread.is_alive()

    def launch_doc(self) -> dict[str, Any]:
        return {
            "nodes": [
                {"host": n.host, "run_dir": n.run_dir, "tag": n.tag, "pgid": n.pgid, "command": n.command}
                for n in self.nodes
            ],
            "gpus": self.gpus,
            "env": self.env,
            "auto_resume": self.auto_resume,
            "fallback_hosts": self.fallback_hosts,
            "max_restarts": self.max_restarts,
            "budget_usd": self.budget_usd,
            "price_usd_per_gpu_hour": self.price,
            "rdzv_port": self.rdzv_port,
            "user_command": self.command,
            "workdir": self.workdir,
            "max_gpu_hours": self.max_gpu_hours,
            "launched_at": self.launched_at,
            "restarts": self.restarts,
            "orphans": [{"host": n.host, "run_dir": n.run_dir, "tag": n.tag, "pgid": n.pgid} for n in self.orphans],
        }

    def status(self) -> RunStatus:
        node = self.nodes[0]
        return RunStatus(
            self.run_id,
            self.state,
            node.pgid,
            self.exit_code,
            self.last_seq,
            node.host,
            node.run_dir,
            self.restarts,
            self.reconnects,
            self.last_reconnect_s,
            self.error,
            self.queue.copy() if self.queue else None,
        )

    def set_state(self, state: str) -> None:
        """Enter ``state`` and tell every ``on_status`` callback (a failing callback is logged, not raised)."""
        self.state = state
        status = self.status()
        for callback in list(self.on_status):
            try:
                callback(status)
            except Exception:
                log.exception("on_status callback failed")

    def deliver(self, records: list[dict[str, Any]]) -> None:
        """Hand the records not delivered before to every ``on_records`` callback, in ``seq`` order."""
        # Each node of a user's command writes its own lane of seq numbers (node N from N x NODE_SEQ_STRIDE);
        # node 0's lane holds the run's records and is ``last_seq``.
        fresh = []
        for record in sorted(records, key=lambda r: r["seq"]):
            lane = record["seq"] // NODE_SEQ_STRIDE
            last = self.last_seq if lane == 0 else self.lane_seq.get(lane)
            if last is None or record["seq"] > last:
                fresh.append(record)
                if lane == 0:
                    self.last_seq = record["seq"]
                else:
                    self.lane_seq[lane] = record["seq"]
        if not fresh:
            return
        for callback in list(self.on_records):
            try:
                callback(self.run_id, fresh)
            except Exception:
                log.exception("on_records callback failed")
