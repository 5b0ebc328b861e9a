"""The protocol fake (tests/protocol_fake.py) under the real monitor: its barriers hold until released (a file
or a FIFO), a stop while it holds inside a checkpoint write keeps a whole checkpoint, and it exits as told."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from trainer.protocol import StreamParser


def start_monitor(run_dir: Path, *flags: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "trainer", "exec", "--run-dir", str(run_dir), "--simulate-gpu"]
    argv += ["--gpu-interval-s", "0", "--price-per-gpu-hour", "1", "--", *fake.command(*flags)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def records(run_dir: Path) -> list[dict[str, Any]]:
    parser = StreamParser()
    out = parser.feed((run_dir / "events.jsonl").read_bytes())
    assert parser.malformed == 0
    return out


def test_a_stop_inside_a_checkpoint_write_keeps_a_whole_checkpoint_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    barriers = fake.Barriers(run_dir)
    proc = start_monitor(run_dir, "--steps", "9", "--checkpoint-every", "4", "--hold-at-checkpoint")
    barriers.release("checkpoint-4")  # the first checkpoint is written whole
    pid = barriers.wait("checkpoint-8")  # the second holds half written (its temporary file exists)
    assert json.loads((run_dir / "checkpoints" / "state.tmp").read_text())["step"] == 8
    assert json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"] == 4
    os.kill(pid, signal.SIGTERM)  # the job's own process, as a host's stop reaches it
    assert proc.wait(60) == 75
    assert json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"] == 8
    end = records(run_dir)[-1]
    assert (end["kind"], end["status"], end["exit_code"]) == ("run_end", "preempted", 75)
    proc = start_monitor(run_dir, "--steps", "9", "--exit-code", "3")  # resumed; then fails as told
    assert proc.wait(60) == 3
    steps = [r["step"] for r in records(run_dir) if r["kind"] == "step"]
    assert steps == list(range(1, 10))  # each step once
    assert records(run_dir)[-1]["status"] == "failed"


def test_hold_before_start_is_released_by_a_fifo(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "start.release")
    barriers = fake.Barriers(run_dir)
    proc = start_monitor(run_dir, "--steps", "2", "--hold-before-start", "--eval-every", "2")
    barriers.wait("start")
    assert [r["kind"] for r in records(run_dir) if r["kind"] == "step"] == []  # nothing before the release
    # the fake blocks opening the FIFO until this side opens it for writing
    writer = threading.Thread(target=lambda: (run_dir / "start.release").write_text("go"))
    writer.start()
    assert proc.wait(60) == 0
    writer.join(10)
    recs = records(run_dir)
    assert [r["step"] for r in recs if r["kind"] == "step"] == [1, 2]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [2]
    assert recs[-1]["status"] == "finished" and json.loads((run_dir / "final.json").read_text())["step"] == 2
