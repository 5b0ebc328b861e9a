"""Where this trainer process's time goes: one running phase at a time (standard library only).

The process is always in exactly one phase, from its start (:func:`trainer.clock.mark`) on, so the
phases' seconds add up to the process's wall time at any moment. :meth:`PhaseClock.switch` closes
the running phase and opens another; :meth:`PhaseClock.totals` is the seconds per phase so far
(the running one up to now). Step, eval, checkpoint and ``run_end`` records carry these totals as
``phases`` with the process start as ``phases_start`` (``trainer/protocol.py``).

Phases (:data:`PHASES`):

- ``startup``: from the process start to the first step: imports, setting up the process group,
  building and loading the model, resuming from a checkpoint, starting the data loader.
- ``data``: reading and tokenising the data set at start-up, and waiting for batches between steps.
- ``compile``: with ``--compile``, the first step's excess over a normal step (tracing and
  compiling happen there).
- ``train``: forward, backward and optimizer steps, and the loop's bookkeeping and logging.
- ``checkpoint``: writing checkpoints, the final model, and waiting for the mirror upload.
- ``eval``: held-out evaluations.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PHASES = ("startup", "compile", "data", "train", "checkpoint", "eval")


class PhaseClock:
    """Seconds per phase of one process; not thread-safe (the training loop's thread owns it)."""

    def __init__(self, start_mono: float, phase: str = "startup", now: Callable[[], float] = time.monotonic) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        self._now = now
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self.phase = phase
        self._since = start_mono

    def switch(self, phase: str) -> str:
        """Close the running phase at now and open ``phase``; return the phase that was running."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        now = self._now()
        previous = self.phase
        self._seconds[previous] += max(0.0, now - self._since)
        self.phase, self._since = phase, now
        return previous

    def move(self, source: str, target: str, seconds: float) -> None:
        """Count up to ``seconds`` of closed time of ``source`` as ``target`` instead."""
        amount = max(0.0, min(seconds, self._seconds[source]))
        self._seconds[source] -= amount
        self._seconds[target] += amount

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far (the running phase up to now), rounded to the millisecond."""
        out = dict(self._seconds)
        out[self.phase] += max(0.0, self._now() - self._since)
        return {name: round(value, 3) for name, value in out.items()}
