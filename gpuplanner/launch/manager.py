"""RunManager: launch, watch, stop, resume and re-attach runs on this machine or SSH hosts.

Thread model: every public method may be called from any thread. Each watched run has one watcher
thread that owns its telemetry reading and supervision; callbacks (``on_records(run_id, records)``
and ``on_status(RunStatus)``) are invoked on that thread and must not block for long. Connections to
a host are shared by the runs on it and re-opened with backoff when they drop. ``close()`` stops the
watchers (not the runs), which keep going detached; ``attach()`` picks them up again later.

What a launch records (so another process can attach, stop or resume): the run row's ``config``
holds ``trainer_args`` and ``launch`` (nodes with host, run dir, process group id and command, GPUs,
environment, supervisor settings, restarts). Supervisor restarts are stored as ``restart`` events
with negative ``seq`` (the trainer's records use seq >= 0), carrying the time each restart cost.

Run bookkeeping, the same whichever front end (``gpuplanner run``, the window, a sweep) asked: a
``preflight`` launcher event with the pre-flight check's problems (:mod:`~gpuplanner.launch.preflight`),
a ``user_stop`` before a user's stop is signalled (:mod:`gpuplanner.history.stops`: the run is then
``stopped``, not ``preempted``), a ``failure`` with the stderr tail of a failed run
(:mod:`~gpuplanner.launch.run_failure`), recorded before the final state is announced, and a resume's
``restart`` event says what it resumed from (``after``: stopped, preempted, failed or killed).

The manager holds the runs and answers requests about them; the work is its parts': the run in memory
and its status (:mod:`~gpuplanner.launch.run_state`), the connections (:mod:`~gpuplanner.launch.connections`),
starting a run (:mod:`~gpuplanner.launch.run_start`), the watcher thread
(:mod:`~gpuplanner.launch.watcher`), restarts and failover (:mod:`~gpuplanner.launch.restarts`), the
history's records of a run (:mod:`~gpuplanner.launch.run_records`, :mod:`~gpuplanner.launch.run_billing`)
and probes, pre-flight checks and benchmarks of hosts (:mod:`~gpuplanner.launch.host_checks`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplanner.history.db import connect, open_db, resolve_db_path
from gpuplanner.history.failures import load_failure
from gpuplanner.launch import host_checks
from gpuplanner.launch.connections import Connections
from gpuplanner.launch.host_reports import BenchResult, HostProbe
from gpuplanner.launch.hosts import Host
from gpuplanner.launch.log_streaming import LogReader
from gpuplanner.launch.restarts import Restarts
from gpuplanner.launch.run_records import load_run, mark_ended, record_stop_request
from gpuplanner.launch.run_start import LaunchRequest, file_run, start_nodes
from gpuplanner.launch.run_state import (
    FINAL_STATES,
    ManagedRun,
    RecordsCallback,
    RunError,
    RunStatus,
    StatusCallback,
)
from gpuplanner.launch.ssh_connection import PassphraseCallback
from gpuplanner.launch.watcher import FAILOVER_AFTER_S, Watcher

__all__ = ["FINAL_STATES", "RecordsCallback", "RunError", "RunManager", "RunStatus", "StatusCallback"]

log = logging.getLogger(__name__)

JOIN_DEADLINE_S = 10.0


class RunManager:
    """See the module docstring. ``remote_root`` (default ``~/.gpuplanner``) and ``local_runs_root``
    (default ``DATA_DIR/runs``) say where run directories and the payload go."""

    def __init__(
        self,
        db_path: Any,
        *,
        passphrase_callback: PassphraseCallback | None = None,
        known_hosts_path: Any = None,
        remote_root: str | None = None,
        local_runs_root: Any = None,
        failover_after_s: float = FAILOVER_AFTER_S,
    ) -> None:
        self.db_path = resolve_db_path(db_path)
        open_db(self.db_path).close()  # create or migrate once, up front
        self._connections = Connections(
            self.db_path,
            passphrase_callback=passphrase_callback,
            known_hosts_path=known_hosts_path,
            remote_root=remote_root,
            local_runs_root=local_runs_root,
        )
        self._closing = threading.Event()
        self._restarts = Restarts(self._connections, self._closing)
        self._watcher = Watcher(self._connections, self._restarts, failover_after_s=failover_after_s)
        self._lock = threading.RLock()
        self._runs: dict[int, ManagedRun] = {}

    # -- settings --------------------------------------------------------------------------------------
    @property
    def passphrase_callback(self) -> PassphraseCallback | None:
        return self._connections.passphrase_callback

    @property
    def known_hosts_path(self) -> Any:
        return self._connections.known_hosts_path

    @property
    def remote_root(self) -> str | None:
        return self._connections.remote_root

    @property
    def local_runs_root(self) -> Any:
        return self._connections.local_runs_root

    @property
    def failover_after_s(self) -> float:
        """How long a run's host may not answer before the run moves to a fallback host."""
        return self._watcher.failover_after_s

    @failover_after_s.setter
    def failover_after_s(self, seconds: float) -> None:
        self._watcher.failover_after_s = seconds

    @property
    def idle_poll_s(self) -> float:
        """Stop-when-idle: seconds between utilisation readings."""
        return self._watcher.idle_poll_s

    @idle_poll_s.setter
    def idle_poll_s(self, seconds: float) -> None:
        self._watcher.idle_poll_s = seconds

    # -- hosts -----------------------------------------------------------------------------------------
    def test_host(self, host: Host) -> HostProbe:
        """Probe ``host`` as it is, not yet saved (:func:`gpuplanner.launch.host_checks.test_host`)."""
        return host_checks.test_host(self._connections, host)

    def probe(self, host_name: str) -> HostProbe:
        """Upload the payload if needed, run ``python -m trainer probe``; store GPU type/count on the host."""
        return host_checks.probe(self._connections, host_name)

    def preflight(self, host_name: str, values: Mapping[str, Any]) -> list[str]:
        """The pre-flight check (:func:`gpuplanner.launch.preflight.check_launch`) of the launch dialog's
        ``values`` on a stored host: this machine's files, or an SSH host's through its connection."""
        return host_checks.check_launch(self._connections, host_name, values)

    def bench(
        self,
        host_name: str,
        trainer_args: Sequence[str],
        *,
        warmup_steps: int = 5,
        steps: int = 30,
        gpu_type: str | None = None,
        record: bool = True,
        timeout_s: float = 3600.0,
    ) -> BenchResult:
        """Run ``python -m trainer bench`` on the host and record it as calibration
        (:func:`gpuplanner.launch.host_checks.bench`)."""
        return host_checks.bench(
            self._connections,
            host_name,
            trainer_args,
            warmup_steps=warmup_steps,
            steps=steps,
            gpu_type=gpu_type,
            record=record,
            timeout_s=timeout_s,
        )

    # -- launching -------------------------------------------------------------------------------------
    def launch(
        self,
        host_name: str,
        trainer_args: Sequence[str],
        *,
        name: str | None = None,
        plan_id: int | None = None,
        gpus: int = 1,
        auto_resume: bool = False,
        fallback_hosts: Sequence[str] = (),
        max_restarts: int = 3,
        budget_usd: float | None = None,
        on_records: RecordsCallback | None = None,
        on_status: StatusCallback | None = None,
        nodes: Sequence[str] = (),
        env: dict[str, str] | None = None,
        rdzv_port: int | None = None,
        price_usd_per_gpu_hour: float | None = None,
        tags: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        workdir: str | None = None,
        max_gpu_hours: float | None = None,
    ) -> int:
        """Start a run and return its history id once the process started. ``tags``: ``key: value`` labels
        stored with the run (checked before anything starts). ``nodes``: further hosts of
        a multi-node job (the first host hosts the rendezvous); ``env``: extra environment variables;
        ``price_usd_per_gpu_hour``: this run's price instead of the host's. A budget needs a price on
        the host and every fallback host (:class:`~gpuplanner.launch.budget.BudgetError` otherwise).

        ``command``: the user's own command instead of the bundled trainer (``trainer_args`` must then
        be empty), run under the payload's monitor (``python -m trainer exec``, see
        :mod:`trainer.command_monitor`) in ``workdir`` (default: the run directory), which enforces the
        budget and ``max_gpu_hours``."""
        if self._closing.is_set():
            raise RunError("the run manager is closed")
        request = LaunchRequest(
            host_name,
            trainer_args,
            name=name,
            plan_id=plan_id,
            gpus=gpus,
            auto_resume=auto_resume,
            fallback_hosts=fallback_hosts,
            max_restarts=max_restarts,
            budget_usd=budget_usd,
            nodes=nodes,
            env=env or {},
            rdzv_port=rdzv_port,
            price_usd_per_gpu_hour=price_usd_per_gpu_hour,
            tags=tags,
            command=command,
            workdir=workdir,
            max_gpu_hours=max_gpu_hours,
        )
        run = file_run(self._connections, request)
        if on_records:
            run.on_records.append(on_records)
        if on_status:
            run.on_status.append(on_status)
        with self._lock:
            self._runs[run.run_id] = run
        run.set_state("starting")
        run.launched_at = time.time()  # the host is paid for from now (billed time)
        try:
            start_nodes(self._connections, run)
        except BaseException as exc:
            run.error = str(exc)
            self._watcher.record_failure(run, None)
            run.set_state("failed")
            mark_ended(self.db_path, run.run_id, "failed")
            with self._lock:
                self._runs.pop(run.run_id, None)
            raise
        run.set_state("running")
        self._watcher.start(run)
        return run.run_id

    # -- control ---------------------------------------------------------------------------------------
    def _run(self, run_id: int) -> ManagedRun:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = load_run(self.db_path, run_id)
            return run

    def _signal(self, run: ManagedRun, signame: str) -> None:
        for node in run.nodes:
            if node.pgid is not None and not node.done:
                self._connections.get(node.host).signal(node.pgid, signame)

    def stop(self, run_id: int, *, by: str = "user", reason: str | None = None) -> None:
        """Graceful stop: SIGTERM to the process group; the trainer checkpoints and exits 75. The run ends
        ``stopped`` (not ``preempted``): a ``user_stop`` is recorded first (``by``: who asked, e.g. ``cli``,
        ``window``, ``sweep``; ``reason``: why, e.g. a sweep's ``pruned``), so whichever process stores the
        trainer's run_end stores it as a stop (see :mod:`gpuplanner.history.stops`)."""
        run = self._run(run_id)
        if run.state in FINAL_STATES:
            return  # it ended first (a search pruning a trial as it finished): "stopping" would never end
        record_stop_request(self.db_path, run_id, by, reason)
        run.user_action = "stop"
        if run.state in ("preempted", "resuming"):  # waiting for an automatic resume: cancel it
            run.wake.set()
            return
        run.set_state("stopping")
        self._signal(run, "TERM")
        run.wake.set()

    def kill(self, run_id: int) -> None:
        """SIGKILL to the process group (work since the last checkpoint is lost)."""
        run = self._run(run_id)
        run.user_action = "kill"
        self._signal(run, "KILL")
        if not run.watched():
            run.state = "killed"
            mark_ended(self.db_path, run_id, "killed")
        run.wake.set()

    def simulate_preemption(self, run_id: int, resume_after_s: float = 5.0) -> None:
        """A graceful stop followed by an automatic resume on the same host after ``resume_after_s``."""
        run = self._run(run_id)
        if not run.watched():
            raise RunError(f"run {run_id} is not being watched here; attach to it first")
        run.user_action, run.resume_after_s = "preempt", resume_after_s
        run.set_state("stopping")
        self._signal(run, "TERM")
        run.wake.set()

    def resume(self, run_id: int) -> None:
        """Restart a stopped, preempted or failed run on its run directory (the trainer resumes)."""
        run = self._run(run_id)
        if run.thread is not None and run.thread.is_alive():
            if run.state in ("preempted", "resuming"):
                run.resume_now = True
                run.wake.set()
                return
            if run.state not in FINAL_STATES:
                raise RunError(f"run {run_id} is {run.state}; only a stopped, preempted or failed run can be resumed")
            run.thread.join(JOIN_DEADLINE_S)
        if run.state in ("running", "stopping", "starting", "detached", "unreachable"):
            raise RunError(f"run {run_id} is {run.state}; only a stopped, preempted or failed run can be resumed")
        if run.state == "finished":
            raise RunError(f"run {run_id} has finished")
        with self._lock:
            self._runs[run_id] = run
        after = run.state
        run.user_action, run.stop_evt = None, threading.Event()
        run.launched_at = time.time()  # a new billed span
        self._restarts.restart(run, run.nodes[0].host, "resumed by the user", time.time(), after)
        self._watcher.start(run)

    def failure(self, run_id: int) -> dict[str, Any] | None:
        """Why a run failed, as recorded (:func:`gpuplanner.history.failures.load_failure`): the error, the
        exit code and the stderr tail of the failed process; None when nothing was recorded."""
        db = connect(self.db_path)
        try:
            return load_failure(db, run_id)
        finally:
            db.close()

    def status(self, run_id: int) -> RunStatus:
        return self._run(run_id).status()

    def open_log(self, run_id: int, *, node: int = 0, stream: str = "out") -> LogReader:
        """A reader of node ``node``'s stdout (``stream="out"``) or stderr (``"err"``) on its host, as the
        run's launch document names it (:class:`~gpuplanner.launch.log_streaming.LogReader`); RunError for a
        run GPU Planner did not launch or a node it does not have."""
        nodes = load_run(self.db_path, run_id).nodes
        if not 0 <= node < len(nodes):
            raise RunError(f"--node: run {run_id} has node{'s 0 to' if len(nodes) > 1 else ''} {len(nodes) - 1}")
        return LogReader(self._connections, run_id, node, nodes[node], stream)

    # -- watching --------------------------------------------------------------------------------------
    def attach(
        self, run_id: int, on_records: RecordsCallback | None = None, on_status: StatusCallback | None = None
    ) -> None:
        """Watch a run launched earlier: backfill from the stored offset, then follow (and supervise)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or not run.watched():
                run = load_run(self.db_path, run_id) if run is None else run
                self._runs[run_id] = run
                fresh = True
            else:
                fresh = False
        if on_records:
            run.on_records.append(on_records)
        if on_status:
            run.on_status.append(on_status)
        if fresh:
            run.stop_evt = threading.Event()
            if run.state in ("detached", "unreachable"):
                run.state = "running"
            self._watcher.start(run)

    def detach(self, run_id: int) -> None:
        """Stop watching a run (it goes on); ``attach`` later catches up."""
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None:
            return
        run.stop_evt.set()
        run.wake.set()
        if run.thread is not None and run.thread is not threading.current_thread():
            run.thread.join(JOIN_DEADLINE_S)
        if run.state not in FINAL_STATES:
            run.set_state("detached")

    def detach_all(self) -> None:
        with self._lock:
            ids = list(self._runs)
        for run_id in ids:
            self.detach(run_id)

    def live_runs(self) -> list[int]:
        with self._lock:
            return [i for i, r in self._runs.items() if r.watched()]

    def wait(self, run_id: int, timeout_s: float | None = None) -> RunStatus:
        """Block until the run's watcher ends (a final state, or detached); returns the status."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None and run.thread is not None:
            run.thread.join(timeout_s)
        return self.status(run_id) if run is None else run.status()

    def close(self) -> None:
        """Stop every watcher (not the runs) and join them with a deadline; close connections."""
        self._closing.set()
        self.detach_all()
        self._connections.close_all()
