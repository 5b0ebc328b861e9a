"""When this trainer process started: the zero of the run's budget clock (standard library only).

Loading data and the model and resuming from a checkpoint are paid GPU time like the steps, so the
spend the trainer counts (and stops at, with ``--budget-usd``) runs from the start of the process.
``python -m trainer`` calls :func:`mark` first thing; the ``run_start`` record carries this moment as
its ``t``, so the history, which prices a run from its first record to its last, counts the same
time. A trainer started in-process (tests, ``bench``) without :func:`mark` starts the clock when
training is called.
"""

import time

_started: tuple[float, float] | None = None


def mark() -> None:
    """Note the process start (the first call wins)."""
    global _started
    if _started is None:
        _started = (time.time(), time.monotonic())


def started() -> tuple[float, float] | None:
    """``(wall time, monotonic time)`` of :func:`mark`, or None when it was never called."""
    return _started
