"""Starting a run: check a launch request and file the run in the history (:func:`file_run`), then start
its nodes' processes (:func:`start_nodes`, also what a restart runs again on the same run directories
or, after a failover, a fresh one).

Nothing is filed before the request is checked and every host answered: a bad flag, tag, price or
budget, an unknown host key or a missing trainer Python leave no run row behind. The row's ``config`` is
the trainer's own (its ``run_start`` fills it); a user's own command is filed with the plan's facts it
was launched against, so calibration can match it.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplanner.history.db import connect
from gpuplanner.history.launcher_events import record_launcher_event
from gpuplanner.history.plans import get_plan, planned_figures
from gpuplanner.history.runs import LaunchDocument, create_run
from gpuplanner.history.tags import check_tags
from gpuplanner.launch import command_lines
from gpuplanner.launch.budget import BudgetError, check_budget
from gpuplanner.launch.connections import Connections
from gpuplanner.launch.host_checks import preflight_event
from gpuplanner.launch.hosts import get_host
from gpuplanner.launch.local_backend import LocalBackend, TrainerPythonMissing
from gpuplanner.launch.run_records import save_launch
from gpuplanner.launch.run_state import ManagedNode, ManagedRun, RunError

RDZV_PORT_BASE = 29400  # a multi-host run's rendezvous port: this plus a random offset below RDZV_PORT_SPREAD
RDZV_PORT_SPREAD = 500


@dataclass(frozen=True)
class LaunchRequest:
    """What :meth:`RunManager.launch <gpuplanner.launch.manager.RunManager.launch>` was asked (its
    parameters, documented there)."""

    host_name: str
    trainer_args: Sequence[str]
    name: str | None = None
    plan_id: int | None = None
    gpus: int = 1
    auto_resume: bool = False
    fallback_hosts: Sequence[str] = ()
    max_restarts: int = 3
    budget_usd: float | None = None
    nodes: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_port: int | None = None
    price_usd_per_gpu_hour: float | None = None
    tags: Mapping[str, str] | None = None
    command: Sequence[str] | None = None
    workdir: str | None = None
    max_gpu_hours: float | None = None


def file_run(connections: Connections, request: LaunchRequest) -> ManagedRun:
    """Check ``request`` (ValueError, :class:`~gpuplanner.launch.budget.BudgetError`, HostError,
    :class:`~gpuplanner.launch.run_state.RunError`), connect to its hosts, run the pre-flight check and
    create the run's row (status ``running``) with its ``preflight`` event; returns the run, not started."""
    db_path = connections.db_path
    price = request.price_usd_per_gpu_hour
    user_command = command_lines.check_user_command(
        request.command, request.trainer_args, request.workdir, request.max_gpu_hours
    )
    args = command_lines.check_trainer_args(request.trainer_args)
    tags = check_tags(request.tags)  # a bad tag is a ValueError (TagError) before any host is touched
    if request.gpus < 1:
        raise ValueError("gpus must be at least 1")
    host_names = [request.host_name, *request.nodes]
    hosts = [get_host(db_path, h) for h in host_names]
    fallbacks = [get_host(db_path, fallback) for fallback in request.fallback_hosts]
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise BudgetError(f"price: a number of US dollars per GPU-hour, 0 or more, not {price!r}")
    check_budget(
        request.budget_usd,
        [(h.name, price if price is not None else h.price_usd_per_gpu_hour) for h in [hosts[0], *fallbacks]],
    )
    for h in host_names:
        backend = connections.get(h)  # connect first: an unknown host key must not leave a run row behind
        if isinstance(backend, LocalBackend):
            try:
                backend.python  # noqa: B018 (no interpreter that can run the trainer: say how to make one)
            except TrainerPythonMissing as exc:
                raise RunError(str(exc)) from exc
    host = hosts[0]
    checked = preflight_event(connections, request.host_name, args, user_command)
    rdzv_port = request.rdzv_port
    if len(host_names) > 1 and rdzv_port is None:
        rdzv_port = RDZV_PORT_BASE + secrets.randbelow(RDZV_PORT_SPREAD)
    db = connect(db_path)
    try:
        planned, planned_doc = None, None
        if request.plan_id is not None:
            planned_doc = get_plan(db, request.plan_id).document
            planned = planned_figures(planned_doc, host.db_pricing)
        # The config is the trainer's own (its run_start fills it); what was launched has its own column
        config: dict[str, Any] | None = None
        launch: LaunchDocument = {"trainer_args": args}
        if user_command:
            # What the planner's calibration matches a run on, taken from the plan it was launched
            # against (a user's command says nothing about its model).
            config = command_lines.plan_facts(planned_doc) or None
            launch = {"command": user_command, "workdir": request.workdir}
        run_id = create_run(
            db,
            name=request.name,
            host=request.host_name,
            gpu_type=host.gpu_type,
            gpu_count=request.gpus * len(hosts) if host.kind != "slurm" else host.slurm_settings.gpus_in_job,
            price_usd_per_gpu_hour=price if price is not None else host.price_usd_per_gpu_hour,
            pricing=host.db_pricing,
            model_name=(config or {}).get("model") if user_command else command_lines.model_name(args),
            config=config,
            launch=launch,
            plan_id=request.plan_id,
            source=f"launch:{request.host_name}",
            planned=planned,
            tags=tags,
        )
        record_launcher_event(db, run_id, "preflight", checked)
    finally:
        db.close()
    return ManagedRun(
        run_id,
        args,
        [ManagedNode(h, "", f"node{i}") for i, h in enumerate(host_names)],
        gpus=request.gpus,
        env=dict(request.env),
        auto_resume=request.auto_resume,
        fallback_hosts=list(request.fallback_hosts),
        max_restarts=request.max_restarts,
        budget_usd=request.budget_usd,
        price=price,
        rdzv_port=rdzv_port,
        command=user_command,
        workdir=request.workdir,
        max_gpu_hours=request.max_gpu_hours,
    )


def start_nodes(connections: Connections, run: ManagedRun, extra_env: dict[str, str] | None = None) -> None:
    """Start every node's process (fresh run dirs, or the existing ones: the trainer resumes) and store
    the launch document with their process groups."""
    first = get_host(connections.db_path, run.nodes[0].host)
    rdzv_host = first.hostname if first.kind == "ssh" else "127.0.0.1"
    price = run.price if run.price is not None else first.price_usd_per_gpu_hour
    for i, node in enumerate(run.nodes):
        backend = connections.get(node.host)
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
    save_launch(connections.db_path, run)
