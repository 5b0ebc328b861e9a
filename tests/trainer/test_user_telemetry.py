"""``gpuplanner_telemetry``, the module a user's script imports: records, rank 0 only, bad input named,
and the Lightning callback's logic (Lightning itself is not installed in the test environment, so its
hooks are driven by a minimal duck-typed trainer; the HF callback runs under a real ``transformers.Trainer``
in tests/launch/test_user_command.py)."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from trainer.command_monitor import USER_PATH


@pytest.fixture
def gt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(USER_PATH))
    monkeypatch.setenv("GPUPLANNER_TELEMETRY_FILE", str(tmp_path / "user.jsonl"))
    monkeypatch.delenv("RANK", raising=False)
    module = importlib.reload(importlib.import_module("gpuplanner_telemetry"))  # fresh totals and warnings
    yield module
    module.close()


def written(tmp_path: Path) -> list[dict]:
    path = tmp_path / "user.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_steps_add_up_and_rates_are_measured(gt: ModuleType, tmp_path: Path) -> None:
    first = gt.log_step(1, tokens=100, samples=2, loss=3.5)
    second = gt.log_step(3, tokens=200, samples=4, loss=float("nan"), lr=1e-3, grad_norm=0.5)
    recs = written(tmp_path)
    assert recs == [first, second]
    assert (first["tokens_total"], first["samples_total"], first["tokens_per_s"]) == (100, 2, None)
    assert (second["tokens_total"], second["samples_total"], second["loss"]) == (300, 6, None)
    assert second["tokens_per_s"] > 0 and second["step_time_s"] > 0 and second["grad_norm"] == 0.5
    assert second["tokens_per_s"] / second["samples_per_s"] == pytest.approx(50)
    gt.log_step(4, tokens_total=10_000, samples_total=80)  # the script's own totals (after a resume)
    assert written(tmp_path)[-1]["tokens_total"] == 10_000
    assert gt.log_eval(4, eval_loss=2.25, accuracy=0.5)["kind"] == "eval"


def test_bad_input_is_one_warning_and_never_stops_training(
    gt: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gt.log_step("7") is None and gt.log_step(None) is None  # no step: no record
    assert written(tmp_path) == []
    gt.log_step(1, tokens=100, samples=2)
    gt.log_step(2, tokens=10**30, samples=2, loss="low")  # 27.9: rejected, the total stays honest
    gt.log_step(3, tokens=-5, samples=2.5)
    gt.log_step(4, tokens=float("nan"), samples=float("inf"))
    gt.log_step(5, tokens=10**30)  # the same field again: ignored quietly
    gt.log_step(6, tokens=100, samples=2)
    recs = written(tmp_path)
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r["tokens_total"] for r in recs] == [100, 100, 100, 100, 100, 200]
    assert [r["samples_total"] for r in recs] == [2, 4, 4, 4, 4, 6]
    assert [r["tokens_per_s"] is None for r in recs] == [True, True, True, True, True, False]
    assert recs[1]["loss"] is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4, err  # one line per field: step, tokens, loss, samples
    assert [line.split("=")[0] for line in err] == ["gpuplanner_telemetry: step"] + [
        f"gpuplanner_telemetry: {name}" for name in ("tokens", "loss", "samples")
    ]
    assert "10000000000000000000000000000" in err[1] and "from 0 to 9223372036854775807" in err[1]
    # extras JSON cannot hold: a tensor's value, anything else null (one warning), the record written
    torch = pytest.importorskip("torch")
    rec = gt.log_step(8, grad_norm=torch.tensor(0.5), note=object())
    assert json.loads(tmp_path.joinpath("user.jsonl").read_text().splitlines()[-1])["grad_norm"] == 0.5
    assert rec is not None and written(tmp_path)[-1]["note"] is None
    assert capsys.readouterr().err.count("recorded as null") == 1
    # a running total kept by the script that would overflow the history is refused too
    gt.log_step(9, tokens_total=2**63)
    assert written(tmp_path)[-1]["tokens_total"] == 200


class SteppedClock:
    """``time`` for the module: each call to ``monotonic`` is ``step_s`` later (wall time follows)."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s = 1000.0, step_s

    def monotonic(self) -> float:
        self.now += self.step_s
        return self.now

    def time(self) -> float:
        return 1.7e9 + self.now + self.step_s


