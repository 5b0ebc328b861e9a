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

# Only what the interpreter has loaded already: the watch is armed before anything else is imported (each
# tenth of a second is a dollar at $36,000 per hour); the rest is imported by the watch after the fork.
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .spend import SpendClock

EXIT_OK = 0
TAIL_BYTES = 1 << 16  # where an earlier attempt's last run_end is looked for
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")
POLL_S = 0.5  # how often the watch looks whether the trainer ended (the cap's moment is waited for exactly)
_EARLY_FLAGS = {
    "--budget-usd": "budget_usd",
    "--price-per-gpu-hour": "price_per_gpu_hour",
    "--max-gpu-hours": "max_gpu_hours",
}

_armed = False
_hand_over_fd: int | None = None  # the trainer's end of the pipe to the watch


class Caps:
    """What the watch needs of a configuration (a resolved ``TrainConfig`` has the same attributes)."""

    def __init__(self, **values: Any) -> None:
        self.budget_usd: float | None = values.get("budget_usd")
        self.price_per_gpu_hour: float | None = values.get("price_per_gpu_hour")
        self.max_gpu_hours: float | None = values.get("max_gpu_hours")
        self.run_dir: str = values.get("run_dir", "run")
        self.events_stdout: bool = values.get("events_stdout", True)


def arm_early(argv: list[str], started_mono: float | None) -> None:
    """:func:`arm` from the command line alone, before the trainer's own modules are imported: ``train`` with
    the caps, price and run folder given as flags. A command line it cannot read for certain (a ``--config``
    file, an abbreviated flag) is left to :func:`arm` once the configuration is resolved."""
    if not argv or argv[0] != "train" or os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1"):
        return
    values: dict[str, Any] = {}
    words = iter(argv[1:])
    try:
        for word in words:
            flag, eq, inline = word.partition("=")
            if flag == "--config" or flag in ("-h", "--help"):
                return
            if flag in _EARLY_FLAGS:
                number = float(inline if eq else next(words))
                if not 0 < number < float("inf"):
                    return  # refused by the configuration's checks in a moment
                values[_EARLY_FLAGS[flag]] = number
            elif flag == "--run-dir":
                values["run_dir"] = inline if eq else next(words)
            elif flag in ("--events-stdout", "--no-events-stdout"):
                values["events_stdout"] = flag == "--events-stdout"
    except (StopIteration, ValueError):
        return
    arm(Caps(**values), started_mono)


