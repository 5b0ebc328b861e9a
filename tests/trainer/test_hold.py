"""The real trainer's test barriers (trainer/hold.py): held after a step, inside a step or inside a checkpoint
write, released by a file or a stop."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.protocol_fake import Barriers
from tests.trainer.conftest import base_args, read_events, spawn_train, stderr_of
from trainer import checkpoint, hold
from trainer.loop import EXIT_RESUME


def _held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, stop: threading.Event) -> threading.Thread:
    monkeypatch.setattr(hold, "_STEPS", hold._steps("3, 7"))
    monkeypatch.setenv(hold.DIR_ENV, str(tmp_path / "barriers"))
    thread = threading.Thread(target=hold.after_step, args=(step, tmp_path / "run", stop.is_set), daemon=True)
    thread.start()
    return thread


def test_holds_after_a_named_step_until_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    barriers = Barriers(tmp_path / "barriers")
    thread = _held(tmp_path, monkeypatch, 7, threading.Event())
    assert barriers.wait("step-7", 30) > 0  # the trainer's pid
    assert thread.is_alive()
    barriers.release("step-7")
    thread.join(30)
    assert not thread.is_alive()


def test_a_stop_ends_the_hold_and_other_steps_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    thread = _held(tmp_path, monkeypatch, 3, stop)
    Barriers(tmp_path / "barriers").wait("step-3", 30)
    stop.set()  # a stop signal or a budget: the loop goes on to stop as usual
    thread.join(30)
    assert not thread.is_alive()
    hold.after_step(4, tmp_path / "run", lambda: False)  # not named: returns at once, writes nothing
    assert not (tmp_path / "barriers" / "step-4.reached").exists()


def test_steps_are_read_from_a_comma_separated_list() -> None:
    assert hold._steps("") == frozenset()
    assert hold._steps("4") == {4}
    assert hold._steps(" 4, 12,") == {4, 12}


def test_points_inside_a_step_and_a_checkpoint_write_are_named_like_the_fakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hold, "_IN_STEPS", hold._steps("2"))
    monkeypatch.setattr(hold, "_CHECKPOINTS", hold._steps("5"))
    monkeypatch.setenv(hold.DIR_ENV, str(tmp_path / "barriers"))
    barriers = Barriers(tmp_path / "barriers")
    inside = threading.Thread(target=hold.in_step, args=(2, tmp_path / "run", lambda: False), daemon=True)
    inside.start()
    barriers.wait("in-step-2", 30)
    writing = threading.Thread(target=hold.at_checkpoint, args=(5, tmp_path / "run", lambda: True), daemon=True)
    writing.start()  # a stop already requested: it marks the point and goes on
    writing.join(30)
    assert not writing.is_alive() and barriers.reached("checkpoint-5")
    assert inside.is_alive()
    barriers.release("in-step-2")
    inside.join(30)
    assert not inside.is_alive()
    hold.in_step(5, tmp_path / "run", lambda: False)  # other steps and checkpoints pass, writing nothing
    hold.at_checkpoint(2, tmp_path / "run", lambda: False)
    assert sorted(p.name for p in barriers.folder.iterdir()) == [
        "checkpoint-5.reached",
        "in-step-2.reached",
        "in-step-2.release",
    ]


def _wait_exit(proc: subprocess.Popen, run_dir: Path) -> int:
    try:
        return proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
@pytest.mark.parametrize("asynchronous", [False, True], ids=["blocking-write", "background-write"])
def test_the_real_trainer_holds_in_a_step_and_in_a_checkpoint_write(
    tmp_path: Path, model_config: Path, monkeypatch: pytest.MonkeyPatch, asynchronous: bool
) -> None:
    """Held inside step 2 (no record, no checkpoint of it yet) until released; held inside the write of
    checkpoint 3 (its files in the temporary folder, not published) until a SIGTERM ends the hold: the
    write completes and the trainer stops with exit 75 and a complete final checkpoint."""
    run_dir, barriers = tmp_path / "run", Barriers(tmp_path / "barriers")
    monkeypatch.setenv(hold.IN_STEP_ENV, "2")
    monkeypatch.setenv(hold.CHECKPOINT_ENV, "3")
    monkeypatch.setenv(hold.DIR_ENV, str(barriers.folder))
    args = base_args(run_dir, model_config, max_steps=8, checkpoint_every_steps=1, checkpoint_async=asynchronous)
    proc = spawn_train(args)
    try:
        assert barriers.wait("in-step-2", 120) == proc.pid
        assert [e["step"] for e in read_events(run_dir) if e["kind"] == "step"] == [1]
        assert not (checkpoint.checkpoints_dir(run_dir) / checkpoint.step_dir_name(2)).exists()
        barriers.release("in-step-2")
        assert barriers.wait("checkpoint-3", 120) == proc.pid
        tmp = checkpoint.checkpoints_dir(run_dir) / f".tmp-{checkpoint.step_dir_name(3)}"
        assert (tmp / "model.pt").is_file() and (tmp / "optimizer.pt").is_file()
        assert not (checkpoint.checkpoints_dir(run_dir) / checkpoint.step_dir_name(3)).exists()
        assert checkpoint.is_valid(checkpoint.checkpoints_dir(run_dir) / checkpoint.step_dir_name(2))
        proc.send_signal(signal.SIGTERM)
    finally:
        code = _wait_exit(proc, run_dir)
    assert code == EXIT_RESUME, stderr_of(run_dir)
    events = read_events(run_dir)
    stopped = next(e for e in events if e["kind"] == "preempted")["step"]
    # The save of step 3 follows step 3's stop check: the stop is seen after step 4. In the background
    # training goes on to step 4's save (which waits for the held write) unless the stop came first.
    assert stopped in ((4, 5) if asynchronous else (4,))
    assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, stopped + 1))
    saved = [e["step"] for e in events if e["kind"] == "checkpoint"]
    assert saved == list(range(1, stopped + 1))
    assert checkpoint.is_valid(checkpoint.checkpoints_dir(run_dir) / checkpoint.step_dir_name(3))
    assert checkpoint.newest_valid(run_dir) == checkpoint.checkpoints_dir(run_dir) / checkpoint.step_dir_name(stopped)
    assert [e["status"] for e in events if e["kind"] == "run_end"] == ["preempted"]
