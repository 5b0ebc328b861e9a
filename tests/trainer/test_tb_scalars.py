"""The command monitor's TensorBoard reader (``trainer/tb_scalars.py``) on event files written by
TensorBoard's own writer (what PyTorch's ``SummaryWriter`` and the HF ``Trainer`` use): the loss and the
learning rate per step, read on from where it stopped, each step once; old files and other scalars left
alone; without TensorBoard nothing, silently."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import pytest

from trainer.tb_scalars import TensorBoardScalars, field_of

pytest.importorskip("tensorboard")
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402


def write(writer: EventFileWriter, step: int, **scalars: float) -> None:
    values = [Summary.Value(tag=tag.replace("__", "/"), simple_value=v) for tag, v in scalars.items()]
    writer.add_event(Event(wall_time=1_800_000_000.0 + step, step=step, summary=Summary(value=values)))
    writer.flush()


def test_loss_and_lr_per_step_read_on_and_each_once(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    stale = EventFileWriter(str(old))
    write(stale, 1, train__loss=99.0)
    stale.close()
    for name in os.listdir(old):
        os.utime(old / name, (1_000_000.0, 1_000_000.0))  # written before this run: not its curve
    writer = EventFileWriter(str(tmp_path / "hf-out" / "runs" / "Nov27"))
    reader = TensorBoardScalars(tmp_path, since=1_700_000_000.0, every_s=0.0)
    write(writer, 2, train__loss=2.5, train__learning_rate=1e-3, train__grad_norm=0.7)
    write(writer, 4, train__loss=2.25, train__learning_rate=9e-4)
    first = reader.step_records()
    assert [(at, r["step"], r["loss"], r["lr"]) for at, r in first] == [(1_800_000_002.0, 2, 2.5, pytest.approx(1e-3))]
    assert first[0][1]["tokens_total"] is None and first[0][1]["source"] == "tensorboard"
    write(writer, 6, train__loss=2.0, eval__loss=2.4)  # step 6's learning rate comes in a later event
    write(writer, 6, train__learning_rate=8e-4)
    assert [(r["step"], r["loss"]) for _, r in reader.step_records()] == [(4, 2.25)]
    last = reader.step_records(final=True)
    assert [(r["step"], r["loss"], r["lr"]) for _, r in last] == [(6, 2.0, pytest.approx(8e-4))]
    assert reader.step_records(final=True) == []  # nothing twice
    writer.close()


def test_tags_of_the_common_trainers() -> None:
    assert [field_of(t) for t in ("train/loss", "loss", "Loss/train", "train_loss")] == ["loss"] * 4
    assert [field_of(t) for t in ("train/learning_rate", "lr", "lr-AdamW", "lr-SGD/pg1")] == ["lr"] * 3 + [None]
    assert [field_of(t) for t in ("eval/loss", "train/grad_norm", "val_loss")] == [None] * 3


def test_without_tensorboard_nothing_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = EventFileWriter(str(tmp_path))
    write(writer, 1, loss=1.0)
    write(writer, 2, loss=0.5)
    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("tensorboard"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    reader = TensorBoardScalars(tmp_path, since=0.0, every_s=0.0)
    assert reader.step_records(final=True) == [] and reader.available is False
    writer.close()
