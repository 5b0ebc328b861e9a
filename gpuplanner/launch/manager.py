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
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import paramiko
from sqlite_utils import Database

from gpuplanner.history.billing import BILLED, billed_span
from gpuplanner.history.calibration import record_bench
from gpuplanner.history.db import connect, open_db, resolve_db_path, write_transaction
from gpuplanner.history.failures import load_failure
from gpuplanner.history.launcher_events import record_launcher_event
from gpuplanner.history.plans import get_plan, planned_figures
from gpuplanner.history.runs import LaunchDocument, create_run, get_run, update_run
from gpuplanner.history.slurm_queue import QueueState, job_queue
from gpuplanner.history.stops import record_user_stop, stopped_since_start
from gpuplanner.history.tags import check_tags
from gpuplanner.launch import after_run, command_lines, preflight, supervisor
from gpuplanner.launch.backend import Backend
from gpuplanner.launch.budget import BudgetError, check_budget
from gpuplanner.launch.host_reports import BenchResult, HostProbe
from gpuplanner.launch.hosts import Host, HostError, get_host, update_host, validate_host
from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey
from gpuplanner.launch.local_backend import LocalBackend, TrainerPythonMissing
from gpuplanner.launch.run_failure import collect_failure
from gpuplanner.launch.slurm_backend import SlurmBackend
from gpuplanner.launch.ssh_backend import SSHBackend
from gpuplanner.launch.ssh_connection import AuthenticationFailed, PassphraseCallback, SSHError
from gpuplanner.launch.streaming import NodeStream
from trainer.protocol import EVENTS_FILE, config_model_name
from trainer.settings import TrainSettings
from trainer.telemetry import NODE_SEQ_STRIDE, node_events_file

log = logging.getLogger(__name__)

POLL_S = 0.25
STATE_EVERY_S = 1.0
RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
UNREACHABLE_AFTER_S = 3.0
FAILOVER_AFTER_S = 60.0
JOIN_DEADLINE_S = 10.0
FINAL_STATES = ("finished", "failed", "stopped", "killed")
_DISCONNECTS = (SSHError, OSError, EOFError, paramiko.SSHException)
_PERMANENT = (UnknownHostKey, ChangedHostKey, AuthenticationFailed, HostError)

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
class _Node:
    host: str
    run_dir: str
    tag: str
    pgid: int | None = None
    command: list[str] = field(default_factory=list)
    done: bool = False
    exit_code: int | None = None


@dataclass
class _Run:
    run_id: int
    trainer_args: list[str]
    nodes: list[_Node]
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
    orphans: list[_Node] = field(default_factory=list)  # nodes left behind on an unreachable host (failover)
    queue: QueueState | None = None  # RunStatus.queue

    @property
    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

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


