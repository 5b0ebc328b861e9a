"""Barriers in the real trainer for tests: hold after a step until the test releases it (standard library only).

A test that must catch the bundled trainer at a known state (a checkpoint mirrored, the process still
running) sets, in the run's environment (``RunManager.launch(env=...)`` reaches SSH and Slurm hosts too):

- ``GPUPLANNER_TRAINER_HOLD_AT_STEP``: step numbers, comma-separated;
- ``GPUPLANNER_TRAINER_HOLD_DIR``: the barrier folder (default: the run directory).

After step N (its record written, a checkpoint due at N saved or handed to its background writer) the
trainer writes ``DIR/step-N.reached`` (its pid) and waits until ``DIR/step-N.release`` exists or a stop is
requested (a stop signal, a budget: the loop goes on and stops as usual). The same names as the protocol
fake's barriers (``tests/protocol_fake.py``), so the test side (``Barriers``) is one. Only steps this process
trains hold: a run resumed past N does not. Unset (always, outside tests) it costs a set lookup per step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

STEPS_ENV = "GPUPLANNER_TRAINER_HOLD_AT_STEP"
DIR_ENV = "GPUPLANNER_TRAINER_HOLD_DIR"
POLL_S = 0.005


def _steps(text: str) -> frozenset[int]:
    return frozenset(int(word) for word in text.replace(" ", "").split(",") if word)


_STEPS = _steps(os.environ.get(STEPS_ENV, ""))


def after_step(step: int, run_dir: Path, stopped: Callable[[], bool]) -> None:
    """Hold after ``step`` when the environment asks for it, until released or ``stopped()``."""
    if step not in _STEPS:
        return
    folder = Path(os.environ.get(DIR_ENV) or run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    reached = folder / f"step-{step}.reached"
    tmp = reached.with_name(f"{reached.name}.{os.getpid()}.tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, reached)
    release = folder / f"step-{step}.release"
    while not release.exists() and not stopped():
        time.sleep(POLL_S)  # polls a state the test sets; the stop flag is set by the signal handler
