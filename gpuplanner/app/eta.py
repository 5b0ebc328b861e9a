"""A live run's ETA: the one definition that `gpuplanner run`'s progress line and the Runs pane both show.

The rate is the trainer's own: steps over the time between the records of the last :data:`ETA_WINDOW`
steps, read from the records' ``t`` (the host's clock when the step ended), not from when this machine
received them. So a batch of records delivered late (after an SSH reconnect, a slow poll) does not
change the rate, the first step's warm-up (compilation, data loading) stops counting once the window
moves past it, and a run that slows down or speeds up shows it within a few steps. A restarted run keeps
its step count: only steps that advance are counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlite_utils import Database

from gpuplanner.history.stored_records import recent_steps

ETA_WINDOW = 30  # steps the rate is measured over


def steps_per_s(times: Sequence[float], steps: Sequence[float], window: int = ETA_WINDOW) -> float | None:
    """Steps per second over the last ``window`` step records (``times`` in seconds, in record order), or
    ``None`` with fewer than two records or no progress between them."""
    n = min(len(times), len(steps))
    if n < 2:
        return None
    xs, ss = list(times[n - window if n > window else 0 : n]), list(steps[n - window if n > window else 0 : n])
    dx, ds = float(xs[-1]) - float(xs[0]), float(ss[-1]) - float(ss[0])
    if dx <= 0 or ds <= 0:
        return None
    return ds / dx


def eta_s(
    times: Sequence[float], steps: Sequence[float], steps_total: int | None, window: int = ETA_WINDOW
) -> float | None:
    """Seconds left at the recent step rate: 0 once the last step is reached, ``None`` when the total or the
    rate is unknown."""
    if not steps_total or not steps:
        return None
    step = float(steps[-1])
    if step >= steps_total:
        return 0.0
    rate = steps_per_s(times, steps, window)
    if not rate:
        return None
    return (steps_total - step) / rate


def stored_eta_s(db: Database, run_id: int) -> float | None:
    """The ETA of a run from what the history holds (`gpuplanner runs show` of a running run)."""
    times, steps, total = recent_steps(db, run_id, ETA_WINDOW)
    return eta_s(times, steps, total)