def _model_name(args: Sequence[str]) -> str | None:
    """The model a trainer command line trains, named as the history names it (``--flag value`` or
    ``--flag=value``): read by the shared settings contract, or, for flags it does not parse (``trainer
    bench``'s), found by name."""
    try:
        return TrainSettings.from_argv(args).model_name
    except ValueError:
        pass
    args = list(args)
    for flag in ("--model", "--model-config"):
        value = next((a.split("=", 1)[1] for a in args if a.startswith(flag + "=")), None)
        if value is None and flag in args and args.index(flag) + 1 < len(args):
            value = args[args.index(flag) + 1]
        if value:
            return config_model_name(value) if flag == "--model-config" else value
    return None


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
        self.passphrase_callback = passphrase_callback
        self.known_hosts_path = known_hosts_path
        self.remote_root = remote_root
        self.local_runs_root = local_runs_root
        self.failover_after_s = failover_after_s
        self.idle_poll_s = after_run.IDLE_POLL_S  # stop-when-idle: seconds between utilisation readings
        self._lock = threading.RLock()
        self._runs: dict[int, _Run] = {}
        self._backends: dict[str, Backend] = {}
        self._closed = False

    # -- hosts and backends ------------------------------------------------------------------------
    def _db(self) -> Database:
        return connect(self.db_path)

    def _make_backend(self, host: Host) -> Backend:
        if host.kind == "local":
            return LocalBackend(host, self.local_runs_root)
        return (SlurmBackend if host.kind == "slurm" else SSHBackend)(
            host,
            known_hosts_path=self.known_hosts_path,
            passphrase_callback=self.passphrase_callback,
            remote_root=self.remote_root,
        )

    def _backend(self, host_name: str) -> Backend:
        """The connected backend of a host (shared by its runs); reconnects if the connection dropped."""
        with self._lock:
            backend = self._backends.get(host_name)
            if backend is None:
                backend = self._backends[host_name] = self._make_backend(get_host(self.db_path, host_name))
        backend.connect()
        return backend

    def _drop_backend(self, host_name: str, generation: int | None = None) -> None:
        """Close a host's connection after a failure; with ``generation`` only if it is still the connection
        the failure was seen on (another thread may have reconnected since)."""
        with self._lock:
            backend = self._backends.get(host_name)
        if backend is None:
            return
        close_if = getattr(backend, "close_if", None)
        if generation is not None and close_if is not None:
            close_if(generation)
        else:
            backend.close()

    def test_host(self, host: Host) -> HostProbe:
        """Connect to ``host`` as it is (not yet saved: the Add host dialog's Test connection), probe it as
        :meth:`probe` does, close the connection and return the probe; the history is not touched. An
        invalid host raises HostError; an unknown or changed host key, a refused login or an unreachable
        address raise as for a saved host."""
        validate_host(host)
        backend = self._make_backend(host)
        try:
            backend.connect()
            return backend.probe().copy()
        finally:
            backend.close()

    def probe(self, host_name: str) -> HostProbe:
        """Upload the payload if needed, run ``python -m trainer probe``; store GPU type/count on the host."""
        host = get_host(self.db_path, host_name)
        result = self._backend(host_name).probe()
        gpus = result.get("gpus") or []
        gpu_type = gpus[0]["name"] if gpus else None
        if result.get("ok"):
            update_host(self.db_path, replace(host, gpu_type=gpu_type, gpu_count=len(gpus), probe=result))
        return result

    def preflight(self, host_name: str, values: Mapping[str, Any]) -> list[str]:
        """The pre-flight check (:func:`gpuplanner.launch.preflight.check_launch`) of the launch dialog's
        ``values`` on a stored host: this machine's files, or an SSH host's through its connection."""
        host = get_host(self.db_path, host_name)
        backend = None if host.kind == "local" else self._backend(host_name)
        return preflight.check_on_host(host, backend, dict(values))

    def _preflight_of(self, host_name: str, args: Sequence[str], user_command: Sequence[str]) -> dict[str, Any]:
        """What :meth:`launch` records as the run's ``preflight`` event: the problems the check found (it
        never refuses a launch; the launch dialog shows them before), or why nothing was checked."""
        if user_command:
            return {
                "problems": [],
                "not_checked": "a command of your own (only the bundled trainer's flags are checked)",
            }
        try:
            return {"problems": self.preflight(host_name, preflight.values_from_args(args))}
        except Exception as exc:  # noqa: BLE001 - a check that cannot run does not stop the launch
            return {"problems": [], "not_checked": f"{type(exc).__name__}: {exc}"}

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
        """Run ``python -m trainer bench`` with ``trainer_args`` on the host (in the foreground) and return its
        JSON result. With ``record``, a GPU measurement is stored in the history's bench results (the
        planner's calibration; ``recorded_id`` in the result): under ``gpu_type`` when given (the catalog
        GPU it stands for), else under the GPU the trainer ran on. A CPU measurement is only stored under
        an explicit ``gpu_type``; ``not_recorded`` says why nothing was stored."""
        args = command_lines.check_trainer_args(trainer_args)
        if warmup_steps < 0 or steps < 1:
            raise ValueError("bench needs at least 1 measured step and no negative warm-up")
        bench_args = [*args, "--bench-warmup-steps", str(warmup_steps), "--bench-steps", str(steps)]
        try:
            result = BenchResult(**self._backend(host_name).bench(bench_args, timeout_s))
        except (RuntimeError, TrainerPythonMissing) as exc:  # a failed bench; no Python that can run it
            raise RunError(f"{host_name}: {exc}") from exc
        device = result.get("device")
        where = gpu_type or (device if isinstance(device, str) and device != "cpu" else None)
        if not record:
            result["not_recorded"] = "not asked to record"
        elif where is None:
            result["not_recorded"] = "measured on the CPU, not a GPU"
        else:
            db = self._db()
            try:
                result["recorded_id"] = record_bench(
                    db, gpu_type=where, model_name=_model_name(args) or "unknown", result=result, host=host_name
                )
            finally:
                db.close()
            result["recorded_gpu_type"] = where
        return result

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
        if self._closed:
            raise RunError("the run manager is closed")
        user_command = command_lines.check_user_command(command, trainer_args, workdir, max_gpu_hours)
        args = command_lines.check_trainer_args(trainer_args)
        tags = check_tags(tags)  # a bad tag is a ValueError (TagError) before any host is touched
        if gpus < 1:
            raise ValueError("gpus must be at least 1")
        host_names = [host_name, *nodes]
        hosts = [get_host(self.db_path, h) for h in host_names]
        fallbacks = [get_host(self.db_path, fallback) for fallback in fallback_hosts]
        if price_usd_per_gpu_hour is not None and not (
            math.isfinite(price_usd_per_gpu_hour) and price_usd_per_gpu_hour >= 0
        ):
            raise BudgetError(f"price: a number of US dollars per GPU-hour, 0 or more, not {price_usd_per_gpu_hour!r}")
        check_budget(
            budget_usd,
            [
                (h.name, price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else h.price_usd_per_gpu_hour)
                for h in [hosts[0], *fallbacks]
            ],
        )
        for h in host_names:
            backend = self._backend(h)  # connect first: an unknown host key must not leave a run row behind
            if isinstance(backend, LocalBackend):
                try:
                    backend.python  # noqa: B018 (no interpreter that can run the trainer: say how to make one)
                except TrainerPythonMissing as exc:
                    raise RunError(str(exc)) from exc
        host = hosts[0]
        checked = self._preflight_of(host_name, args, user_command)
        if len(host_names) > 1 and rdzv_port is None:
            rdzv_port = 29400 + secrets.randbelow(500)
        db = self._db()
        try:
            planned, planned_doc = None, None
            if plan_id is not None:
                planned_doc = get_plan(db, plan_id).document
                planned = planned_figures(planned_doc, host.db_pricing)
            # The config is the trainer's own (its run_start fills it); what was launched has its own column
            config: dict[str, Any] | None = None
            launch: LaunchDocument = {"trainer_args": args}
            if user_command:
                # What the planner's calibration matches a run on, taken from the plan it was launched
                # against (a user's command says nothing about its model).
                config = command_lines.plan_facts(planned_doc) or None
                launch = {"command": user_command, "workdir": workdir}
            run_id = create_run(
                db,
                name=name,
                host=host_name,
                gpu_type=host.gpu_type,
                gpu_count=gpus * len(hosts) if host.kind != "slurm" else host.slurm_settings.gpus_in_job,
                price_usd_per_gpu_hour=(
                    price_usd_per_gpu_hour if price_usd_per_gpu_hour is not None else host.price_usd_per_gpu_hour
                ),
                pricing=host.db_pricing,
                model_name=(config or {}).get("model") if user_command else _model_name(args),
                config=config,
                launch=launch,
                plan_id=plan_id,
                source=f"launch:{host_name}",
                planned=planned,
                tags=tags,
            )
            record_launcher_event(db, run_id, "preflight", checked)
        finally:
            db.close()
        run = _Run(
            run_id,
            args,
            [_Node(h, "", f"node{i}") for i, h in enumerate(host_names)],
            gpus=gpus,
            env=dict(env or {}),
            auto_resume=auto_resume,
            fallback_hosts=list(fallback_hosts),
            max_restarts=max_restarts,
            budget_usd=budget_usd,
            price=price_usd_per_gpu_hour,
            rdzv_port=rdzv_port,
            command=user_command,
            workdir=workdir,
            max_gpu_hours=max_gpu_hours,
        )
        if on_records:
            run.on_records.append(on_records)
        if on_status:
            run.on_status.append(on_status)
        with self._lock:
            self._runs[run_id] = run
        self._set_state(run, "starting")
        run.launched_at = time.time()  # the host is paid for from now (billed time)
        try:
            self._start_nodes(run)
        except BaseException as exc:
            run.error = str(exc)
            self._record_failure(run, None)
            self._set_state(run, "failed")
            self._mark_db(run_id, "failed")
            with self._lock:
                self._runs.pop(run_id, None)
            raise
        self._set_state(run, "running")
        self._start_watcher(run)
        return run_id

    def _start_nodes(self, run: _Run, extra_env: dict[str, str] | None = None) -> None:
        """Start every node's process (fresh run dirs, or the existing ones: the trainer resumes)."""
        first = get_host(self.db_path, run.nodes[0].host)
        rdzv_host = first.hostname if first.kind == "ssh" else "127.0.0.1"
        price = run.price if run.price is not None else first.price_usd_per_gpu_hour
        for i, node in enumerate(run.nodes):
            backend = self._backend(node.host)
            node.run_dir = backend.run_dir(run.run_id)
            if run.command:
                slurm = first.slurm_settings if first.kind == "slurm" else None
                node.command = command_lines.monitor_args(
                    run.command,
                    node.run_dir,
                    price=price,
                    gpus=slurm.processes_per_node if slurm else run.gpus,
                    budget_usd=run.budget_usd,
                    max_gpu_hours=run.max_gpu_hours,
                    workdir=run.workdir,
                    nodes=slurm.nodes if slurm else len(run.nodes),
                    node_rank=None if slurm else i,  # on Slurm each node's monitor reads $SLURM_NODEID
                    node_name=None if slurm else node.host,
                )
                env = (
                    {}  # a Slurm job's layout is in its SLURM_* variables
                    if first.kind == "slurm"
                    else command_lines.node_env(
                        nnodes=len(run.nodes), node_rank=i, rdzv_host=rdzv_host, rdzv_port=run.rdzv_port, gpus=run.gpus
                    )
                )
                node.pgid = backend.start(node.run_dir, node.tag, node.command, {**env, **run.env, **(extra_env or {})})
                node.done, node.exit_code = False, None
                continue
            train = command_lines.trainer_args(run.trainer_args, node.run_dir, price, run.budget_usd)
            node.command = command_lines.node_command(
                train,
                gpus=run.gpus,
                nnodes=len(run.nodes),
                node_rank=i,
                rdzv_host=rdzv_host,
                rdzv_port=run.rdzv_port,
                run_id=run.run_id,
            )
            node.pgid = backend.start(node.run_dir, node.tag, node.command, {**run.env, **(extra_env or {})})
            node.done, node.exit_code = False, None
        run.exit_code = None
        self._save_launch(run)

    def _save_launch(self, run: _Run) -> None:
        db = self._db()
        try:
            launch = get_run(db, run.run_id).launch or LaunchDocument()
            if not run.command:
                launch["trainer_args"] = run.trainer_args
            launch["launch"] = run.launch_doc()
            update_run(db, run.run_id, launch=launch, host=run.nodes[0].host)
        finally:
            db.close()

    def _mark_db(self, run_id: int, status: str) -> None:
        db = self._db()
        try:
            update_run(db, run_id, status=status, ended_at=time.time())
        finally:
            db.close()

    # -- control ---------------------------------------------------------------------------------------
    def _run(self, run_id: int) -> _Run:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = self._load(run_id)
            return run

    def _load(self, run_id: int) -> _Run:
        """A run launched earlier (maybe by another process), from what its row recorded."""
        db = self._db()
        try:
            row = get_run(db, run_id)
            last = db.execute(
                "SELECT MAX(last_seq) FROM stream_positions WHERE run_id = ? AND last_seq < ?",
                [run_id, NODE_SEQ_STRIDE],
            ).fetchone()[0]
            lanes = db.execute(  # the other nodes' lanes (events.nodeN.jsonl)
                "SELECT last_seq / ?, MAX(last_seq) FROM stream_positions WHERE run_id = ? AND last_seq >= ?"
                " GROUP BY last_seq / ?",
                [NODE_SEQ_STRIDE, run_id, NODE_SEQ_STRIDE, NODE_SEQ_STRIDE],
            ).fetchall()
        except Exception as exc:
            raise RunError(str(exc)) from exc
        finally:
            db.close()
        launched = row.launch or LaunchDocument()
        doc = launched.get("launch")
        if not doc:
            raise RunError(f"run {run_id} was not launched by GPU Planner (imported); it cannot be controlled")
        nodes = [_Node(n["host"], n["run_dir"], n["tag"], n.get("pgid"), n.get("command", [])) for n in doc["nodes"]]
        state = {
            "running": "detached",
            "finished": "finished",
            "budget_stop": "finished",
            "early_stop": "finished",
            "preempted": "preempted",
            "killed": "killed",
            "stopped": "stopped",
        }.get(row.status, "failed")
        orphans = [_Node(n["host"], n["run_dir"], n["tag"], n.get("pgid")) for n in doc.get("orphans", [])]
        return _Run(
            run_id,
            launched.get("trainer_args", []),
            nodes,
            gpus=doc.get("gpus", 1),
            env=doc.get("env", {}),
            auto_resume=doc.get("auto_resume", False),
            fallback_hosts=doc.get("fallback_hosts", []),
            max_restarts=doc.get("max_restarts", 3),
            budget_usd=doc.get("budget_usd"),
            price=doc.get("price_usd_per_gpu_hour"),
            rdzv_port=doc.get("rdzv_port"),
            command=doc.get("user_command") or [],
            workdir=doc.get("workdir"),
            max_gpu_hours=doc.get("max_gpu_hours"),
            launched_at=doc.get("launched_at"),
            restarts=doc.get("restarts", 0),
            state=state,
            last_seq=last,
            lane_seq={int(lane): int(seq) for lane, seq in lanes},
            orphans=orphans,
        )

    def _signal(self, run: _Run, signame: str) -> None:
        for node in run.nodes:
            if node.pgid is not None and not node.done:
                self._backend(node.host).signal(node.pgid, signame)

    def stop(self, run_id: int, *, by: str = "user", reason: str | None = None) -> None:
        """Graceful stop: SIGTERM to the process group; the trainer checkpoints and exits 75. The run ends
        ``stopped`` (not ``preempted``): a ``user_stop`` is recorded first (``by``: who asked, e.g. ``cli``,
        ``window``, ``sweep``; ``reason``: why, e.g. a sweep's ``pruned``), so whichever process stores the
        trainer's run_end stores it as a stop (see :mod:`gpuplanner.history.stops`)."""
        run = self._run(run_id)
        if run.state not in FINAL_STATES:
            db = self._db()
            try:
                record_user_stop(db, run_id, by, reason)
            finally:
                db.close()
        run.user_action = "stop"
        if run.state in ("preempted", "resuming"):  # waiting for an automatic resume: cancel it
            run.wake.set()
            return
        self._set_state(run, "stopping")
        self._signal(run, "TERM")
        run.wake.set()

    def kill(self, run_id: int) -> None:
        """SIGKILL to the process group (work since the last checkpoint is lost)."""
        run = self._run(run_id)
        run.user_action = "kill"
        self._signal(run, "KILL")
        if run.thread is None or not run.thread.is_alive():
            run.state = "killed"
            self._mark_db(run_id, "killed")
        run.wake.set()

    def simulate_preemption(self, run_id: int, resume_after_s: float = 5.0) -> None:
        """A graceful stop followed by an automatic resume on the same host after ``resume_after_s``."""
        run = self._run(run_id)
        if run.thread is None or not run.thread.is_alive():
            raise RunError(f"run {run_id} is not being watched here; attach to it first")
        run.user_action, run.resume_after_s = "preempt", resume_after_s
        self._set_state(run, "stopping")
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
        self._restart(run, run.nodes[0].host, "resumed by the user", time.time(), after)
        self._start_watcher(run)

    def failure(self, run_id: int) -> dict[str, Any] | None:
        """Why a run failed, as recorded (:func:`gpuplanner.history.failures.load_failure`): the error, the
        exit code and the stderr tail of the failed process; None when nothing was recorded."""
        db = self._db()
        try:
            return load_failure(db, run_id)
        finally:
            db.close()

    def status(self, run_id: int) -> RunStatus:
        return self._status_of(self._run(run_id))

    def attach(
        self, run_id: int, on_records: RecordsCallback | None = None, on_status: StatusCallback | None = None
    ) -> None:
        """Watch a run launched earlier: backfill from the stored offset, then follow (and supervise)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.thread is None or not run.thread.is_alive():
                run = self._load(run_id) if run is None else run
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
            self._start_watcher(run)

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
            self._set_state(run, "detached")

    def detach_all(self) -> None:
        with self._lock:
            ids = list(self._runs)
        for run_id in ids:
            self.detach(run_id)

    def live_runs(self) -> list[int]:
        with self._lock:
            return [i for i, r in self._runs.items() if r.thread is not None and r.thread.is_alive()]

    def wait(self, run_id: int, timeout_s: float | None = None) -> RunStatus:
        """Block until the run's watcher ends (a final state, or detached); returns the status."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None and run.thread is not None:
            run.thread.join(timeout_s)
        return self.status(run_id) if run is None else self._status_of(run)

    def close(self) -> None:
        """Stop every watcher (not the runs) and join them with a deadline; close connections."""
        self._closed = True
        self.detach_all()
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            backend.close()

    # -- status and callbacks --------------------------------------------------------------------------
    def _status_of(self, run: _Run) -> RunStatus:
        node = run.nodes[0]
        return RunStatus(
            run.run_id,
            run.state,
            node.pgid,
            run.exit_code,
            run.last_seq,
            node.host,
            node.run_dir,
            run.restarts,
            run.reconnects,
            run.last_reconnect_s,
            run.error,
            run.queue.copy() if run.queue else None,
        )

    def _set_state(self, run: _Run, state: str) -> None:
        run.state = state
        status = self._status_of(run)
        for callback in list(run.on_status):
            try:
                callback(status)
            except Exception:
                log.exception("on_status callback failed")

    def _deliver(self, run: _Run, records: list[dict[str, Any]]) -> None:
        # Each node of a user's command writes its own lane of seq numbers (node N from N x NODE_SEQ_STRIDE);
        # node 0's lane holds the run's records and is ``last_seq``.
        fresh = []
        for record in sorted(records, key=lambda r: r["seq"]):
            lane = record["seq"] // NODE_SEQ_STRIDE
            last = run.last_seq if lane == 0 else run.lane_seq.get(lane)
            if last is None or record["seq"] > last:
                fresh.append(record)
                if lane == 0:
                    run.last_seq = record["seq"]
                else:
                    run.lane_seq[lane] = record["seq"]
        records = fresh
        if not records:
            return
        for callback in list(run.on_records):
            try:
                callback(run.run_id, records)
            except Exception:
                log.exception("on_records callback failed")

    # -- the watcher -------------------------------------------------------------------------------------
    def _start_watcher(self, run: _Run) -> None:
        run.thread = threading.Thread(target=self._watch, args=(run,), name=f"run-{run.run_id}-watcher", daemon=True)
        run.thread.start()
        for orphan in list(run.orphans):
            self._start_reaper(run, orphan)

    # -- processes left behind by a failover ---------------------------------------------------------------
    def _start_reaper(self, run: _Run, node: _Node) -> None:
        threading.Thread(
            target=self._reap, args=(run, node), name=f"run-{run.run_id}-reaper-{node.host}", daemon=True
        ).start()

    def _reap(self, run: _Run, node: _Node) -> None:
        """Stop the process a failover left on a host that stopped answering, once the host answers again.

        It may still be running (a network partition rather than a lost machine): two copies of one
        run would write the same checkpoint mirror. It gets SIGKILL, not SIGTERM: a graceful stop
        would checkpoint and mirror a stale state over the run that moved on. Retries with backoff
        while the manager is open; the orphan is kept in the launch record, so whoever attaches to the
        run later goes on trying.
        """
        attempt = 0
        while not run.stop_evt.is_set() and not self._closed:
            try:
                backend = self._backend(node.host)
                if node.pgid is not None and backend.state(node.run_dir, node.tag, node.pgid).alive:
                    backend.signal(node.pgid, "KILL")
                    log.info("run %s: stopped the process left on %s after the failover", run.run_id, node.host)
                    self._record_event(run, "orphan_stopped", {"host": node.host, "pgid": node.pgid})
                break
            except _DISCONNECTS + _PERMANENT as exc:
                log.debug("run %s: %s still unreachable: %s", run.run_id, node.host, exc)
                self._drop_backend(node.host)
            run.stop_evt.wait(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
            attempt += 1
        else:
            return
        with self._lock:
            if node in run.orphans:
                run.orphans.remove(node)
        self._save_launch(run)

    def _watch(self, run: _Run) -> None:
        db = self._db()
        attempt = 0
        try:
            while not run.stop_evt.is_set():
                try:
                    code = self._follow(run, db)
                except _PERMANENT as exc:
                    run.error = str(exc)
                    self._set_state(run, "unreachable")
                    return
                except _DISCONNECTS as exc:
                    now = time.monotonic()
                    if run.disconnected_at is None:
                        run.disconnected_at = now
                        log.info("run %s: connection lost (%s); reconnecting", run.run_id, exc)
                    for node in run.nodes:
                        self._drop_backend(node.host, run.generations.get(node.host))
                    down = now - run.disconnected_at
                    if down >= UNREACHABLE_AFTER_S and run.state != "unreachable":
                        run.error = str(exc)
                        self._set_state(run, "unreachable")
                    if down >= self.failover_after_s and len(run.nodes) == 1:
                        decision = supervisor.decide_unreachable(
                            auto_resume=run.auto_resume,
                            restarts=run.restarts,
                            max_restarts=run.max_restarts,
                            host=run.nodes[0].host,
                            hosts=[run.nodes[0].host, *run.fallback_hosts],
                        )
                        if decision is not None and decision.host is not None:
                            try:
                                self._restart(run, decision.host, decision.reason, time.time() - down)
                                run.disconnected_at, attempt = None, 0
                                continue
                            except _DISCONNECTS + _PERMANENT as restart_exc:
                                log.warning("run %s: fallback to %s failed: %s", run.run_id, decision.host, restart_exc)
                    run.wake.clear()
                    run.wake.wait(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
                    attempt += 1
                    continue
                attempt = 0
                if code is _DETACHED or not self._after_exit(run, db, code):
                    return
        except Exception as exc:  # never let a watcher die silently
            log.exception("run %s: watcher failed", run.run_id)
            run.error = f"{type(exc).__name__}: {exc}"
            self._record_failure(run, run.exit_code)
            self._set_state(run, "failed")
            try:  # the history ends in a final state too
                self._finish_db(db, run, "failed", run.exit_code)
            except Exception:
                log.exception("run %s: could not record the failure", run.run_id)
        finally:
            db.close()

    def _follow(self, run: _Run, db: Database) -> Any:
        """Stream every node's telemetry until all its processes ended; returns the combined exit code."""
        backends = {node.host: self._backend(node.host) for node in run.nodes}
        run.generations = {host: getattr(backend, "generation", None) for host, backend in backends.items()}
        if run.disconnected_at is not None:
            run.last_reconnect_s = time.monotonic() - run.disconnected_at
            run.reconnects += 1
            run.disconnected_at = None
            log.info("run %s: reconnected after %.2f s", run.run_id, run.last_reconnect_s)
            self._set_state(run, "stopping" if run.user_action in ("stop", "preempt", "kill") else "running")
        elif run.state in ("unreachable", "detached"):
            self._set_state(run, "running")
        streams = [
            (node, NodeStream(db, run.run_id, node.host, node.run_dir, name))
            for node, names in zip(run.nodes, self._events_files(run))
            for name in names
        ]
        next_check = 0.0
        while not run.stop_evt.is_set():
            records: list[dict[str, Any]] = []
            for node, stream in streams:
                records.extend(stream.poll(backends[node.host]))
            self._deliver(run, records)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + STATE_EVERY_S
                if self._check_nodes(run, backends):
                    for node, stream in streams:  # the last records written before exit
                        records.extend(stream.poll(backends[node.host]))
                    self._deliver(run, records)
                    return self._combined_exit(run)
            if not records:
                run.wake.clear()
                run.wake.wait(POLL_S)
        return _DETACHED

    def _events_files(self, run: _Run) -> list[list[str]]:
        """The events files in each node's run directory: ``events.jsonl`` and every other node's own.

        A Slurm job's nodes share one run directory: node N > 0 of the host's ``nodes`` writes
        ``events.nodeN.jsonl`` there. Hosts of a multi-host run each have their own run directory.
        """
        try:
            first = get_host(self.db_path, run.nodes[0].host)
            slurm_nodes = first.slurm_settings.nodes if first.kind == "slurm" else 0
        except HostError:  # a host removed or broken since: node 0's file at least
            slurm_nodes = 0
        if slurm_nodes:
            shared = [node_events_file(k) for k in range(max(1, slurm_nodes))]
            return [shared, *([EVENTS_FILE] for _ in run.nodes[1:])]
        return [[EVENTS_FILE, *([node_events_file(i)] if i else [])] for i in range(len(run.nodes))]

    def _check_nodes(self, run: _Run, backends: dict[str, Backend]) -> bool:
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
                self._record_event(run, "slurm_job", event)
                self._set_state(run, run.state)  # watchers see the new queue state and reason
            if not state.alive:
                node.done, node.exit_code = True, state.exit_code
        failed = [n for n in run.nodes if n.done and n.exit_code not in (0, supervisor.EXIT_RESUME)]
        if failed and len(run.nodes) > 1 and run.user_action is None:
            run.user_action = "node-failed"
            for node in run.nodes:
                if not node.done and node.pgid is not None:
                    backends[node.host].signal(node.pgid, "TERM")
        return all(n.done for n in run.nodes)

    @staticmethod
    def _combined_exit(run: _Run) -> int | None:
        codes = [n.exit_code for n in run.nodes]
        if run.user_action == "node-failed":
            return next((c for c in codes if c not in (0, supervisor.EXIT_RESUME)), 1)
        if all(c == 0 for c in codes):
            return 0
        if all(c in (0, supervisor.EXIT_RESUME) for c in codes):
            return supervisor.EXIT_RESUME
        return next((c for c in codes if c not in (0, supervisor.EXIT_RESUME)), None)

    def _after_exit(self, run: _Run, db: Database, code: int | None) -> bool:
        """Apply the supervisor's decision; True when a new process was started and watching goes on."""
        ended = time.time()
        run.exit_code = code
        action = run.user_action if run.user_action != "node-failed" else None
        if action is None and stopped_since_start(db, run.run_id):  # stopped through another process's manager
            action = run.user_action = "stop"  # (gpuplanner run stop while the window watches): never restarted
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
            self._record_failure(run, code)  # before the state is announced: whoever shows it finds the tail
        self._set_state(run, decision.state)
        if not decision.restart:
            self._finish_db(db, run, decision.state, code)
            return False
        run.wake.clear()
        deadline = time.monotonic() + decision.delay_s
        while time.monotonic() < deadline and not run.resume_now:
            if run.stop_evt.is_set() or run.user_action in ("stop", "kill"):
                break
            run.wake.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            run.wake.clear()
        run.resume_now = False
        if run.stop_evt.is_set():  # no longer watched here (detached, closed): nothing restarts it now
            self._finish_db(db, run, decision.state, code)
            return False
        if run.user_action in ("stop", "kill"):
            self._set_state(run, "stopped" if run.user_action == "stop" else "killed")
            self._finish_db(db, run, run.state, code)
            return False
        try:
            self._restart(run, decision.host or run.nodes[0].host, decision.reason, ended)
        except _DISCONNECTS + _PERMANENT as exc:
            run.error = f"restart failed: {exc}"
            self._record_failure(run, code)
            self._set_state(run, "failed")
            self._finish_db(db, run, "failed", code)
            return False
        return True

    def _record_failure(self, run: _Run, code: int | None) -> None:
        """Keep a failed run's error and the stderr tail of its failed process (node 0 unless another node
        failed) in the history; never raises (the failure itself must still be announced)."""
        failed = next((n for n in run.nodes if n.done and n.exit_code not in (0, supervisor.EXIT_RESUME)), run.nodes[0])
        db = self._db()
        try:
            collect_failure(
                self._backend,
                db,
                run.run_id,
                failed.host,
                failed.run_dir,
                failed.exit_code if failed.exit_code is not None else code,
                tag=failed.tag,
                error=run.error,
            )
        except Exception:
            log.exception("run %s: could not record the failure", run.run_id)
        finally:
            db.close()

    def _finish_db(self, db: Database, run: _Run, state: str, code: int | None) -> None:
        """Record a final state when the trainer could not (it was lost, or killed before its run_end):
        the history never stays at "running" for a process that ended."""
        row = db.execute("SELECT status FROM runs WHERE id = ?", [run.run_id]).fetchone()
        stored = row[0] if row else None
        # A user's stop is "stopped" also when it cancelled an automatic resume after a real preemption.
        if state == "killed" or (
            (state in ("failed", "stopped", "preempted") and stored == "running")
            or (state == "stopped" and stored == "preempted")
        ):
            status = state
            with write_transaction(db):
                db.execute("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?", [status, time.time(), run.run_id])
        if not run.stop_evt.is_set():  # the end was seen here (not a watcher closing while it waits)
            self._bill(db, run)

    def _bill(self, db: Database, run: _Run) -> None:
        """Record the billed span that ends now (see :mod:`gpuplanner.history.billing`), after running the
        host's after-run command on this machine. Slurm jobs are billed from sacct instead."""
        if run.launched_at is None:
            return
        try:
            host = get_host(self.db_path, run.nodes[0].host)
        except HostError:
            return
        if host.kind == "slurm":
            return
        row = db.execute(
            "SELECT last_t, gpu_count, price_usd_per_gpu_hour FROM runs WHERE id = ?", [run.run_id]
        ).fetchone()
        last_t, gpus, price = row if row else (None, None, None)
        ended = max(run.launched_at, min(time.time(), last_t if last_t is not None else time.time()))
        after = None
        if host.after_run_command and host.after_run_idle:  # stop-when-idle: first the GPUs stay idle
            idle = after_run.wait_until_idle(
                self._backend(run.nodes[0].host).gpu_utilisation,
                float(host.after_run_idle["util_pct"]),
                float(host.after_run_idle["minutes"]),
                run.stop_evt,
                poll_s=self.idle_poll_s,
            )
            if idle["idle"]:
                after = {**after_run.run(host, run.run_id, run.nodes[0].run_dir), "when_idle": idle}
            else:
                after = {"command": host.after_run_command, "exit_status": None, "not_run": idle["reason"]}
                after["when_idle"] = idle
            ended = time.time()
        elif host.after_run_command:
            after = after_run.run(host, run.run_id, run.nodes[0].run_dir)
            ended = time.time()
        detail = billed_span(run.launched_at, ended, int(gpus or 1), price, after)
        run.launched_at = None
        self._save_launch(run)
        self._record_event(run, BILLED, detail)

    def _restart(self, run: _Run, host_name: str, reason: str, since: float, after: str | None = None) -> None:
        """Start the run again (the trainer resumes from its newest checkpoint, or the mirror on a new host)."""
        previous = run.nodes[0].host
        self._set_state(run, "resuming")
        extra_env: dict[str, str] = {}
        left: list[_Node] = []
        if host_name != previous:
            left = [n for n in run.nodes if not n.done and n.pgid is not None]
            run.nodes = [_Node(host_name, "", "node0")]
            # A fresh run directory: the trainer's seq would start at 0 and collide with what is stored.
            extra_env["TRAINER_SEQ_START"] = str((run.last_seq if run.last_seq is not None else -1) + 1)
        run.user_action, run.resume_after_s = None, None
        self._start_nodes(run, extra_env)
        for node in left:
            run.orphans.append(node)
            self._start_reaper(run, node)
        run.restarts += 1
        self._save_launch(run)
        self._record_restart(run, previous, host_name, reason, time.time() - since, after)
        self._set_state(run, "running")

    def _record_restart(
        self, run: _Run, from_host: str, to_host: str, reason: str, cost_s: float, after: str | None = None
    ) -> None:
        """A ``restart`` event; ``after``: the state a resume by hand started from (stopped, preempted, ...)."""
        detail: dict[str, Any] = {
            "from_host": from_host,
            "to_host": to_host,
            "reason": reason,
            "cost_s": round(cost_s, 3),
            "attempt": run.restarts,
        }
        if after is not None:
            detail["after"] = after
        self._record_event(run, "restart", detail)

    def _record_event(self, run: _Run, kind: str, detail: dict[str, Any]) -> None:
        """A launcher event (:mod:`gpuplanner.history.launcher_events`)."""
        db = self._db()
        try:
            record_launcher_event(db, run.run_id, kind, detail)
        finally:
            db.close()


_DETACHED = object()
