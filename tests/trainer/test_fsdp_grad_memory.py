"""Issue 28 item 3: FSDP with gradient accumulation reduce-scatters every micro-step, so a rank holds only
its shard of the gradient (measured on 2 gloo ranks: the bytes of every gradient tensor a rank holds,
FSDP2's unsharded accumulation buffers included); ``--fsdp-defer-grad-sync`` keeps the old deferral,
which holds the whole model's gradient per rank and gives the same gradients. Also the head unit's
``reshard_after_forward`` and the optimizer-offload policy."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from tests.trainer.conftest import make_config
from trainer import fsdp, losses
from trainer.model import build_model
from trainer.step import accumulate

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
CPU = torch.device("cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(tmp: Path, precision: str) -> torch.nn.Module:
    cfg = tmp / "llama.json"
    if not cfg.exists():
        cfg.write_text(json.dumps(LLAMA))
    torch.manual_seed(0)  # the same initial weights on both ranks and in both modes
    model = build_model(make_config(tmp / "run", cfg, precision=precision, loss_impl="chunked"), 257, 256)
    model.train()
    return model


def _worker(rank: int, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch_dist.init_process_group("gloo", rank=rank, world_size=2)
    out: dict[str, object] = {}
    try:
        for precision in ("fp32", "bf16-mixed"):
            autocast = (
                (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
                if precision == "bf16-mixed"
                else contextlib.nullcontext
            )
            for defer in (False, True):
                model = _model(Path(tmp), precision)
                head_loss, _ = losses.install(model, "chunked", CPU)
                fsdp.shard(model, torch.bfloat16 if precision == "bf16-mixed" else None)
                shard = fsdp.local_parameter_bytes(model)  # fp32 masters: the gradient shard's size
                seen: list[int] = []

                def loss_fn(m, batch, device, ac, _seen=seen, _hl=head_loss):
                    _seen.append(fsdp.gradient_bytes(m))  # after the previous micro-step's backward
                    return losses.causal_loss_sum(m, batch, device, ac, head_loss=_hl)

                g = torch.Generator().manual_seed(100 + rank)
                micro = [{"input_ids": torch.randint(0, 257, (2, 16), generator=g)} for _ in range(3)]
                accumulate(model, micro, CPU, autocast, 2 * 3 * 2 * 15, world=2, loss_fn=loss_fn, defer_fsdp_sync=defer)
                seen.append(fsdp.gradient_bytes(model))
                grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
                out[f"{precision}-{defer}"] = {"shard": shard, "seen": seen[1:], "grads": grads}
        out["full"] = sum(p.numel() * 4 for p in _model(Path(tmp), "fp32").parameters())
        torch.save(out, f"{tmp}/rank{rank}.pt")
    finally:
        torch_dist.destroy_process_group()


@pytest.mark.slow
def test_fsdp_accumulation_holds_only_the_gradient_shard_per_rank(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        full = got["full"]
        for precision in ("fp32", "bf16-mixed"):
            each, deferred = got[f"{precision}-False"], got[f"{precision}-True"]
            shard = each["shard"]
            assert 0.45 * full <= shard <= 0.55 * full  # two ranks: half the model each
            assert len(each["seen"]) == 3  # after micro-steps 1, 2 and 3
            # reduce-scatter every micro-step: at every point between micro-steps only the shard's gradient
            assert max(each["seen"]) <= 1.1 * shard, (precision, each["seen"], shard)
            assert each["seen"][-1] == shard  # fp32 gradient shards, exactly the parameters' shards
            # deferred (--fsdp-defer-grad-sync): the whole model's unsharded gradient on each rank in between
            assert max(deferred["seen"][:-1]) >= 0.95 * full, (precision, deferred["seen"], full)
            assert deferred["seen"][-1] == shard  # reduced on the last micro-step
            for name, g in each["grads"].items():  # the same gradient either way (summation order aside)
                torch.testing.assert_close(g, deferred["grads"][name], rtol=1e-4, atol=1e-6, msg=name)


def test_head_stays_gathered_and_offload_policy(tmp_path: Path) -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    torch_dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = _model(tmp_path, "fp32")
        assert fsdp.shard(model, None, offload=True) == 4
        head_state = model.lm_head._get_fsdp_state()._fsdp_param_group
        block_state = model.model.layers[0]._get_fsdp_state()._fsdp_param_group
        assert head_state.post_forward_mesh_info is None  # not resharded after forward: gathered until backward
        assert block_state.post_forward_mesh_info is not None  # blocks reshard after forward
        assert isinstance(block_state.offload_policy, CPUOffloadPolicy)
        assert all(p.device.type == "cpu" for p in model.parameters())
    finally:
        torch_dist.destroy_process_group()
