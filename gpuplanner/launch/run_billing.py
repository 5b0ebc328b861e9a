"""The end of a run's billed span: the host's after-run command (:mod:`~gpuplanner.launch.after_run`,
optionally once its GPUs stay idle), then a ``billed`` event from launch (or a resume by hand) until now
(:mod:`gpuplanner.history.billing` sums them). Slurm jobs are billed from ``sacct`` instead."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sqlite_utils import Database

from gpuplanner.history.billing import BILLED, billed_span
from gpuplanner.launch import after_run
from gpuplanner.launch.backend import Backend
from gpuplanner.launch.hosts import HostError, get_host
from gpuplanner.launch.run_records import record_event, save_launch
from gpuplanner.launch.run_state import ManagedRun


def bill(
    db_path: Path, db: Database, run: ManagedRun, backend_of: Callable[[str], Backend], idle_poll_s: float
) -> None:
    """Record the billed span that ends now, after running the host's after-run command on this machine
    (stop-when-idle reads the GPUs' utilisation through ``backend_of(host)`` every ``idle_poll_s``)."""
    if run.launched_at is None:
        return
    try:
        host = get_host(db_path, run.nodes[0].host)
    except HostError:
        return
    if host.kind == "slurm":
        return
    row = db.execute("SELECT last_t, gpu_count, price_usd_per_gpu_hour FROM runs WHERE id = ?", [run.run_id]).fetchone()
    last_t, gpus, price = row if row else (None, None, None)
    ended = max(run.launched_at, min(time.time(), last_t if last_t is not None else time.time()))
    after = None
    if host.after_run_command and host.after_run_idle:  # stop-when-idle: first the GPUs stay idle
        idle = after_run.wait_until_idle(
            backend_of(run.nodes[0].host).gpu_utilisation,
            float(host.after_run_idle["util_pct"]),
            float(host.after_run_idle["minutes"]),
            run.stop_evt,
            poll_s=idle_poll_s,
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
    save_launch(db_path, run)
    record_event(db_path, run, BILLED, detail)
