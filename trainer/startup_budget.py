"""The budget cap from the process's first second (issue 27 item 10; standard library only).

The training loop stops at its budget between steps (:meth:`trainer.trainer_core.TrainerCore._tick_budget`),
but start-up (the interpreter, torch, tokenising, building and compiling the model) is paid time too and has
no steps: on a very expensive host it could spend past the cap before the first check ($3.72 on a $3 cap).
A thread cannot hold the cap there: importing torch holds the interpreter lock for most of a second.

So :func:`arm` (``python -m trainer train``, one process, a cap given) forks before anything heavy is
imported: the child goes on as the trainer; the parent stays a small watch of the spend clock
(:mod:`trainer.spend`, the one implementation, from the process start of :mod:`trainer.clock`) that sleeps
until the moment the cap is reached. Until the loop takes over (:func:`hand_over`, just before its first
budget check, through a pipe) a reached cap ends the trainer at once (SIGKILL: no step was taken, nothing to
save), and the watch writes the ``run_end`` record (status ``budget_stop``, the totals up to then, exit code
0: a budget stop is final, as in the loop) and exits 0. After the hand-over the loop's own check stops the
run after the step in progress (at most one step's cost past the cap) and the watch passes its exit code on.
Stop signals sent to the watch alone are passed on to the trainer.

Only a single-process trainer is watched: ranks of a torchrun job must agree on stopping, which the loop does.
A resumed run's earlier spend is the last ``run_end`` of its events file; a run whose earlier spend cannot
be found there is not watched (the loop's check before the first step still holds).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import protocol
from .spend import SpendClock, SpendTotals, cap_reached

EXIT_OK = 0
TAIL_BYTES = 1 << 16  # where an earlier attempt's last run_end is looked for
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")
POLL_S = 0.5  # how often the watch looks whether the trainer ended (the cap's moment is waited for exactly)

_hand_over_fd: int | None = None  # the trainer's end of the pipe to the watch


def _wait_s(clock: SpendClock, budget_usd: float | None, max_gpu_hours: float | None) -> float:
    """Seconds until the nearer cap at the clock's rate."""
    totals = clock.totals()
    waits = [3600.0]
    rate_usd = (clock.price_per_gpu_hour or 0.0) * clock.gpus / 3600.0
    if budget_usd is not None and totals.spend_usd is not None and rate_usd > 0:
        waits.append((budget_usd - totals.spend_usd) / rate_usd)
    if max_gpu_hours is not None:
        waits.append((max_gpu_hours - totals.gpu_hours) * 3600.0 / clock.gpus)
    return max(0.0, min(waits))


def _exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _watch(config: Any, clock: SpendClock, child: int, hand_over_fd: int) -> int:
    """The parent's life: the cap's deadline, the hand-over, or the trainer's end, whichever comes first."""

    def forward(signum: int, frame: Any) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name), forward)
    from . import early_signals

    for signum in early_signals._received:  # sent to this process alone before the handlers above
        forward(signum, None)
    handed_over = False
    while not handed_over:
        reason = cap_reached(clock.totals(), config.budget_usd, config.max_gpu_hours)
        if reason is not None:
            break
        wait = min(POLL_S, _wait_s(clock, config.budget_usd, config.max_gpu_hours))
        ready, _, _ = select.select([hand_over_fd], [], [], wait)
        if ready:
            handed_over = True  # a byte (the loop took over) or EOF (the trainer ended)
        ended, status = os.waitpid(child, os.WNOHANG)
        if ended:  # the trainer ended before its loop (a failure, a stop): its own records say how
            return _exit_code(status)
    if not handed_over:
        totals = clock.totals()
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(child, 0)
        from .telemetry import Telemetry

        tele = Telemetry(
            Path(config.run_dir) / protocol.EVENTS_FILE, stdout=sys.stdout if config.events_stdout else None
        )
        try:
            tele.emit(
                "run_end",
                status="budget_stop",
                reason=f"{reason} during start-up, before the first step",
                exit_code=EXIT_OK,
                totals={
                    "steps": 0,
                    "spend_usd": totals.spend_usd,
                    "gpu_hours": totals.gpu_hours,
                    "elapsed_s": totals.elapsed_s,
                },
            )
        finally:
            tele.close()
        print(f"trainer: {reason} during start-up: stopped before the first step", file=sys.stderr, flush=True)
        return EXIT_OK
    while True:
        try:
            _, status = os.waitpid(child, 0)
            return _exit_code(status)
        except InterruptedError:
            continue


def _earlier_totals(events: Path) -> SpendTotals | None:
    """The totals of the last ``run_end`` of an earlier attempt (zero for a fresh run); None when the file
    has records but no such end can be found near its end (the earlier spend is unknown)."""
    try:
        size = events.stat().st_size
    except FileNotFoundError:
        return SpendTotals(0.0, 0.0, 0.0)
    if size == 0:
        return SpendTotals(0.0, 0.0, 0.0)
    with open(events, "rb") as handle:
        handle.seek(max(0, size - TAIL_BYTES))
        lines = handle.read().splitlines()
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == "run_end" and isinstance(record.get("totals"), dict):
            t = record["totals"]
            try:
                return SpendTotals(
                    float(t.get("elapsed_s") or 0.0), float(t.get("gpu_hours") or 0.0), float(t.get("spend_usd") or 0.0)
                )
            except (TypeError, ValueError):
                return None
    return None


def arm(config: Any, started_mono: float | None) -> None:
    """Watch the caps of ``config`` (``--budget-usd`` with its price, ``--max-gpu-hours``) from the process
    start. Returns in the trainer (the child); the watch itself never returns from here: it exits with the
    trainer's exit code, or 0 after a budget stop during start-up."""
    global _hand_over_fd
    if config.budget_usd is None and config.max_gpu_hours is None:
        return
    if config.budget_usd is not None and config.price_per_gpu_hour is None:
        return
    base = _earlier_totals(Path(config.run_dir) / protocol.EVENTS_FILE)
    if base is None or not hasattr(os, "fork"):
        return
    clock = SpendClock(config.price_per_gpu_hour, 1, time.monotonic() if started_mono is None else started_mono, base)
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # the trainer
        os.close(read_fd)
        _hand_over_fd = write_fd
        return
    os.close(write_fd)
    code = EXIT_OK
    try:
        code = _watch(config, clock, child, read_fd)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def hand_over() -> None:
    """The loop checks the caps from here on (between steps): the watch only waits for the trainer's end."""
    global _hand_over_fd
    fd, _hand_over_fd = _hand_over_fd, None
    if fd is not None:
        try:
            os.write(fd, b"1")
        except OSError:
            pass
        os.close(fd)