def arm(config: Any, started_mono: float | None) -> None:
    """Watch the caps of ``config`` (``--budget-usd`` with its price, ``--max-gpu-hours``) from the process
    start. Returns in the trainer (the child); the watch never returns from here: it exits with the trainer's
    exit code, or 0 after a budget stop during start-up."""
    global _hand_over_fd, _armed
    if _armed or (config.budget_usd is None and config.max_gpu_hours is None):
        return
    if config.budget_usd is not None and config.price_per_gpu_hour is None:
        return
    if not hasattr(os, "fork"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    _armed = True
    child = os.fork()
    if child == 0:  # the trainer
        os.close(read_fd)
        _hand_over_fd = write_fd
        return
    os.close(write_fd)
    code = EXIT_OK
    try:
        code = _watch(config, started_mono, child, read_fd)
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


# -- the watch (the parent process, after the fork) ----------------------------------------------------------------


def last_totals(events: str) -> dict[str, Any] | None:
    """The ``totals`` of the last ``run_end`` of an earlier attempt in the events file ``events`` (``{}`` for a
    fresh run: no file, or an empty one); None when the file has records but no such end near its end."""
    import json

    try:
        size = os.stat(events).st_size
    except FileNotFoundError:
        return {}
    if size == 0:
        return {}
    with open(events, "rb") as handle:
        handle.seek(max(0, size - TAIL_BYTES))
        lines = handle.read().splitlines()
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == "run_end" and isinstance(record.get("totals"), dict):
            totals: dict[str, Any] = record["totals"]
            return totals
    return None


def _earlier_spend(events: str) -> tuple[float, float] | None:
    """(dollars, GPU-hours) of the last ``run_end`` of an earlier attempt (zero for a fresh run); None when
    the file has records but no such end can be found near its end (the earlier spend is unknown)."""
    t = last_totals(events)
    if t is None:
        return None
    try:
        return float(t.get("spend_usd") or 0.0), float(t.get("gpu_hours") or 0.0)
    except (TypeError, ValueError):
        return None


def _wait_s(clock: SpendClock, budget_usd: float | None, max_gpu_hours: float | None) -> float:
    """Seconds until the nearer cap at the clock's rate."""
    from .spend import spend_usd

    totals = clock.totals()
    waits = [3600.0]
    rate_usd = spend_usd(clock.price_per_gpu_hour, clock.gpus, 1.0) or 0.0  # dollars a second
    if budget_usd is not None and totals.spend_usd is not None and rate_usd > 0:
        waits.append((budget_usd - totals.spend_usd) / rate_usd)
    if max_gpu_hours is not None:
        waits.append((max_gpu_hours - totals.gpu_hours) * 3600.0 / clock.gpus)
    return max(0.0, min(waits))


def _exit_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _wait_for(child: int) -> int:
    while True:
        try:
            _, status = os.waitpid(child, 0)
            return _exit_code(status)
        except InterruptedError:
            continue


def _first_deadline(config: Any, started_mono: float, base: tuple[float, float]) -> float:
    """The monotonic moment the nearer cap is reached at one GPU's price (``base``: the earlier attempts' spend
    and GPU-hours), by arithmetic alone: :mod:`trainer.spend` (which imports ``dataclasses``, a tenth of a
    second on a busy host) is imported while waiting for it, and prices the stop itself."""
    ends = [float("inf")]
    price = config.price_per_gpu_hour
    if config.budget_usd is not None and price:
        ends.append(started_mono + (config.budget_usd - base[0]) * 3600.0 / price)
    if config.max_gpu_hours is not None:
        ends.append(started_mono + (config.max_gpu_hours - base[1]) * 3600.0)
    return min(ends)


def _watch(config: Any, started_mono: float | None, child: int, hand_over_fd: int) -> int:
    """The parent's life: the cap's moment, the hand-over, or the trainer's end, whichever comes first."""
    import select
    import signal
    import time

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
    start = time.monotonic() if started_mono is None else started_mono
    events = os.path.join(config.run_dir, "events.jsonl")  # trainer.protocol.EVENTS_FILE
    earlier = _earlier_spend(events)
    if earlier is None:  # the earlier spend is unknown: the loop's check before the first step holds the cap
        return _wait_for(child)
    deadline = _first_deadline(config, start, earlier)
    clock: SpendClock | None = None
    reason = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            if clock is None:  # the cap's moment came before the spend clock was loaded: stop, then price it
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        if clock is None:  # loaded while there is time: the one spend clock decides from here
            from .spend import SpendClock, SpendTotals, cap_reached

            clock = SpendClock(config.price_per_gpu_hour, 1, start, SpendTotals(0.0, earlier[1], earlier[0]))
            continue
        reason = cap_reached(clock.totals(), config.budget_usd, config.max_gpu_hours)
        if reason is not None:
            break
        wait = min(POLL_S, _wait_s(clock, config.budget_usd, config.max_gpu_hours))
        ready, _, _ = select.select([hand_over_fd], [], [], wait)
        if ready:  # a byte (the loop took over) or EOF (the trainer ended): its own checks and records hold
            return _wait_for(child)
        ended, status = os.waitpid(child, os.WNOHANG)
        if ended:  # the trainer ended before its loop (a failure, a stop): its own records say how
            return _exit_code(status)
    stopped_at = time.monotonic()
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(child, 0)
    from .spend import SpendClock, SpendTotals, cap_reached

    clock = clock or SpendClock(config.price_per_gpu_hour, 1, start, SpendTotals(0.0, earlier[1], earlier[0]))
    totals = clock.totals(stopped_at)
    reason = reason or cap_reached(totals, config.budget_usd, config.max_gpu_hours) or "the cap was reached"
    from pathlib import Path

    from .telemetry import Telemetry

    tele = Telemetry(Path(events), stdout=sys.stdout if config.events_stdout else None)
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