def test_counts_since_the_previous_call_every_five_steps(
    gt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nanoGPT-style logging (every 5 iterations, 0.5 s each): the tokens of all 5 steps count, the rate
    is theirs over the 2.5 s between two calls, and the first call has no rate (nothing from one step)."""
    monkeypatch.setattr(gt, "time", SteppedClock(2.5))
    per_iter = 12 * 64
    for it in range(5, 26, 5):
        gt.log_step(it, tokens=per_iter * 5, loss=1.0 / it)
    recs = written(tmp_path)
    assert [r["tokens_total"] for r in recs] == [per_iter * it for it in range(5, 26, 5)]
    assert recs[0]["tokens_per_s"] is None and recs[0]["step_time_s"] is None
    assert [r["tokens_per_s"] for r in recs[1:]] == [pytest.approx(per_iter * 5 / 2.5)] * 4
    assert [r["step_time_s"] for r in recs[1:]] == [pytest.approx(0.5)] * 4
    # no samples given: none recorded (not 0 samples/s)
    assert all(r["samples_total"] is None and r["samples_per_s"] is None for r in recs)
    # the script's own running total gives the same figures
    gt.log_step(30, tokens_total=per_iter * 30)
    assert written(tmp_path)[-1]["tokens_total"] == per_iter * 30 and written(tmp_path)[-1]["tokens_per_s"] > 0


def test_only_rank_zero_writes_and_outside_gpu_planner_nothing(
    gt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    assert gt.log_step(1, tokens=1) is None and not gt.enabled()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("GPUPLANNER_TELEMETRY_FILE")
    assert gt.log_step(1, tokens=1) is None and gt.log_eval(1, eval_loss=1.0) is None
    assert written(tmp_path) == []


def test_lightning_hooks_with_a_duck_typed_trainer(gt: ModuleType, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    hooks = gt._LightningHooks(every_n_steps=2)
    trainer = SimpleNamespace(global_step=0, callback_metrics={}, sanity_checking=False)
    for step in range(1, 5):
        trainer.global_step = step
        batch = {"input_ids": torch.zeros(4, 16, dtype=torch.long)}
        hooks.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0 / step)}, batch, step - 1)
    trainer.callback_metrics = {"val_loss": torch.tensor(0.75)}
    hooks.on_validation_end(trainer, None)
    recs = written(tmp_path)
    assert [(r["kind"], r["step"]) for r in recs] == [("step", 2), ("step", 4), ("eval", 4)]
    assert [(r["tokens_total"], r["samples_total"]) for r in recs[:2]] == [(128, 8), (256, 16)]
    assert recs[1]["loss"] == pytest.approx(0.25) and recs[2]["eval_loss"] == pytest.approx(0.75)
    # a tuple batch: samples from its first tensor, tokens from seq_len
    hooks = gt._LightningHooks(seq_len=32)
    trainer.global_step = 5
    hooks.on_train_batch_end(trainer, None, torch.tensor(0.5), (torch.zeros(8, 3), torch.zeros(8)), 0)
    assert (written(tmp_path)[-1]["tokens_total"], written(tmp_path)[-1]["samples_total"]) == (256, 8)


def test_the_callbacks_import_their_library_lazily(gt: ModuleType) -> None:
    assert "transformers" not in sys.modules or hasattr(gt, "_HFHooks")
    if importlib.util.find_spec("lightning") is None and importlib.util.find_spec("pytorch_lightning") is None:
        with pytest.raises(ImportError):
            gt.LightningCallback  # noqa: B018
    pytest.importorskip("transformers")
    from transformers import TrainerCallback

    assert issubclass(gt.HFCallback, TrainerCallback) and gt.HFCallback(seq_len=8).seq_len == 8
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        gt.nothing  # noqa: B018
