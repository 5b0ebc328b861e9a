"""Issue 28 item 4: full-state checkpoints (one process, DDP) are staged to host memory and written in the
background while training goes on; what they hold is the state of their own step; checksums are
computed while writing; ``--no-checkpoint-async`` writes them while training waits."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import make_config, read_events
from trainer import async_checkpoint, checkpoint, loop
from trainer.loop import EXIT_OK, train


@pytest.mark.slow
def test_training_goes_on_while_a_checkpoint_is_written_and_it_holds_its_own_step(
    tmp_path: Path, model_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = dict(max_steps=6, checkpoint_every_steps=2, keep_checkpoints=5)
    ref = tmp_path / "blocking"
    assert train(make_config(ref, model_config, checkpoint_async=False, **common)) == EXIT_OK

    real_write, real_lr = checkpoint.write_main, loop.lr_at
    step3_done = threading.Event()
    overlapped: list[bool] = []
    run = tmp_path / "async"

    def lr_at(step: int, *args, **kwargs):  # type: ignore[no-untyped-def]
        if step >= 3:  # called before step 4 with the 3 steps done so far
            step3_done.set()
        return real_lr(step, *args, **kwargs)

    def held_write(tmp: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if tmp.name.endswith(checkpoint.step_dir_name(2)):
            # hold the step-2 write until training has finished step 3: only possible when it does not wait
            overlapped.append(step3_done.wait(timeout=30))
        return real_write(tmp, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_main", held_write)
    monkeypatch.setattr(loop, "lr_at", lr_at)
    assert train(make_config(run, model_config, **common)) == EXIT_OK
    assert overlapped == [True]  # step 3 trained while step 2's checkpoint was being written
    records = {e["step"]: e for e in read_events(run) if e["kind"] == "checkpoint"}
    blocking = {e["step"]: e for e in read_events(ref) if e["kind"] == "checkpoint"}
    assert sorted(records) == sorted(blocking) == [2, 4, 6]
    assert records[2]["asynchronous"] is True and records[2]["blocking_s"] < records[2]["seconds"]
    assert records[6]["asynchronous"] is False  # the last save: written at once (nothing left to overlap)
    assert all(e["asynchronous"] is False and e["blocking_s"] == e["seconds"] for e in blocking.values())
    for step in (2, 4, 6):  # the staged copy is the state of its step, whatever training did after it
        a = checkpoint.checkpoints_dir(run) / checkpoint.step_dir_name(step)
        b = checkpoint.checkpoints_dir(ref) / checkpoint.step_dir_name(step)
        assert checkpoint.problem(a) is None
        for name in ("model.pt", "optimizer.pt"):
            x, y = torch.load(a / name, weights_only=True), torch.load(b / name, weights_only=True)
            if name == "model.pt":
                assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), (step, name)
            else:
                for i, st in x["state"].items():
                    assert all(torch.equal(v, y["state"][i][k]) for k, v in st.items()), (step, name, i)


def test_checksums_computed_while_writing_match_the_files(tmp_path: Path) -> None:
    state = {"w": torch.randn(64, 64), "nested": [torch.arange(5), {"x": 1.5}]}
    digests = checkpoint.write_main(tmp_path, state, {"state": {}, "param_groups": []}, {"scale": 2.0}, {"step": 1})
    assert sorted(digests) == ["model.pt", "optimizer.pt", "scaler.pt", "trainer_state.json"]
    for name, digest in digests.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
    loaded = checkpoint.torch.load(tmp_path / "model.pt", weights_only=True, mmap=True)
    assert torch.equal(loaded["w"], state["w"])


def test_staging_copies_tensors_and_background_failures_surface() -> None:
    live = {"a": torch.ones(3), "b": [torch.zeros(2), (torch.ones(1), "x")], "n": 4}
    staged = async_checkpoint.stage(live, torch.device("cpu"))
    live["a"].add_(1)
    live["b"][0].add_(5)
    assert torch.equal(staged["a"], torch.ones(3)) and torch.equal(staged["b"][0], torch.zeros(2))
    assert staged["b"][1][1] == "x" and staged["n"] == 4
    writes = async_checkpoint.BackgroundWrite()

    def fail() -> None:
        raise OSError("disk full")

    writes.start(fail)
    with pytest.raises(RuntimeError, match="writing the checkpoint failed: disk full"):
        writes.wait()
    writes.wait()  # reported once
