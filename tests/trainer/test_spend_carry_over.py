"""A resumed trainer's spend starts from what the earlier attempts spent: the checkpoint's totals, or the
events file's last ``run_end`` where that is later (its final save, or a start-up stopped before any step, is
paid after the checkpoint), as the start-up watch and the history price them (issue 25: under load the
history's cost and the trainer's spend drifted apart by the preempted attempt's final save)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import trainer.spend
from tests.trainer.test_spend_clock import T0, FakeClock, make_trainer
from trainer import startup_budget


def _end(run_dir: Path, totals: dict[str, float], *later: str) -> None:
    end = {"v": 1, "seq": 9, "t": 1.0, "kind": "run_end", "status": "preempted", "totals": totals}
    lines = [json.dumps(end), *later]
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("checkpoint", "ended", "expected"),
    [
        # the preempted attempt's final save (2 s at $1/s) is paid after its checkpoint was written
        ((100.0, 0.0277, 100.0), (102.0, 0.0283, 102.0), (102.0, 0.0283, 102.0)),
        # a start-up stopped before any step: no checkpoint at all, the events file holds what it cost
        ((0.0, 0.0, 0.0), (14.5, 0.004, 14.5), (14.5, 0.004, 14.5)),
        # the checkpoint is newer than the last run_end (an attempt lost by SIGKILL wrote no end)
        ((300.0, 0.0833, 300.0), (102.0, 0.0283, 102.0), (300.0, 0.0833, 300.0)),
    ],
)
def test_carry_over_is_the_later_of_the_checkpoint_and_the_last_run_end(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    checkpoint: tuple[float, float, float],
    ended: tuple[float, float, float],
    expected: tuple[float, float, float],
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(trainer.spend, "time", SimpleNamespace(monotonic=clock.monotonic))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    keys = ("elapsed_s", "gpu_hours", "spend_usd")
    _end(run_dir, dict(zip(keys, ended, strict=True)), '{"v": 1, "seq": 10, "t": 2.0, "kind": "gpu"}', "garbage")
    train = make_trainer(run_dir, 3600.0, 1, 500.0, None)
    try:
        for key, value in zip(keys, checkpoint, strict=True):
            setattr(train.state, key, value)  # what _resume read from the checkpoint
        train._carry_over()
        clock.now = T0 + 3.0  # 3 s of this process at $1/s
        totals = train._tick()
    finally:
        train.tele.close()
    assert totals.elapsed_s == pytest.approx(expected[0] + 3.0)
    assert totals.gpu_hours == pytest.approx(expected[1] + 3.0 / 3600.0)
    assert totals.spend_usd == pytest.approx(expected[2] + 3.0)


def test_last_totals_of_an_events_file(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    assert startup_budget.last_totals(str(events)) == {}  # a fresh run
    events.write_text("")
    assert startup_budget.last_totals(str(events)) == {}
    events.write_text('{"v": 1, "seq": 0, "t": 1.0, "kind": "run_start"}\n')
    assert startup_budget.last_totals(str(events)) is None  # records but no end: unknown
    _end(tmp_path, {"spend_usd": 1.0})
    _end(tmp_path, {"spend_usd": 2.5}, events.read_text().strip())
    assert startup_budget.last_totals(str(events)) == {"spend_usd": 1.0}  # the last one in the file
    assert startup_budget._earlier_spend(str(events)) == (1.0, 0.0)
