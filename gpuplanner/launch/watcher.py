"""The watcher: one thread per watched run that follows its telemetry and supervises it.

It streams every node's events files into the history (:class:`~gpuplanner.launch.streaming.NodeStream`)
and the tail of its job output (:class:`~gpuplanner.launch.log_streaming.LogStream`), hands the new records to the run's callbacks, checks the nodes' processes (a failed node of a
multi-node run stops the others), and when they ended applies the supervisor's decision: a final state,
or a restart (:mod:`~gpuplanner.launch.restarts`). A dropped connection is re-opened with backoff; after
``UNREACHABLE_AFTER_S`` the run shows ``unreachable``, after ``failover_after_s`` it may move to a
fallback host. A run that ends here gets its final state recorded and its billed span closed
(:mod:`~gpuplanner.launch.run_billing`). A watcher never dies silently: an unexpected error fails the run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import connect
from gpuplanner.history.run_logs import STREAMS
from gpuplanner.history.slurm_queue import job_queue
from gpuplanner.history.stops import stopped_since_start
from gpuplanner.launch import after_run, supervisor
from gpuplanner.launch.backend import Backend
from gpuplanner.launch.connections import DISCONNECTS, PERMANENT, Connections, backoff_s
from gpuplanner.launch.hosts import HostError, get_host
from gpuplanner.launch.log_streaming import LogStream
from gpuplanner.launch.restarts import Restarts
from gpuplanner.launch.run_billing import bill
from gpuplanner.launch.run_records import record_event, record_failure, record_final_state
from gpuplanner.launch.run_state import ManagedRun, log
from gpuplanner.launch.streaming import NodeStream
from trainer.protocol import EVENTS_FILE
from trainer.telemetry import node_events_file

POLL_S = 0.25
STATE_EVERY_S = 1.0
UNREACHABLE_AFTER_S = 3.0
FAILOVER_AFTER_S = 60.0

_DETACHED = object()  # _follow's result when the run is no longer watched here (it goes on)


class Watcher:
    """Starts and runs the watcher threads of the runs on ``connections``' hosts. Settings (the run
    manager's): ``failover_after_s``, how long a run's host may not answer before the run moves to a
    fallback host; ``idle_poll_s``, seconds between utilisation readings of a stop-when-idle after-run
    command."""

    def __init__(
        self, connections: Connections, restarts: Restarts, *, failover_after_s: float = FAILOVER_AFTER_S
    ) -> None:
        self.connections = connections
        self.restarts = restarts
        self.failover_after_s = failover_after_s
        self.idle_poll_s = after_run.IDLE_POLL_S

    def start(self, run: ManagedRun) -> None:
        """Watch ``run`` on a new thread (``run.thread``), and go on reaping what a failover left behind."""
        run.thread = threading.Thread(target=self._watch, args=(run,), name=f"run-{run.run_id}-watcher", daemon=True)
        run.thread.start()
        for orphan in list(run.orphans):
            self.restarts.start_reaper(run, orphan)

    def record_failure(self, run: ManagedRun, code: int | None) -> None:
        """Keep the failure of ``run`` in the history (its stderr tail read through its host's connection)."""
        record_failure(self.connections.db_path, self.connections.get, run, code)

    def _watch(self, run: ManagedRun) -> None:
        db = connect(self.connections.db_path)
        attempt = 0
        try:
            while not run.stop_evt.is_set():
                try:
                    code = self._follow(run, db)
                except PERMANENT as exc:
                    run.error = str(exc)
                    run.set_state("unreachable")
                    return
                except DISCONNECTS as exc:
                    now = time.monotonic()
                    if run.disconnected_at is None:
                        run.disconnected_at = now
                        log.info("run %s: connection lost (%s); reconnecting", run.run_id, exc)
                    for node in run.nodes:
                        self.connections.drop(node.host, run.generations.get(node.host))
                    down = now - run.disconnected_at
                    if down >= UNREACHABLE_AFTER_S and run.state != "unreachable":
                        run.error = str(exc)
                        run.set_state("unreachable")
                    if down >= self.failover_after_s and self.restarts.fail_over(run, down):
                        run.disconnected_at, attempt = None, 0
                        continue
                    run.wake.clear()
                    run.wake.wait(backoff_s(attempt))
                    attempt += 1
                    continue
                attempt = 0
                if code is _DETACHED or not self._after_exit(run, db, code):
                    return
        except Exception as exc:  # never let a watcher die silently
            log.exception("run %s: watcher failed", run.run_id)
            run.error = f"{type(exc).__name__}: {exc}"
            self.record_failure(run, run.exit_code)
            run.set_state("failed")
            try:  # the history ends in a final state too
                self._finish(db, run, "failed")
            except Exception:
                log.exception("run %s: could not record the failure", run.run_id)
        finally:
            db.close()

    def _follow(self, run: ManagedRun, db: Database) -> Any:
        """Stream every node's telemetry until all its processes ended; returns the combined exit code."""
        backends = {node.host: self.connections.get(node.host) for node in run.nodes}
        run.generations = {host: getattr(backend, "generation", None) for host, backend in backends.items()}
        if run.disconnected_at is not None:
            run.last_reconnect_s = time.monotonic() - run.disconnected_at
            run.reconnects += 1
            run.disconnected_at = None
            log.info("run %s: reconnected after %.2f s", run.run_id, run.last_reconnect_s)
            run.set_state("stopping" if run.user_action in ("stop", "preempt", "kill") else "running")
        elif run.state in ("unreachable", "detached"):
            run.set_state("running")
        streams = [
            (node, NodeStream(db, run.run_id, node.host, node.run_dir, name))
            for node, names in zip(run.nodes, self._events_files(run))
            for name in names
        ]
        logs = [
            (node, LogStream(db, run.run_id, index, node.host, node.run_dir, node.tag, name))
            for index, node in enumerate(run.nodes)
            for name in STREAMS
        ]
        next_check = 0.0
        while not run.stop_evt.is_set():
            records: list[dict[str, Any]] = []
            for node, stream in streams:
                records.extend(stream.poll(backends[node.host]))
            run.deliver(records)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + STATE_EVERY_S
                for node, log_stream in logs:  # the job's output, as often as its state is checked
                    log_stream.poll(backends[node.host])
                if self._check_nodes(run, backends):
                    for node, stream in streams:  # the last records written before exit
                        records.extend(stream.poll(backends[node.host]))
                    run.deliver(records)
                    for node, log_stream in logs:  # and the last output, all of it stored
                        log_stream.poll(backends[node.host], final=True)
                    return combined_exit(run)
            if not records:
                run.wake.clear()
                run.wake.wait(POLL_S)
        return _DETACHED

    def _events_files(self, run: ManagedRun) -> list[list[str]]:
        """The events files in each node's run directory: ``events.jsonl`` and every other node's own.

        A Slurm job's nodes share one run directory: node N > 0 of the host's ``nodes`` writes
        ``events.nodeN.jsonl`` there. Hosts of a multi-host run each have their own run directory.
        """
        try:
            first = get_host(self.connections.db_path, run.nodes[0].host)
            slurm_nodes = first.slurm_settings.nodes if first.kind == "slurm" else 0
        except HostError:  # a host removed or broken since: node 0's file at least
            slurm_nodes = 0
        if slurm_nodes:
            shared = [node_events_file(k) for k in range(max(1, slurm_nodes))]
            return [shared, *([EVENTS_FILE] for _ in run.nodes[1:])]
        return [[EVENTS_FILE, *([node_events_file(i)] if i else [])] for i in range(len(run.nodes))]

    def _check_nodes(self, run: ManagedRun, backends: dict[str, Backend]) -> bool:
        """Update each node's state; a failed node stops the others cleanly. True when all ended."""
        for node in run.nodes:
            if node.done or node.pgid is None:
                node.done = True
                continue
            state = backends[node.host].state(node.run_dir, node.tag, node.pgid)
            job, event = getattr(state, "job", None), getattr(state, "event", None)  # a SlurmState's
            if job is not None:
                run.queue = job_queue(job, run.queue)
            if event:  # a Slurm job's state changed (pending, requeued, ended + spend)
                record_event(self.connections.db_path, run, "slurm_job", event)
                run.set_state(run.state)  # watchers see the new queue state and reason
            if not state.alive:
                node.done, node.exit_code = True, state.exit_code
        failed = [n for n in run.nodes if n.done and n.exit_code not in (0, supervisor.EXIT_RESUME)]
        if failed and len(run.nodes) > 1 and run.user_action is None:
            run.user_action = "node-failed"
            for node in run.nodes:
                if not node.done and node.pgid is not None:
                    backends[node.host].signal(node.pgid, "TERM")
        return all(n.done for n in run.nodes)

    def _after_exit(self, run: ManagedRun, db: Database, code: int | None) -> bool:
        """Apply the supervisor's decision; True when a new process was started and watching goes on."""
        ended = time.time()
        run.exit_code = code
        action = run.user_action if run.user_action != "node-failed" else None
        if action is None and stopped_since_start(db, run.run_id):  # stopped through another process's manager
            action = run.user_action = "stop"  # (gpuplanner run stop while the window watches): never restarted
        if action is None and code is None and _stored_status(db, run.run_id) == "killed":
            action = run.user_action = "kill"  # `gpuplanner run kill` from another process: killed, not failed
        decision = supervisor.decide(
            code,
            user_action=action,
            auto_resume=run.auto_resume,
            restarts=run.restarts,
            max_restarts=run.max_restarts,
            host=run.nodes[0].host,
            resume_after_s=run.resume_after_s,
        )
        if decision.state == "failed" and not decision.restart:
            self.record_failure(run, code)  # before the state is announced: whoever shows it finds the tail
        run.set_state(decision.state)
        if not decision.restart:
            self._finish(db, run, decision.state)
            return False
        self.restarts.wait_for_restart(run, decision.delay_s)
        if run.stop_evt.is_set():  # no longer watched here (detached, closed): nothing restarts it now
            self._finish(db, run, decision.state)
            return False
        if run.user_action in ("stop", "kill"):
            run.set_state("stopped" if run.user_action == "stop" else "killed")
            self._finish(db, run, run.state)
            return False
        try:
            self.restarts.restart(run, decision.host or run.nodes[0].host, decision.reason, ended)
        except DISCONNECTS + PERMANENT as exc:
            run.error = f"restart failed: {exc}"
            self.record_failure(run, code)
            run.set_state("failed")
            self._finish(db, run, "failed")
            return False
        return True

    def _finish(self, db: Database, run: ManagedRun, state: str) -> None:
        """The run ended as ``state`` here: record it (when the trainer could not) and, when the end was
        seen here (not a watcher closing while it waits), close its billed span."""
        record_final_state(db, run, state)
        if not run.stop_evt.is_set():
            bill(self.connections.db_path, db, run, self.connections.get, self.idle_poll_s)


def _stored_status(db: Database, run_id: int) -> str | None:
    row = db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()
    return None if row is None else str(row[0])


def combined_exit(run: ManagedRun) -> int | None:
    """One exit code for the run's nodes: 0 when each finished, ``EXIT_RESUME`` when each finished or may
    resume, else the first other one (after a failed node stopped the others: 1 when none is known)."""
    codes = [n.exit_code for n in run.nodes]
    if run.user_action == "node-failed":
        return next((c for c in codes if c not in (0, supervisor.EXIT_RESUME)), 1)
    if all(c == 0 for c in codes):
        return 0
    if all(c in (0, supervisor.EXIT_RESUME) for c in codes):
        return supervisor.EXIT_RESUME
    return next((c for c in codes if c not in (0, supervisor.EXIT_RESUME)), None)
