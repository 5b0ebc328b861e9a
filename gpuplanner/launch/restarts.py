"""Starting a run again: a restart on its run directory (the trainer resumes from its newest checkpoint),
a failover to a fallback host when its host stopped answering (a fresh run directory; the trainer resumes
from the checkpoint mirror), and the reaper that stops what a failover left behind once that host
answers again. The decisions are :mod:`~gpuplanner.launch.supervisor`'s; each restart is a ``restart``
event in the history (:func:`~gpuplanner.launch.run_records.record_restart`).
"""

from __future__ import annotations

import threading
import time

from gpuplanner.launch import supervisor
from gpuplanner.launch.connections import DISCONNECTS, PERMANENT, Connections, backoff_s
from gpuplanner.launch.run_records import record_event, record_restart, save_launch
from gpuplanner.launch.run_start import start_nodes
from gpuplanner.launch.run_state import ManagedNode, ManagedRun, log


class Restarts:
    """Restarts and failovers of the runs on ``connections``' hosts; reapers give up once ``closing`` is set
    (the run manager closed)."""

    def __init__(self, connections: Connections, closing: threading.Event) -> None:
        self.connections = connections
        self.closing = closing
        self._lock = threading.Lock()  # a run's orphans: removed by reapers, added by its watcher

    def restart(self, run: ManagedRun, host_name: str, reason: str, since: float, after: str | None = None) -> None:
        """Start the run again on ``host_name`` (the same host: its run directory; another: a fresh one) and
        record a ``restart`` that cost the time since ``since``; ``after``: the state a resume by hand left."""
        previous = run.nodes[0].host
        run.set_state("resuming")
        extra_env: dict[str, str] = {}
        left: list[ManagedNode] = []
        if host_name != previous:
            left = [n for n in run.nodes if not n.done and n.pgid is not None]
            run.nodes = [ManagedNode(host_name, "", "node0")]
            # A fresh run directory: the trainer's seq would start at 0 and collide with what is stored.
            extra_env["TRAINER_SEQ_START"] = str((run.last_seq if run.last_seq is not None else -1) + 1)
        run.user_action, run.resume_after_s = None, None
        start_nodes(self.connections, run, extra_env)
        for node in left:
            with self._lock:
                run.orphans.append(node)
            self.start_reaper(run, node)
        run.restarts += 1
        save_launch(self.connections.db_path, run)
        record_restart(self.connections.db_path, run, previous, host_name, reason, time.time() - since, after)
        run.set_state("running")

    def fail_over(self, run: ManagedRun, down_s: float) -> bool:
        """The run's single host has not answered for ``down_s``: restart it on a fallback host if the
        supervisor says so; True when it runs there now."""
        if len(run.nodes) != 1:
            return False
        decision = supervisor.decide_unreachable(
            auto_resume=run.auto_resume,
            restarts=run.restarts,
            max_restarts=run.max_restarts,
            host=run.nodes[0].host,
            hosts=[run.nodes[0].host, *run.fallback_hosts],
        )
        if decision is None or decision.host is None:
            return False
        try:
            self.restart(run, decision.host, decision.reason, time.time() - down_s)
        except DISCONNECTS + PERMANENT as restart_exc:
            log.warning("run %s: fallback to %s failed: %s", run.run_id, decision.host, restart_exc)
            return False
        return True

    @staticmethod
    def wait_for_restart(run: ManagedRun, delay_s: float) -> None:
        """Wait ``delay_s`` before an automatic restart, less when asked to resume now, stopped or killed,
        or no longer watched."""
        run.wake.clear()
        deadline = time.monotonic() + delay_s
        while time.monotonic() < deadline and not run.resume_now:
            if run.stop_evt.is_set() or run.user_action in ("stop", "kill"):
                break
            run.wake.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            run.wake.clear()
        run.resume_now = False

    # -- processes left behind by a failover ---------------------------------------------------------------
    def start_reaper(self, run: ManagedRun, node: ManagedNode) -> None:
        threading.Thread(
            target=self._reap, args=(run, node), name=f"run-{run.run_id}-reaper-{node.host}", daemon=True
        ).start()

    def _reap(self, run: ManagedRun, node: ManagedNode) -> None:
        """Stop the process a failover left on a host that stopped answering, once the host answers again.

        It may still be running (a network partition rather than a lost machine): two copies of one
        run would write the same checkpoint mirror. It gets SIGKILL, not SIGTERM: a graceful stop
        would checkpoint and mirror a stale state over the run that moved on. Retries with backoff
        while the manager is open; the orphan is kept in the launch record, so whoever attaches to the
        run later goes on trying.
        """
        attempt = 0
        while not run.stop_evt.is_set() and not self.closing.is_set():
            try:
                backend = self.connections.get(node.host)
                if node.pgid is not None and backend.state(node.run_dir, node.tag, node.pgid).alive:
                    backend.signal(node.pgid, "KILL")
                    log.info("run %s: stopped the process left on %s after the failover", run.run_id, node.host)
                    record_event(
                        self.connections.db_path, run, "orphan_stopped", {"host": node.host, "pgid": node.pgid}
                    )
                break
            except DISCONNECTS + PERMANENT as exc:
                log.debug("run %s: %s still unreachable: %s", run.run_id, node.host, exc)
                self.connections.drop(node.host)
            run.stop_evt.wait(backoff_s(attempt))
            attempt += 1
        else:
            return
        with self._lock:
            if node in run.orphans:
                run.orphans.remove(node)
        save_launch(self.connections.db_path, run)
