"""``--fsdp``: FSDP2 on 2 CPU processes (gloo) matches a single-process run and resumes exactly."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, make_config, read_events, trainer_env
from trainer import checkpoint
from trainer.loop import train


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: dict) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "-m",
        "trainer",
        "train",
        *cli_args(args),
    ]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_two_process_fsdp_matches_single_process_and_resumes_exactly(tmp_path: Path, model_config: Path) -> None:
    nodrop = tmp_path / "nodrop.json"
    nodrop.write_text(
        model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')
    )
    common = dict(micro_batch=2, grad_accum=2, max_steps=4, checkpoint_every_steps=2, fsdp=True, eval_every_steps=2)
    _torchrun(base_args(tmp_path / "fsdp", nodrop, **common))
    events = read_events(tmp_path / "fsdp")
    start = events[0]
    assert start["fsdp"] is True and start["world_size"] == 2 and events[-1]["status"] == "finished"
    assert len([e for e in events if e["kind"] == "run_start"]) == 1
    assert [e["step"] for e in events if e["kind"] == "eval"] == [2, 4]
    ck = checkpoint.newest_valid(tmp_path / "fsdp")
    assert ck is not None and ck.name == "step-00000004"
    # sharded (DCP): one shard file per rank and DCP's index, no gathered model.pt
    assert sorted(f.name for f in ck.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (ck / ".metadata").is_file() and not (ck / "model.pt").exists()

    # Same global batch (2 x 2 x 2 = 8) in one process, unsharded: same weights up to summation order.
    single = make_config(tmp_path / "single", nodrop, micro_batch=4, grad_accum=2, max_steps=4)
    assert train(single) == 0
    a, b = final_weights(tmp_path / "fsdp"), final_weights(tmp_path / "single")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5)

    # Resume on 2 FSDP ranks from the step-2 checkpoint in a fresh run dir: bit-identical to the full run.
    run = tmp_path / "resumed"
    shutil.copytree(
        checkpoint.checkpoints_dir(tmp_path / "fsdp") / "step-00000002",
        checkpoint.checkpoints_dir(run) / "step-00000002",
    )
    _torchrun(base_args(run, nodrop, **common))
    assert read_events(run)[0]["resumed_from_step"] == 2
    c = final_weights(run)
    for name in a:
        assert torch.equal(a[name], c[name]), name


def test_fsdp_in_one_process_warns_and_trains_unsharded(
    tmp_path: Path, model_config: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=1, fsdp=True)) == 0
    assert "--fsdp with a single process" in capfd.readouterr().err
    assert read_events(run)[0]["fsdp"] is False
