"""SIGTERM while ``python -m trainer train`` is still importing torch gives the graceful stop (75), not 143."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import torch

from tests.trainer.conftest import base_args, final_weights, read_events, spawn_train, stderr_of


def _catches_sigterm(pid: int) -> bool:
    """True once the process has a handler for SIGTERM (``SigCgt`` in /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def test_sigterm_during_startup_stops_gracefully_and_resumes(tmp_path: Path, model_config: Path) -> None:
    run_dir = tmp_path / "run"
    args = base_args(run_dir, model_config, max_steps=4)
    proc = spawn_train(args)
    # Right after spawning: as soon as a handler is in place (the fix installs it before importing
    # torch), or after 1 s at the latest, well before the imports (several seconds) are done.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not _catches_sigterm(proc.pid):
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 75, stderr_of(run_dir)
    events = read_events(run_dir)
    assert not [e for e in events if e["kind"] == "step"], "stopped before the first step"
    end = [e for e in events if e["kind"] == "run_end"]
    assert end and end[-1]["status"] == "preempted" and end[-1]["exit_code"] == 75
    assert "start-up" in end[-1]["reason"]

    resumed = spawn_train(args)
    assert resumed.wait(120) == 0, stderr_of(run_dir)
    assert [e["step"] for e in read_events(run_dir) if e["kind"] == "step"] == [1, 2, 3, 4]
    assert set(final_weights(run_dir)) and all(torch.isfinite(v).all() for v in final_weights(run_dir).values())
