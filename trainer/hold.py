"""Barriers in the real trainer for tests: hold at a known point until the test releases it (standard library only).

A test that must catch the bundled trainer at a known state (a checkpoint mirrored, the process still
running, a step half done, a checkpoint half written) sets, in the run's environment
(``RunManager.launch(env=...)`` or ``gpuplanner run --env``; it reaches SSH and Slurm hosts too):

- ``GPUPLANNER_TRAINER_HOLD_AT_STEP``: step numbers, comma-separated: barrier ``step-N``, after step N (its
  record written, a checkpoint due at N saved or handed to its background writer);
- ``GPUPLANNER_TRAINER_HOLD_IN_STEP``: step numbers: barrier ``in-step-N``, inside step N (the step whose
  record says N): after the forward and backward of its micro-batches, before the optimizer step;
- ``GPUPLANNER_TRAINER_HOLD_AT_CHECKPOINT``: step numbers: barrier ``checkpoint-S``, inside the write of the
  checkpoint of step S: its files are in the temporary folder (``.tmp-step-…``), the rename that publishes
  it has not happened. On the thread that writes it: the background writer (the default), or the
  training thread (``--no-checkpoint-async``, the final save before exiting);
- ``GPUPLANNER_TRAINER_HOLD_DIR``: the barrier folder (default: the run directory).

At a barrier NAME the trainer writes ``DIR/NAME.reached`` (its pid) and waits until ``DIR/NAME.release``
exists or a stop is requested (the flag the stop-signal handler sets, a budget). Then it does what it
always does: finishes the step or the write, and a stop ends the run as usual (exit 75 with its final
checkpoint). The same names as the protocol fake's barriers (``tests/protocol_fake.py``), so the test
side (``Barriers``) is one. Only points this process reaches hold: a run resumed past N does not. Unset
(always, outside tests) each point costs a set lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

STEPS_ENV = "GPUPLANNER_TRAINER_HOLD_AT_STEP"
IN_STEP_ENV = "GPUPLANNER_TRAINER_HOLD_IN_STEP"
CHECKPOINT_ENV = "GPUPLANNER_TRAINER_HOLD_AT_CHECKPOINT"
DIR_ENV = "GPUPLANNER_TRAINER_HOLD_DIR"
POLL_S = 0.005


def _steps(text: str) -> frozenset[int]:
    return frozenset(int(word) for word in text.replace(" ", "").split(",") if word)


_STEPS = _steps(os.environ.get(STEPS_ENV, ""))
_IN_STEPS = _steps(os.environ.get(IN_STEP_ENV, ""))
_CHECKPOINTS = _steps(os.environ.get(CHECKPOINT_ENV, ""))


def _hold(name: str, run_dir: Path, stopped: Callable[[], bool]) -> None:
    """Write ``NAME.reached`` (this pid), then wait for ``NAME.release`` or ``stopped()``."""
    folder = Path(os.environ.get(DIR_ENV) or run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    reached = folder / f"{name}.reached"
    tmp = reached.with_name(f"{reached.name}.{os.getpid()}.tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, reached)
    release = folder / f"{name}.release"
    while not release.exists() and not stopped():
        time.sleep(POLL_S)  # polls a state the test sets; the stop flag is set by the signal handler


def after_step(step: int, run_dir: Path, stopped: Callable[[], bool]) -> None:
    """Hold after ``step`` when the environment asks for it, until released or ``stopped()``."""
    if step in _STEPS:
        _hold(f"step-{step}", run_dir, stopped)


def in_step(step: int, run_dir: Path, stopped: Callable[[], bool]) -> None:
    """Hold inside ``step`` (gradients computed, the optimizer step not taken) when asked, until released or ``stopped()``."""
    if step in _IN_STEPS:
        _hold(f"in-step-{step}", run_dir, stopped)


def at_checkpoint(step: int, run_dir: Path, stopped: Callable[[], bool]) -> None:
    """Hold inside the write of ``step``'s checkpoint (written, not yet renamed) when asked, until released or ``stopped()``."""
    if step in _CHECKPOINTS:
        _hold(f"checkpoint-{step}", run_dir, stopped)
