"""Item 8 of issue 17: DDP settings, the CUDA allocator default, and the stop flag agreed without a
host sync after every step (2 gloo processes on CPU), with the bit-exact resume still holding."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, make_config, read_events, trainer_env
from trainer import allocator, checkpoint, dist
from trainer.loop import train


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_allocator_default_is_set_unless_the_user_chose_one() -> None:
    env: dict[str, str] = {}
    assert allocator.configure(env) == ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "trainer")
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env = {name: "max_split_size_mb:128"}
        assert allocator.configure(env) == (f"{name}=max_split_size_mb:128", "user")
        assert env == {name: "max_split_size_mb:128"}  # untouched, nothing added beside it
    assert allocator.current({}) is None


def test_trainer_entry_point_sets_the_allocator_before_torch(tmp_path: Path) -> None:
    env = {k: v for k, v in trainer_env().items() if "ALLOC_CONF" not in k}
    code = "import runpy, sys, os; sys.argv=['trainer','--help']\ntry:\n runpy.run_module('trainer', run_name='__main__')\nexcept SystemExit: pass\nprint('CONF', os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert "CONF expandable_segments:True" in out.stdout, out.stderr[-2000:]
    env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:native"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert "CONF backend:native" in out.stdout, out.stderr[-2000:]


def _one_rank_group(tmp_path: Path) -> None:
    torch_dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)


def test_ddp_wrapper_uses_bucket_views_and_large_buckets(tmp_path: Path) -> None:
    from trainer.step import DDP_BUCKET_MB, wrap_ddp

    _one_rank_group(tmp_path)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
        ddp = wrap_ddp(model, torch.device("cpu"))
        assert ddp.gradient_as_bucket_view is True
        assert ddp.static_graph is False  # gave wrong gradients on GPT-2 (see wrap_ddp)
        assert ddp.bucket_bytes_cap == DDP_BUCKET_MB * 1024 * 1024
        for _ in range(2):  # after the first step the gradients live in DDP's buckets: no second copy
            ddp(torch.randn(4, 8)).sum().backward()
        ptrs = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
        assert len(ptrs) == 1  # every gradient is a view into the one bucket (4 small tensors < 100 MB)
    finally:
        torch_dist.destroy_process_group()


def _agree_worker(rank: int, port: int, out: str) -> None:
    import time

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=2)
    info = dist.DistInfo(rank=rank, world=2, local_rank=rank, local_world=2)
    sched = dist.AgreeSchedule(info, every=0, target_s=0.25, most=50)
    fake = {"t": 0.0}
    agreed = []
    for step in range(1, 41):
        fake["t"] += 1 / 64 if rank == 0 else 1 / 16  # rank 1 is 4x slower: it decides the interval
        if sched.due(step):
            flags = sched.agree(step, [int(rank == 1 and step >= 20), 0], torch.device("cpu"), clock=lambda: fake["t"])
            agreed.append((step, flags[0]))
    torch.save(agreed, f"{out}-{rank}.pt")
    torch_dist.destroy_process_group()
    time.sleep(0.1)


@pytest.mark.slow
def test_ranks_agree_on_the_same_steps_about_target_seconds_apart(tmp_path: Path) -> None:
    mp.spawn(_agree_worker, args=(_free_port(), str(tmp_path / "agreed")), nprocs=2, join=True)
    a, b = torch.load(tmp_path / "agreed-0.pt"), torch.load(tmp_path / "agreed-1.pt")
    assert a == b  # the same agreement steps and the same flags on both ranks
    steps = [s for s, _ in a]
    # Step 1 (start-up), then every 0.25 s / (1/16 s) = 4 steps (the slower rank's proposal wins).
    assert steps == [1, 2, *range(6, 41, 4)]
    # Rank 1's stop flag, raised at step 20 (not an agreement step), reaches both ranks at step 22.
    assert [s for s, f in a if f] == [22, 26, 30, 34, 38]


def _torchrun(args: dict) -> subprocess.CompletedProcess:
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
    return subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_ddp_agrees_every_n_steps_and_resumes_bit_exactly(tmp_path: Path, model_config: Path) -> None:
    nodrop = tmp_path / "nodrop.json"
    nodrop.write_text(
        model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')
    )
    # grad_accum 1 here; tests/trainer/test_cli_and_ddp.py covers accumulation under no_sync
    common = dict(micro_batch=4, grad_accum=1, max_steps=6, checkpoint_every_steps=3, stop_sync_every_steps=2)
    out = _torchrun(base_args(tmp_path / "a", nodrop, **common))
    assert out.returncode == 0, out.stderr[-3000:]
    end = read_events(tmp_path / "a")[-1]
    assert end["kind"] == "run_end" and end["status"] == "finished"
    # Agreements at step 1 (start-up), 3 (checkpoint, known alike), 5 (3 + 2) and 6 (the last): 4, not 6.
    assert end["rank_agreements"] == 4
    # Resume from step 3 in a copy: the final weights are bit-for-bit those of the straight run.
    b = tmp_path / "b"
    (b / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "a" / "checkpoints" / "step-00000003", b / "checkpoints" / "step-00000003")
    out = _torchrun(base_args(b, nodrop, **common))
    assert out.returncode == 0, out.stderr[-3000:]
    assert [e["step"] for e in read_events(b) if e["kind"] == "resumed"] == [3]
    wa, wb = final_weights(tmp_path / "a"), final_weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert checkpoint.newest_valid(b).name == "step-00000006"
    # The same global batch (2 x 4) in one process: the same weights up to float summation order.
    assert train(make_config(tmp_path / "single", nodrop, micro_batch=8, max_steps=6)) == 0
    single = final_weights(tmp_path / "single")
    for name in wa:
        torch.testing.assert_close(wa[name], single[name], rtol=1e-4, atol=1e-5)
