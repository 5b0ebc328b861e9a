"""The real trainer's test barrier (trainer/hold.py): held after the step named, released by a file or a stop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.protocol_fake import Barriers
from trainer import hold


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
