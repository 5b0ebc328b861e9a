"""Issue 17 item 7: FSDP checkpoints are sharded DCP saves written in the background, complete only
with their manifest, verified on resume; kill -9 and resume on 2 gloo ranks stays bit-exact."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, make_config, read_events, trainer_env
from trainer import checkpoint, sharded_checkpoint
from trainer.loop import train
from trainer.protocol import StreamParser

# the in-process saves run without a process group; DCP warns that it assumes one process (it is one)
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _torchrun(args: dict, log: Path) -> subprocess.Popen:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "trainer", "train", *cli_args(args)]
    with open(log, "ab") as err:
        return subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )


def _finish(proc: subprocess.Popen, log: Path) -> None:
    assert proc.wait(timeout=240) == 0, log.read_text(errors="replace")[-3000:]


def _kill9_tree(root: int) -> None:
    """SIGKILL torchrun and its workers at once (the workers run in process groups of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, tree = [root], []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_for_step(run: Path, proc: subprocess.Popen, at_least: int, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        if (run / "events.jsonl").exists():
            steps = [e["step"] for e in read_events(run) if e["kind"] == "step"]
            if steps and steps[-1] >= at_least:
                return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for steps")


def test_async_save_holds_the_state_as_it_was_when_called(tmp_path: Path) -> None:
    """Training changes the weights right after ``save`` returns; the checkpoint has the old ones."""
    weights = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(3)}
    before = {k: v.clone() for k, v in weights.items()}
    saver = sharded_checkpoint.AsyncSaver(distributed=False)
    done: list[bool] = []
    saver.save({"model": weights}, tmp_path, then=lambda: done.append(True))
    for v in weights.values():  # the optimizer step that follows the save
        v.add_(1.0)
    saver.wait()
    assert done == [True] and sharded_checkpoint.is_sharded(tmp_path)
    import torch.distributed.checkpoint as dcp

    loaded = {"model": {k: torch.zeros_like(v) for k, v in before.items()}}
    dcp.load(loaded, checkpoint_id=str(tmp_path), no_dist=True)
    for k, v in before.items():
        assert torch.equal(loaded["model"][k], v), k


def test_a_failed_background_write_is_raised_at_the_next_wait(tmp_path: Path) -> None:
    saver = sharded_checkpoint.AsyncSaver(distributed=False)

    def broken() -> None:
        raise OSError("disk full")

    saver.save({"model": {"w": torch.ones(2)}}, tmp_path, then=broken)
    with pytest.raises(RuntimeError, match="writing the sharded checkpoint failed: disk full"):
        saver.wait()


def _fake_sharded(run: Path, step: int) -> Path:
    tmp = checkpoint.begin(run, step)
    (tmp / ".metadata").write_bytes(b"index")
    (tmp / "__0_0.distcp").write_bytes(b"shard zero" * 100)
    (tmp / "__1_0.distcp").write_bytes(b"shard one" * 100)
    checkpoint.write_state(tmp, None, {"step": step})
    return checkpoint.finish(run, tmp, step, keep=3)[0]


def test_the_manifest_lists_every_shard_and_a_bad_one_is_named(tmp_path: Path) -> None:
    old, new = _fake_sharded(tmp_path, 2), _fake_sharded(tmp_path, 4)
    files = json.loads((new / checkpoint.MARKER).read_text())["files"]
    assert sorted(files) == [".metadata", "__0_0.distcp", "__1_0.distcp", "trainer_state.json"]
    assert checkpoint.problem(new) is None
    with open(new / "__1_0.distcp", "r+b") as fh:  # one flipped byte in rank 1's shard
        fh.seek(5)
        fh.write(b"X")
    assert checkpoint.problem(new) == "__1_0.distcp does not match its SHA-256 checksum in COMPLETE.json"
    (old / "__0_0.distcp").unlink()
    assert checkpoint.problem(old) == "__0_0.distcp is missing"
    _fake_sharded(tmp_path, 6).joinpath(checkpoint.MARKER).unlink()  # shards written, manifest not yet
    logged: list[str] = []
    assert checkpoint.newest_valid(tmp_path, log=logged.append) is None
    assert logged == [
        "checkpoint step-00000006 is not usable: no COMPLETE.json: the checkpoint was never completed; "
        "trying the previous one",
        "checkpoint step-00000004 is not usable: __1_0.distcp does not match its SHA-256 checksum in "
        "COMPLETE.json; trying the previous one",
        "checkpoint step-00000002 is not usable: __0_0.distcp is missing; trying the previous one",
    ]


@pytest.mark.slow
def test_kill9_resume_and_a_corrupt_shard_stay_bit_exact_on_two_ranks(tmp_path: Path, model_config: Path) -> None:
    nodrop = tmp_path / "nodrop.json"
    nodrop.write_text(
        model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')
    )
    common = dict(micro_batch=2, max_steps=30, checkpoint_every_steps=4, keep_checkpoints=2, fsdp=True)

    ref = tmp_path / "reference"
    _finish(_torchrun(base_args(ref, nodrop, **common), tmp_path / "ref.log"), tmp_path / "ref.log")
    events = read_events(ref)
    saves = [e for e in events if e["kind"] == "checkpoint"]
    assert [e["step"] for e in saves] == [4, 8, 12, 16, 20, 24, 28, 30]
    assert all(e["format"] == "dcp" and e["asynchronous"] is True for e in saves)
    assert all(0 <= e["blocking_s"] <= e["seconds"] for e in saves)
    newest = checkpoint.newest_valid(ref)
    assert newest is not None and newest.name == "step-00000030"
    files = json.loads((newest / checkpoint.MARKER).read_text())["files"]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "rng-rank0.pt", "rng-rank1.pt"} <= set(files)
    reference = final_weights(ref)

    # kill -9 torchrun and both ranks mid-run (a checkpoint may be half written), then resume
    run, log = tmp_path / "killed", tmp_path / "killed.log"
    proc = _torchrun(base_args(run, nodrop, **common), log)
    _wait_for_step(run, proc, 9, log)
    _kill9_tree(proc.pid)
    proc.wait(timeout=30)
    _finish(_torchrun(base_args(run, nodrop, **common), log), log)
    starts = [e for e in read_events(run) if e["kind"] == "run_start"]
    assert len(starts) == 2 and 4 <= starts[1]["resumed_from_step"] < 30
    resumed = final_weights(run)
    assert resumed.keys() == reference.keys()
    for name in reference:
        assert torch.equal(resumed[name], reference[name]), name

    # rank 1's shard of the newest checkpoint is damaged: named, skipped, the previous one resumes exactly
    bad, log = tmp_path / "corrupt", tmp_path / "corrupt.log"
    for name in ("step-00000028", "step-00000030"):
        shutil.copytree(checkpoint.checkpoints_dir(ref) / name, checkpoint.checkpoints_dir(bad) / name)
    with open(checkpoint.checkpoints_dir(bad) / "step-00000030" / "__1_0.distcp", "r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    _finish(_torchrun(base_args(bad, nodrop, **common), log), log)
    assert "step-00000030 is not usable: __1_0.distcp does not match its SHA-256 checksum" in log.read_text()
    assert read_events(bad)[0]["resumed_from_step"] == 28
    again = final_weights(bad)
    for name in reference:
        assert torch.equal(again[name], reference[name]), name

    # the sharded checkpoint also loads, resharded, into one unsharded process
    single = tmp_path / "single"
    name = "step-00000030"
    shutil.copytree(checkpoint.checkpoints_dir(ref) / name, checkpoint.checkpoints_dir(single) / name)
    assert train(make_config(single, nodrop, micro_batch=4, max_steps=30, schedule_change="warn")) == 0
    assert StreamParser().feed((single / "events.jsonl").read_bytes())[0]["resumed_from_step"] == 30
    one = final_weights(single)
    for name in reference:
        assert torch.equal(one[name], reference[name]), name
