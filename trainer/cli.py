"""``python -m trainer train|probe|bench|monitor|exec``."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from . import __version__
from .config import add_arguments, resolve


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer", description="GPU Planner bundled trainer")
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train (resumes from the newest valid checkpoint in --run-dir)")
    add_arguments(t)
    b = sub.add_parser("bench", help="short calibration run; prints throughput, memory and MFU as JSON")
    add_arguments(b)
    b.add_argument("--bench-warmup-steps", type=int, default=5, help="steps not measured")
    b.add_argument("--bench-steps", type=int, default=30, help="steps measured after warm-up")
    pr = sub.add_parser("probe", help="describe this host as one JSON document")
    pr.add_argument("--run-root", default=".", help="folder whose free disk space is reported")
    m = sub.add_parser("monitor", help="GPU telemetry as JSON lines on stdout")
    m.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    m.add_argument("--count", type=int, default=0, help="stop after this many samples (0: until killed)")
    m.add_argument("--simulate", action="store_true", help="use the simulated source even if NVML works")
    from .command_monitor import add_arguments as add_exec_arguments

    e = sub.add_parser("exec", help="run any command, watched: GPU samples, spend, budget, step records")
    add_exec_arguments(e)
    return p


def _monitor(args: argparse.Namespace) -> int:
    from . import protocol
    from .nvml_sampler import open_source
    from .preemption import SignalHandlers, StopFlag

    source = open_source(None, None, force_simulated=args.simulate)
    flag = StopFlag()
    seq, n = 0, 0
    with SignalHandlers(flag):
        try:
            while not flag.set:
                for rec in source.sample():
                    sys.stdout.write(protocol.encode(protocol.make_record("gpu", seq, time.time(), **rec)))
                    seq += 1
                sys.stdout.flush()
                n += 1
                if args.count and n >= args.count:
                    break
                deadline = time.monotonic() + args.interval
                while not flag.set and time.monotonic() < deadline:
                    time.sleep(min(0.1, args.interval))
        except BrokenPipeError:
            return 0
        finally:
            source.close()
    return 0


def _check_budget(config) -> None:
    """A budget is a spend, and spend is the price x GPUs x time: without a price it could never
    be reached, so it is refused rather than silently ignored."""
    budget, price = config.budget_usd, config.price_per_gpu_hour
    if budget is None:
        return
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ValueError(f"--budget-usd must be a positive number of US dollars, not {budget!r}")
    if not (isinstance(price, (int, float)) and math.isfinite(price) and price > 0):
        raise ValueError(
            "--budget-usd needs --price-per-gpu-hour (a positive price): without a price the spend "
            "stays $0 and the budget could never stop the run"
        )


def _single_process() -> bool:
    """Not one rank of several (torchrun): those must agree on stopping, which the loop does."""
    return os.environ.get("WORLD_SIZE", "1").strip() in ("", "1")


def _stopped_during_startup(config, signum: int) -> int:
    """A stop signal before anything was loaded: nothing to save. The records say so (the next start
    resumes from the newest checkpoint, or starts again when there is none) and the exit is 75."""
    from . import protocol
    from .telemetry import Telemetry

    name = signal.Signals(signum).name
    tele = Telemetry(Path(config.run_dir) / protocol.EVENTS_FILE, stdout=sys.stdout if config.events_stdout else None)
    try:
        reason = f"signal {name} (during start-up, before loading: nothing to save)"
        tele.emit("preempted", reason=reason)
        tele.emit("run_end", status="preempted", exit_code=75, reason=reason)
    finally:
        tele.close()
    print(f"trainer: {name} during start-up: stopped before loading anything; starting again resumes", file=sys.stderr)
    return 75


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "probe":
        from .early_signals import restore_defaults

        restore_defaults()  # nothing to save: a stop signal ends the probe as usual
        from .probe import probe

        print(json.dumps(probe(args.run_root), indent=2))
        return 0
    if args.command == "monitor":
        return _monitor(args)
    if args.command == "exec":
        from .command_monitor import main as exec_main

        return exec_main(args)
    try:
        config = resolve(args)
        _check_budget(config)
    except (ValueError, OSError) as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    if args.command == "train" and _single_process():
        from . import clock, startup_budget
        from .early_signals import pending

        early = pending()
        if early is not None:  # stopped while starting: leave before loading anything heavy
            return _stopped_during_startup(config, early)
        started = clock.started()
        startup_budget.arm(config, started[1] if started else None)  # the caps hold during start-up too
    if args.command == "bench":
        from .bench import bench

        try:
            result = bench(config, args.bench_warmup_steps, args.bench_steps)
        except RuntimeError as exc:  # the reason was printed as "trainer: training failed: ..." above
            print(f"trainer: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(result, indent=2))
        return 0
    from .loop import train

    return train(config, stdout=sys.stdout)
