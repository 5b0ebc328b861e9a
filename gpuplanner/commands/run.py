"""`gpuplanner run`: launch the bundled trainer or any command on a host and follow it; attach, stop, kill, resume.

    gpuplanner run --host NAME [--plan FILE] [--auto-resume] [--fallback-host H ...] -- TRAINER FLAGS...
    gpuplanner run --host NAME [--plan FILE] [--gpus N] [--price USD] [--workdir DIR] -- COMMAND ARGS...
    gpuplanner run attach|stop|kill|resume ID

After ``--``, words starting with ``-`` (or ``train``) are the bundled trainer's flags; anything else
is a command of your own, run under the payload's monitor (GPU samples, spend, budget, step records
from ``gpuplanner_telemetry``; see docs/your-own-script.md). The run is followed with one progress line (step, loss, tokens/s, spend, ETA) until it ends; Ctrl-C
detaches (the run goes on; ``gpuplanner run attach ID`` catches up). Exit codes: 0 finished, 75
stopped or preempted (resumable), 1 failed, killed or unreachable, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from gpuplanner.app.eta import ETA_WINDOW, eta_s
from gpuplanner.app.run_status import failure_lines, state_words
from gpuplanner.commands.errors import UsageError
from gpuplanner.commands.hosts import add_trust_flag, terminal_prompter, with_host_key_trust
from gpuplanner.commands.spend import add_tag_flag, tags_from_args
from gpuplanner.export.human import human_duration, human_money
from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.history.plans import save_plan
from gpuplanner.launch.budget import BudgetError, budget_problem
from gpuplanner.launch.hosts import Host, HostError, get_host
from gpuplanner.launch.manager import RunError, RunManager, RunStatus
from gpuplanner.launch.ssh_connection import SSHError
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.inputs import gpu_and_count

ACTIONS = ("attach", "stop", "kill", "resume")
EXIT_BY_STATE = {"finished": 0, "stopped": 75, "preempted": 75}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="launch the trainer on a host and follow it; attach|stop|kill|resume ID",
        description=__doc__.splitlines()[0],
        usage="gpuplanner run --host NAME [options] -- TRAINER FLAGS...\n"
        "       gpuplanner run --host NAME [options] -- COMMAND ARGS...\n"
        "       gpuplanner run {attach,stop,kill,resume} ID [--db FILE] [--json]",
    )
    p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    p.add_argument("--json", action="store_true", help="no progress line; print one JSON document at the end")
    p.add_argument("--host", help="host name (see `gpuplanner hosts list`; 'local' is this machine)")
    p.add_argument("--plan", help="a plan JSON file (from `gpuplanner plan --json`) to compare the run against")
    p.add_argument("--name", help="a name for the run")
    add_tag_flag(p, "a tag for attributing the run's spend")
    p.add_argument("--gpus", type=int, help="GPUs (processes) per host (default 1); >1 uses torchrun")
    p.add_argument(
        "--gpu",
        metavar="NAME[:N]",
        help="the GPUs to run on, as SkyPilot writes them: H100:8 is --gpus 8 on a host whose probed GPUs are "
        "H100 (a host with other GPUs is refused)",
    )
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="HOST",
        help="another host of a multi-node job (repeat; torchrun with a c10d rendezvous)",
    )
    p.add_argument("--auto-resume", action="store_true", help="restart after a preemption (exit 75) or lost host")
    p.add_argument(
        "--fallback-host",
        action="append",
        default=[],
        metavar="HOST",
        help="host to continue on when the host stops answering (repeat; needs --mirror-url)",
    )
    p.add_argument("--max-restarts", type=int, default=3, help="at most this many automatic restarts")
    p.add_argument(
        "--budget-usd", type=float, help="checkpoint and stop at this spend (start-up included; needs a price)"
    )
    p.add_argument(
        "--price",
        type=float,
        metavar="USD",
        help="price per GPU-hour for this run (default: the host's; spend and --budget-usd are measured in it)",
    )
    p.add_argument(
        "--workdir", metavar="DIR", help="a command's working directory on the host (default: the run directory)"
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the command or trainer (repeat)",
    )
    p.add_argument(
        "--max-gpu-hours", type=float, help="a command's cap: stop it (SIGTERM, then SIGKILL) at this many GPU-hours"
    )
    p.add_argument(
        "--no-auto-hooks",
        action="store_true",
        help="a command's Python starts without GPU Planner's start-up hook (which adds its callback to"
        " Hugging Face and Lightning Trainers); the same as --env GPUPLANNER_AUTO_HOOKS=0",
    )
    p.add_argument("--no-follow", action="store_true", help="print the run id and return once it started")
    add_trust_flag(p)
    p.add_argument(
        "words",
        nargs="*",
        metavar="-- TRAINER FLAGS | ACTION ID",
        help="the trainer's flags after --, or attach|stop|kill|resume and a run ID",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    words = list(args.words) + list(getattr(args, "passthrough", []))
    if args.host is None:
        if len(words) != 2 or words[0] not in ACTIONS:
            raise UsageError("--host: needed to launch (or give attach|stop|kill|resume and a run ID)")
        try:
            run_id = int(words[1])
        except ValueError:
            raise UsageError(f"ID: a run ID is a whole number, not {words[1]!r}") from None
        return _control(args, words[0], run_id)
    return _launch(args, words)


def is_user_command(words: list[str]) -> bool:
    """A command of the user's own (not the bundled trainer's flags): its first word is no flag."""
    return bool(words) and not words[0].startswith("-") and words[0] != "train"


def _check_gpu_type(name: str, hosts: list[Host]) -> None:
    """``--gpu NAME``: every host of the job that has been probed must have that GPU (catalog names and
    aliases compared as the catalog reads them)."""
    catalog = load_catalog()
    wanted = catalog.find_gpu(name)
    if wanted is None:
        raise UsageError(f"--gpu: unknown GPU {name!r}; known: {', '.join(g.name for g in catalog.gpus)}")
    for host in hosts:
        if host.gpu_type is None:
            continue
        has = catalog.find_gpu(host.gpu_type)
        if has is None or has.name != wanted.name:
            raise UsageError(f"--gpu: host {host.name} has {host.gpu_type} GPUs, not {wanted.name}")


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"--env: NAME=VALUE with a variable name of letters, digits and _, not {item!r}")
        env[name] = value
    return env


def _launch(args: argparse.Namespace, flags: list[str]) -> int:
    if not flags:
        raise UsageError(
            "TRAINER FLAGS: give the trainer's flags after --, e.g. -- --model-config cfg.json --data d,"
            " or a command, e.g. -- python train.py"
        )
    command = flags if is_user_command(flags) else []
    if args.workdir is not None and not command:
        raise UsageError("--workdir: only for a command of your own (the bundled trainer runs in its run dir)")
    if args.max_gpu_hours is not None and not command:
        raise UsageError("--max-gpu-hours: for the bundled trainer give it among the trainer flags")
    if args.max_gpu_hours is not None and not (math.isfinite(args.max_gpu_hours) and args.max_gpu_hours > 0):
        raise UsageError("--max-gpu-hours: a positive number of GPU-hours")
    env = parse_env(args.env)
    if args.no_auto_hooks:
        if not command:
            raise UsageError("--no-auto-hooks: only for a command of your own (the bundled trainer has no hook)")
        env["GPUPLANNER_AUTO_HOOKS"] = "0"
    tags = tags_from_args(args.tag)
    gpu_name, gpus = gpu_and_count(args.gpu, args.gpus)
    args.gpus = 1 if gpus is None else gpus
    if args.gpus < 1:
        raise UsageError("--gpus: a whole number of at least 1")
    if args.max_restarts < 0:
        raise UsageError("--max-restarts: 0 or more")
    hosts = []
    for name in [args.host, *args.node, *args.fallback_host]:
        try:
            hosts.append(get_host(args.db, name))
        except HostError as exc:
            raise UsageError(f"--host: {exc}") from None
    if gpu_name is not None:
        _check_gpu_type(gpu_name, hosts[: 1 + len(args.node)])
    if args.price is not None and not (math.isfinite(args.price) and args.price >= 0):
        raise UsageError("--price: a number of US dollars per GPU-hour, 0 or more")
    for host in [hosts[0], *hosts[1 + len(args.node) :]]:  # the host and the fallback hosts set the price
        price = args.price if args.price is not None else host.price_usd_per_gpu_hour
        problem = budget_problem(args.budget_usd, price, host.name)
        if problem is not None:
            raise UsageError("--budget-usd: " + problem.removeprefix("budget: "))
    plan_id = None
    if args.plan:
        try:
            document = json.loads(Path(args.plan).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--plan: cannot read a plan JSON document from {args.plan}: {exc}") from None
        with open_db(args.db) as db:
            plan_id = save_plan(db, args.name or Path(args.plan).stem, document)
    manager = RunManager(args.db, passphrase_callback=terminal_prompter())
    progress = _Progress([] if command else flags, quiet=args.json)
    try:
        try:
            run_id = with_host_key_trust(
                args,
                lambda: manager.launch(
                    args.host,
                    [] if command else flags,
                    name=args.name,
                    plan_id=plan_id,
                    gpus=args.gpus,
                    auto_resume=args.auto_resume,
                    fallback_hosts=args.fallback_host,
                    max_restarts=args.max_restarts,
                    budget_usd=args.budget_usd,
                    on_records=progress.on_records,
                    on_status=progress.on_status,
                    nodes=args.node,
                    price_usd_per_gpu_hour=args.price,
                    tags=tags,
                    env=env,
                    command=command or None,
                    workdir=args.workdir,
                    max_gpu_hours=args.max_gpu_hours,
                ),
            )
        except BudgetError as exc:  # "budget: ..." or "price: ..."
            field, _, why = str(exc).partition(": ")
            raise UsageError(f"--{'price' if field == 'price' else 'budget-usd'}: {why}") from None
        except ValueError as exc:
            raise UsageError(f"{'COMMAND' if command else 'TRAINER FLAGS'}: {exc}") from None
        except (SSHError, HistoryError, RunError) as exc:
            print(f"gpuplanner run: {exc}", file=sys.stderr)
            return 1
        if not args.json:
            print(f"run {run_id} started on {args.host}", file=sys.stderr)
        if args.no_follow:
            manager.detach(run_id)
            _report(args, manager.status(run_id), manager)
            return 0
        return _follow(args, manager, run_id, progress)
    finally:
        manager.close()


def _control(args: argparse.Namespace, action: str, run_id: int) -> int:
    manager = RunManager(args.db, passphrase_callback=terminal_prompter())
    progress = _Progress([], quiet=args.json)
    try:
        try:
            if action == "kill":
                manager.kill(run_id)
                _report(args, manager.status(run_id), manager)
                return 1
            if action == "stop":
                manager.stop(run_id, by="cli")
            if action == "resume":
                with_host_key_trust(args, lambda: manager.resume(run_id))
            manager.attach(run_id, progress.on_records, progress.on_status)
        except (SSHError, HistoryError, RunError) as exc:
            print(f"gpuplanner run: {exc}", file=sys.stderr)
            return 1
        return _follow(args, manager, run_id, progress)
    finally:
        manager.close()


def _follow(args: argparse.Namespace, manager: RunManager, run_id: int, progress: _Progress) -> int:
    try:
        while True:
            # Follow as long as the run is supervised here: a waiting state ("preempted" before an
            # automatic restart) is not the end; the watcher ends after a final state is recorded.
            manager.wait(run_id, 0.5)
            progress.draw()
            if run_id not in manager.live_runs():
                break
    except KeyboardInterrupt:
        manager.detach(run_id)
        progress.end_line()
        print(f"detached; the run goes on. Follow it again with: gpuplanner run attach {run_id}", file=sys.stderr)
        _report(args, manager.status(run_id), manager)
        return 0
    progress.draw(final=True)
    progress.end_line()
    status = manager.status(run_id)
    _report(args, status, manager)
    return EXIT_BY_STATE.get(status.state, 1)


def _report(args: argparse.Namespace, status: RunStatus, manager: RunManager) -> None:
    doc = {
        "run_id": status.run_id,
        "state": status.state,
        "exit_code": status.exit_code,
        "pid": status.pid,
        "last_seq": status.last_seq,
        "host": status.host,
        "run_dir": status.run_dir,
        "restarts": status.restarts,
        "reconnects": status.reconnects,
    }
    if status.error:
        doc["error"] = status.error
    failure = manager.failure(status.run_id) if status.state == "failed" else None
    if failure is not None:
        doc["failure"] = failure
    if args.json:
        print(json.dumps(doc))
    else:
        print(
            f"run {status.run_id}: {state_words(status.state, status.exit_code)}, run dir {status.host}:{status.run_dir}"
        )
        for line in failure_lines(failure):  # the exit reason and the last lines of stderr
            print(line)


class _Progress:
    """The one-line display; fed on the watcher thread, drawn on the main thread."""

    def __init__(self, flags: list[str], quiet: bool) -> None:
        self.quiet = quiet
        self.max_steps = _flag_int(flags, "--max-steps")
        self.lock = threading.Lock()
        self.last: dict[str, Any] = {}
        self.state = "starting"
        self.steps_total: int | None = None  # the trainer's own (run_start), else --max-steps
        self.recent: deque[tuple[float, float]] = deque(maxlen=ETA_WINDOW)  # (t, step) of the last steps
        self.tty = sys.stderr.isatty()
        self.last_draw = 0.0
        self.drawn = False

    def on_records(self, run_id: int, records: list[dict[str, Any]]) -> None:
        with self.lock:
            for record in records:
                if record["kind"] == "run_start" and isinstance(record.get("steps_total"), int):
                    self.steps_total = record["steps_total"] if record["steps_total"] > 0 else None
                if record["kind"] == "step":
                    self.last = record
                    if isinstance(record.get("t"), (int, float)) and isinstance(record.get("step"), (int, float)):
                        self.recent.append((float(record["t"]), float(record["step"])))

    def on_status(self, status: RunStatus) -> None:
        with self.lock:
            self.state = status.state

    def line(self) -> str:
        with self.lock:
            r, state = dict(self.last), self.state
            total = self.steps_total or self.max_steps
        if not r:
            return f"[{state}] waiting for the first step"
        step = int(r.get("step") or 0)
        parts = [f"[{state}] step {step}" + (f"/{total}" if total else "")]
        if r.get("loss") is not None:
            parts.append(f"loss {r['loss']:.4f}")
        if r.get("tokens_per_s") is not None:
            parts.append(f"{r['tokens_per_s']:,.0f} tok/s")
        if r.get("spend_usd") is not None:
            parts.append(f"{human_money(r['spend_usd'], 4)}")
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA {human_duration(eta)}")  # as the Runs pane says it
        return "  ".join(parts)

    def eta_s(self) -> float | None:
        """Seconds left (:func:`gpuplanner.app.eta.eta_s`, as the Runs pane shows), or ``None`` when unknown."""
        with self.lock:
            recent, total = list(self.recent), self.steps_total or self.max_steps
        return eta_s([t for t, _ in recent], [step for _, step in recent], total)

    def draw(self, final: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            print("\r" + self.line().ljust(100), end="", file=sys.stderr, flush=True)
            self.drawn = True
        elif final or now - self.last_draw >= 5.0:
            print(self.line(), file=sys.stderr, flush=True)
            self.last_draw = now

    def end_line(self) -> None:
        if self.drawn:
            print(file=sys.stderr)
            self.drawn = False


def _flag_int(flags: list[str], name: str) -> int | None:
    for i, flag in enumerate(flags):
        value = (
            flags[i + 1]
            if flag == name and i + 1 < len(flags)
            else flag.split("=", 1)[1]
            if flag.startswith(name + "=")
            else None
        )
        if value is not None:
            try:
                return int(value) or None
            except ValueError:
                return None
    return None
