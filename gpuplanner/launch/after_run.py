"""A host's after-run command: a shell command run on this machine (where the user's cloud CLI and its
credentials are) once a run on the host has ended, e.g. ``aws ec2 stop-instances --instance-ids i-0abc``.
It gets ``GPUPLANNER_HOST`` (the host's name), ``GPUPLANNER_HOSTNAME`` (its address), ``GPUPLANNER_RUN_ID``
and ``GPUPLANNER_RUN_DIR`` in its environment; it may take up to :data:`TIMEOUT_S` seconds. What it did
(exit status, seconds, the end of its output) is kept in the run's ``billed`` event.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from gpuplanner.launch.hosts import Host

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
