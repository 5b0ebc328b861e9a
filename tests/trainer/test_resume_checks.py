"""Resume checks: the saved schedule against the current one (refuse with exit 2, or warn with the
difference), and the temporary checkpoint folders a crash leaves behind removed at start-up."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.trainer.conftest import base_args, make_config, read_events, spawn_train, stderr_of
from trainer import checkpoint
from trainer.loop import EXIT_CONFIG, EXIT_OK, train
from trainer.step import lr_at


def _first_run(run: Path, model_config: Path) -> None:
    assert train(make_config(run, model_config, max_steps=4, checkpoint_every_steps=2)) == EXIT_OK


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): real training or a subprocess
def test_a_changed_schedule_is_refused_with_exit_2_and_the_difference(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    _first_run(run, model_config)
    before = (run / "events.jsonl").read_bytes()
    proc = spawn_train(base_args(run, model_config, max_steps=8, lr=1e-3, schedule_change="refuse"))
    assert proc.wait(timeout=120) == EXIT_CONFIG
    err = stderr_of(run)
    assert "resuming step-00000004 with a different schedule: total 4 -> 8, lr 0.002 -> 0.001, max_steps 4 -> 8" in err
    assert "learning rate at step 4: 0.0002 saved, 0.000775 now" in err
    assert "--schedule-change warn" in err and "Traceback" not in err
    events = read_events(run)
    new = events[len(read_events_bytes(before)) :]
    assert [e["kind"] for e in new] == ["run_start", "run_end"]
    assert new[-1]["exit_code"] == EXIT_CONFIG and "max_steps 4 -> 8" in new[-1]["error"]
    assert not [e for e in new if e["kind"] == "step"]
    assert [p.name for p in checkpoint.complete(run)] == ["step-00000004", "step-00000002"]


def read_events_bytes(data: bytes) -> list[dict]:
    from trainer.protocol import StreamParser

    return StreamParser().feed(data)


def test_a_changed_schedule_warns_and_continues_on_the_new_one(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _first_run(run, model_config)
    capsys.readouterr()
    assert train(make_config(run, model_config, max_steps=8, checkpoint_every_steps=2)) == EXIT_OK
    assert "total 4 -> 8, max_steps 4 -> 8" in capsys.readouterr().err
    events = read_events(run)
    resumed = [e for e in events if e["kind"] == "resumed"][-1]
    assert resumed["schedule_changes"] == [
        {"setting": "total", "saved": 4, "now": 8},
        {"setting": "max_steps", "saved": 4, "now": 8},
    ]
    step5 = next(e for e in events if e["kind"] == "step" and e["step"] == 5)
    assert step5["lr"] == pytest.approx(lr_at(4, 2e-3, 2, 8, 0.1))  # the new schedule, as warned


def test_the_same_schedule_resumes_without_a_word(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    cfg = make_config(run, model_config, max_steps=6, checkpoint_every_steps=2, schedule_change="refuse")
    # stop after step 2 as a preemption would: keep the checkpoint of step 2 only
    assert train(cfg) == EXIT_OK
    for name in ("step-00000006", "step-00000004"):
        shutil.rmtree(checkpoint.checkpoints_dir(run) / name)
    capsys.readouterr()
    assert train(cfg) == EXIT_OK
    assert "different schedule" not in capsys.readouterr().err
    resumed = [e for e in read_events(run) if e["kind"] == "resumed"][-1]
    assert resumed["step"] == 2 and "schedule_changes" not in resumed


def _rewrite_state(ckpt: Path, **changes) -> None:
    """Edit a checkpoint's trainer_state.json and re-seal its completion marker (as if written so)."""
    state = json.loads((ckpt / "trainer_state.json").read_text())
    for key, value in changes.items():
        if key.startswith("scheduler."):
            state["scheduler"][key.split(".", 1)[1]] = value
        else:
            state[key] = value
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    marker = json.loads((ckpt / checkpoint.MARKER).read_text())
    marker["files"]["trainer_state.json"] = hashlib.sha256((ckpt / "trainer_state.json").read_bytes()).hexdigest()
    (ckpt / checkpoint.MARKER).write_text(json.dumps(marker))
    assert checkpoint.is_valid(ckpt)


def test_a_world_size_change_alone_warns_even_under_refuse(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    cfg = make_config(run, model_config, max_steps=6, checkpoint_every_steps=2, schedule_change="refuse")
    assert train(make_config(run, model_config, max_steps=6, checkpoint_every_steps=2)) == EXIT_OK
    newest = checkpoint.complete(run)[0]
    _rewrite_state(newest, step=4, world=2, **{"scheduler.world": 2})  # as if two ranks had written it
    capsys.readouterr()
    assert train(cfg) == EXIT_OK
    assert "world 2 -> 1" in capsys.readouterr().err
    resumed = [e for e in read_events(run) if e["kind"] == "resumed"][-1]
    assert resumed["schedule_changes"] == [{"setting": "world", "saved": 2, "now": 1}]


def test_checkpoints_from_before_the_check_compare_what_they_recorded(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    _first_run(run, model_config)
    newest = checkpoint.complete(run)[0]
    state = json.loads((newest / "trainer_state.json").read_text())
    old = {k: state["scheduler"][k] for k in ("kind", "warmup", "total", "min_lr_ratio")}  # the old format
    _rewrite_state(newest, scheduler=old)
    cfg = make_config(run, model_config, max_steps=8, lr=1e-3, schedule_change="refuse")
    assert train(cfg) == EXIT_CONFIG  # lr and max_steps unknown to it, but the total moved
    end = read_events(run)[-1]
    assert end["kind"] == "run_end" and end["error"].startswith(
        "resuming step-00000004 with a different schedule: total 4 -> 8 "
    )


def test_unfinished_checkpoint_folders_are_removed_at_start(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _first_run(run, model_config)
    root = checkpoint.checkpoints_dir(run)
    for step in (3, 5):  # a crash while writing: the temporary folder with part of a checkpoint
        tmp = root / f".tmp-step-{step:08d}"
        tmp.mkdir()
        (tmp / "model.pt").write_bytes(b"\0" * 500_000)
    capsys.readouterr()
    assert train(make_config(run, model_config, max_steps=6, checkpoint_every_steps=2)) == EXIT_OK
    err = capsys.readouterr().err
    assert "removed 2 unfinished checkpoint folder(s) (1.0 MB): .tmp-step-00000003, .tmp-step-00000005" in err
    assert sorted(p.name for p in root.iterdir()) == ["step-00000002", "step-00000004", "step-00000006"]


def test_prune_removes_temporary_folders_up_to_the_newest_checkpoint(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    _first_run(run, model_config)
    root = checkpoint.checkpoints_dir(run)
    for step in (1, 4, 9):
        (root / f".tmp-step-{step:08d}").mkdir()
    checkpoint.prune(run, keep=2)
    assert sorted(p.name for p in root.iterdir()) == [".tmp-step-00000009", "step-00000002", "step-00000004"]
