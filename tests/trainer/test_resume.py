"""Spot safety with real processes: kill -9 and resume is bit-exact; SIGTERM checkpoints and exits 75."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import base_args, final_weights, read_events, spawn_train, stderr_of
from trainer import checkpoint

STEPS = 16


def _wait_for_step(run: Path, proc, at_least: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early: {proc.returncode}: {stderr_of(run)}")
        if (run / "events.jsonl").exists():
            steps = [e["step"] for e in read_events(run) if e["kind"] == "step"]
            if steps and steps[-1] >= at_least:
                return steps[-1]
        time.sleep(0.02)
    raise AssertionError("timed out waiting for steps")


def _wait_for_checkpoint(run: Path, proc, timeout: float = 60.0) -> None:
    """Until a checkpoint record is in the stream: checkpoints are written in the background, and the
    record follows the completion marker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early: {proc.returncode}: {stderr_of(run)}")
        if any(e["kind"] == "checkpoint" for e in read_events(run)):
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for a checkpoint")


def _sample_order(run: Path) -> list[list[int]]:
    by_step: dict[int, list[int]] = {}
    for e in read_events(run):
        if e["kind"] == "step":
            by_step[e["step"]] = e["sample_ids"]  # a redone step overwrites its first attempt
    return [by_step[s] for s in sorted(by_step)]


@pytest.mark.slow
def test_kill9_at_random_steps_and_resume_is_bit_identical(tmp_path: Path, model_config: Path) -> None:
    common = dict(max_steps=STEPS, checkpoint_every_steps=2, record_sample_ids=True, keep_checkpoints=2)
    ref = tmp_path / "reference"
    proc = spawn_train(base_args(ref, model_config, **common))
    assert proc.wait(timeout=120) == 0, stderr_of(ref)

    run = tmp_path / "interrupted"
    rng = random.Random(3)
    kills = 0
    target = 1  # kill points from step 3 on, so a checkpoint (every 2 steps) exists
    while kills < 3:
        target = rng.randint(target + 2, target + 4)
        proc = spawn_train(base_args(run, model_config, **common))
        _wait_for_step(run, proc, target)
        _wait_for_checkpoint(run, proc)  # at least one complete checkpoint to resume from
        proc.kill()  # SIGKILL: no chance to clean up
        proc.wait(timeout=30)
        kills += 1
    proc = spawn_train(base_args(run, model_config, **common))
    assert proc.wait(timeout=120) == 0, stderr_of(run)

    events = read_events(run)
    assert len([e for e in events if e["kind"] == "run_start"]) == 4
    assert [e["seq"] for e in events] == list(range(len(events)))  # seq continues across every resume
    resumed = [e["resumed_from_step"] for e in events if e["kind"] == "run_start"][1:]
    assert all(r is not None and r > 0 for r in resumed)
    assert _sample_order(run) == _sample_order(ref)
    assert len(_sample_order(ref)) == STEPS
    a, b = final_weights(ref), final_weights(run)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    ends = [e for e in read_events(run) if e["kind"] == "step"]
    assert ends[-1]["tokens_total"] == STEPS * 4 * 32  # cumulative counts survive the kills


@pytest.mark.slow
def test_sigterm_checkpoints_exits_75_and_resumes(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    args = base_args(run, model_config, max_steps=100000, checkpoint_every_minutes=0.0)
    proc = spawn_train(args)
    _wait_for_step(run, proc, 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 75
    events = read_events(run)
    assert events[-1]["kind"] == "run_end" and events[-1]["status"] == "preempted" and events[-1]["exit_code"] == 75
    pre = [e for e in events if e["kind"] == "preempted"][0]
    assert "SIGTERM" in pre["reason"]
    stopped_at = events[-1]["totals"]["steps"]
    ck = checkpoint.newest_valid(run)
    assert ck is not None and ck.name == f"step-{stopped_at:08d}"
    assert not (run / "final").exists()
    proc = spawn_train({**args, "max_steps": stopped_at + 2})
    assert proc.wait(timeout=120) == 0
    events = read_events(run)
    assert [e for e in events if e["kind"] == "run_start"][-1]["resumed_from_step"] == stopped_at
    assert [e["step"] for e in events if e["kind"] == "step"][-2:] == [stopped_at + 1, stopped_at + 2]
    assert events[-1]["status"] == "finished"
