"""Item 7 of issue 17 (part): FSDP2 as torchtitan sets it up: a MixedPrecisionPolicy under *-mixed
(16-bit gathers, fp32 gradient reduction, fp32 sharded masters), an untied embedding and output head
sharded as units of their own; resume stays bit-exact on 2 gloo processes."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as torch_dist

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, make_config, read_events, trainer_env
from trainer import checkpoint, fsdp
from trainer.model import build_model

LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 64,
    "vocab_size": 257,
    "tie_word_embeddings": False,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_units_and_mixed_precision_policy(tmp_path: Path, model_config: Path) -> None:
    from torch.distributed.fsdp import FSDPModule

    cfg_path = tmp_path / "llama.json"
    cfg_path.write_text(json.dumps(LLAMA))
    torch_dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        llama = build_model(make_config(tmp_path / "r", cfg_path, precision="bf16-mixed"), 257, 256)
        assert fsdp.shard(llama, torch.bfloat16) == 2 + 2  # embedding, head, two blocks
        units = [llama.model.embed_tokens, llama.lm_head, *llama.model.layers, llama]
        assert all(isinstance(m, FSDPModule) for m in units)
        policy = llama.model.layers[0]._get_fsdp_state()._mp_policy
        assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in llama.parameters())  # sharded masters stay fp32
        gpt2 = build_model(make_config(tmp_path / "g", model_config), 257, 256)  # tied: no own units
        assert fsdp.shard(gpt2, None) == 2
        assert not isinstance(gpt2.transformer.wte, FSDPModule) and not isinstance(gpt2.lm_head, FSDPModule)
        assert gpt2.transformer.h[0]._get_fsdp_state()._mp_policy.param_dtype is None
    finally:
        torch_dist.destroy_process_group()


def _torchrun(args: dict) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(_free_port()), "-m", "trainer", "train", *cli_args(args)]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_bf16_mixed_fsdp_trains_like_one_process_and_resumes_bit_exactly(tmp_path: Path) -> None:
    cfg_path = tmp_path / "llama.json"
    cfg_path.write_text(json.dumps(LLAMA))
    common = dict(micro_batch=2, max_steps=4, checkpoint_every_steps=2, fsdp=True, precision="bf16-mixed")
    _torchrun(base_args(tmp_path / "fsdp", cfg_path, **common))
    assert read_events(tmp_path / "fsdp")[-1]["status"] == "finished"
    run = tmp_path / "resumed"
    shutil.copytree(
        checkpoint.checkpoints_dir(tmp_path / "fsdp") / "step-00000002",
        checkpoint.checkpoints_dir(run) / "step-00000002",
    )
    _torchrun(base_args(run, cfg_path, **common))
    assert read_events(run)[0]["resumed_from_step"] == 2
    a, c = final_weights(tmp_path / "fsdp"), final_weights(run)
    assert a.keys() == c.keys()
    for name in a:
        assert torch.equal(a[name], c[name]), name
    # The same global batch in one process under autocast: bf16 compute both ways, so the weights agree
    # to bf16 rounding of the gradients (FSDP reduces fp32 gradients of bf16-gathered weights).
    single = make_config(tmp_path / "single", cfg_path, micro_batch=4, max_steps=4, precision="bf16-mixed")
    from trainer.loop import train

    assert train(single) == 0
    b = final_weights(tmp_path / "single")
    # Adam moves every element with a non-zero gradient by about lr whatever its size, so an element whose
    # gradient is within bf16 rounding of zero (e.g. of a byte seen once) can step the other way: such rare
    # elements may differ by up to twice the sum of the step sizes; all others agree to bf16 rounding.
    from trainer.step import lr_at

    cfg = single
    adam_bound = 2 * sum(
        lr_at(s, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio) for s in range(cfg.max_steps)
    )
    for name in a:
        diff = (a[name] - b[name]).abs()
        assert float(diff.max()) <= adam_bound, name
        assert int((diff > 5e-3).sum()) <= max(1, diff.numel() // 1000), name
