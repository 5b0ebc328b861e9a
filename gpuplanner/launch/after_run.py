"""A host's after-run command: a shell command run on this machine (where the user's cloud CLI and its
credentials are) once a run on the host has ended, e.g. ``aws ec2 stop-instances --instance-ids i-0abc``.
It gets ``GPUPLANNER_HOST`` (the host's name), ``GPUPLANNER_HOSTNAME`` (its address), ``GPUPLANNER_RUN_ID``
and ``GPUPLANNER_RUN_DIR`` in its environment; it may take up to :data:`TIMEOUT_S` seconds. What it did
(exit status, seconds, the end of its output) is kept in the run's ``billed`` event.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuplanner.launch.hosts import Host
from trainer.reports import GpuUtilisation

TIMEOUT_S = 600.0
TAIL_CHARS = 2000


def run(host: Host, run_id: int, run_dir: str, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run ``host.after_run_command``; never raises (a failure is reported in the answer)."""
    command = host.after_run_command or ""
    env = dict(
        os.environ,
        GPUPLANNER_HOST=host.name,
        GPUPLANNER_HOSTNAME=host.hostname or "",
        GPUPLANNER_RUN_ID=str(run_id),
        GPUPLANNER_RUN_DIR=run_dir,
    )
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, shell=True, env=env, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
        status, out = done.returncode, (done.stdout + done.stderr)
    except subprocess.TimeoutExpired as exc:
        status, out = None, f"did not finish within {timeout_s:.0f} s: {exc}"
    except OSError as exc:
        status, out = None, f"could not start: {exc}"
    return {
        "command": command,
        "exit_status": status,
        "seconds": round(time.monotonic() - started, 3),
        "output_tail": out[-TAIL_CHARS:],
    }


IDLE_POLL_S = 30.0
IDLE_READ_FAILURES = 3  # consecutive failed readings after which the wait gives up (the command is not run)


def wait_until_idle(
    read: Callable[[], GpuUtilisation],
    util_pct: float,
    minutes: float,
    stop: threading.Event,
    poll_s: float = IDLE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Stop-when-idle: read the host's GPU utilisation (``read``: a backend's ``gpu_utilisation``) every
    ``poll_s`` until every GPU stayed under ``util_pct`` for ``minutes``; a busier reading starts the
    count again. Returns ``idle`` (True: run the after-run command), ``waited_s``, ``readings``,
    ``simulated`` and, when it gave up, ``reason`` (stopped, or the utilisation could not be read)."""
    started = clock()
    idle_since: float | None = None
    readings, failures, simulated = 0, 0, False
    answer: dict[str, Any] = {"idle": False, "util_pct_below": util_pct, "minutes": minutes}
    while True:
        try:
            reading = read()
            values = [float(v) for v in reading.get("util_pct") or [] if v is not None]
            simulated = simulated or bool(reading.get("simulated"))
            failures = 0
        except Exception as exc:  # noqa: BLE001 (any failure to read counts; the wait decides)
            failures += 1
            values = None
            if failures >= IDLE_READ_FAILURES:
                answer["reason"] = f"the GPUs' utilisation could not be read: {exc}"
                break
        now = clock()
        if values is not None:
            readings += 1
            if values and max(values) < util_pct:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= minutes * 60.0:
                    answer["idle"] = True
                    break
            else:
                idle_since = None
        if stop.wait(poll_s):
            answer["reason"] = "the launcher stopped watching"
            break
    answer.update(waited_s=round(clock() - started, 3), readings=readings, simulated=simulated)
    return answer
