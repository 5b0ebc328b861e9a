"""Parameter and optimizer-state dtypes follow the precision, not the checkpoint or transformers' default.

A tiny GPT-2 saved in bf16 (as most published checkpoints are) is loaded under every precision; a
tiny AdamW update (lr 3e-5 on weights near 0.01, less than half a bf16 step there) must survive under
fp32 master weights and vanishes only under pure bf16, as documented.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import TINY_GPT2, base_args, read_events
from trainer.loop import EXIT_OK, train
from trainer.losses import causal_loss_sum
from trainer.model import build_model, resolve_precision
from trainer.step import accumulate, make_optimizer

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    path = tmp_path_factory.mktemp("ckpt") / "tiny-gpt2-bf16"
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        **{
            **TINY_GPT2,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "bos_token_id": 256,
            "eos_token_id": 256,
        }
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(BF16)
    model.save_pretrained(path, safe_serialization=True)
    save_byte_tokenizer(path)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    return path


def save_byte_tokenizer(path: Path) -> None:
    """A real Hugging Face tokenizer with one token per byte and ``<|endoftext|>`` = 256 (no downloads)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    vocab = {chars[b]: b for b in range(256)} | {"<|endoftext|>": 256}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(path)


def _config(tmp_path: Path, ckpt: Path, **kw):
    from trainer.config import TrainConfig, validate

    cfg = TrainConfig(**{**base_args(tmp_path / "run", ckpt, **kw), "model_config": None, "model": str(ckpt)})
    validate(cfg)
    return cfg


def _one_step(model: torch.nn.Module, cfg, precision) -> torch.optim.Optimizer:
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    autocast = (lambda: torch.autocast("cpu", dtype=precision.compute)) if precision.autocast else None
    import contextlib

    opt = make_optimizer(model, cfg, CPU)
    accumulate(model, [{"input_ids": ids}], CPU, autocast or contextlib.nullcontext, 2 * 15, loss_fn=causal_loss_sum)
    opt.step()
    return opt


@pytest.mark.parametrize(
    ("precision", "params", "compute", "autocast"),
    [
        ("fp32", FP32, FP32, False),
        ("bf16-mixed", FP32, BF16, True),
        ("fp16-mixed", FP32, FP16, True),
        ("bf16", BF16, BF16, False),
    ],
)
def test_full_finetune_dtypes_follow_the_precision(
    tmp_path: Path, bf16_checkpoint: Path, precision: str, params: torch.dtype, compute: torch.dtype, autocast: bool
) -> None:
    cfg = _config(tmp_path, bf16_checkpoint, precision=precision, weight_decay=0.0, lr=3e-5)
    plan = resolve_precision(precision, CPU)
    assert (plan.compute, plan.trained, plan.autocast) == (compute, params, autocast)
    model = build_model(cfg, 257, 256, precision=plan)
    assert {p.dtype for p in model.parameters()} == {params}
    opt = _one_step(model, cfg, plan)
    states = [s for s in opt.state.values()]
    assert len(states) == len(list(model.parameters()))
    assert {s["exp_avg"].dtype for s in states} == {params} and {s["exp_avg_sq"].dtype for s in states} == {params}


def test_a_tiny_update_survives_fp32_master_weights_and_vanishes_in_pure_bf16(
    tmp_path: Path, bf16_checkpoint: Path
) -> None:
    assert torch.tensor(0.02, dtype=BF16) + 3e-5 == torch.tensor(0.02, dtype=BF16)  # the defect, in one line
    changed = {}
    for precision in ("bf16-mixed", "bf16"):
        cfg = _config(tmp_path, bf16_checkpoint, precision=precision, weight_decay=0.0, lr=3e-5)
        plan = resolve_precision(precision, CPU)
        model = build_model(cfg, 257, 256, precision=plan)
        weight = model.transformer.h[0].mlp.c_fc.weight
        before = weight.detach().clone()
        _one_step(model, cfg, plan)
        delta = (weight.detach().float() - before.float()).abs()
        big = before.float().abs() > 2**-7  # where half a bf16 step (3.05e-5 each way) exceeds the update
        assert big.sum() > 1000
        changed[precision] = delta[big]
    # fp32 master weights: Adam's first step moves every weight by lr x g / (|g| + eps), about lr
    mixed = changed["bf16-mixed"]
    assert int((mixed > 0).sum()) == mixed.numel()
    assert float((mixed - 3e-5).abs().le(3e-7).float().mean()) > 0.99
    # pure bf16: the same update rounds away on every one of those weights
    assert int((changed["bf16"] > 0).sum()) == 0


@pytest.mark.parametrize(
    ("precision", "frozen"), [("bf16-mixed", BF16), ("fp16-mixed", FP16), ("fp32", FP32), ("bf16", BF16)]
)
def test_lora_base_is_16_bit_and_adapters_fp32(
    tmp_path: Path, bf16_checkpoint: Path, precision: str, frozen: torch.dtype
) -> None:
    cfg = _config(tmp_path, bf16_checkpoint, precision=precision, lora_rank=4, lora_targets=["c_attn"])
    plan = resolve_precision(precision, CPU)
    model = build_model(cfg, 257, 256, precision=plan)
    trained = [p for p in model.parameters() if p.requires_grad]
    frozen_params = [p for p in model.parameters() if not p.requires_grad]
    assert trained and {p.dtype for p in trained} == {FP32}
    assert {p.dtype for p in frozen_params} == {frozen}
    opt = _one_step(model, cfg, plan)
    assert {s["exp_avg"].dtype for s in opt.state.values()} == {FP32}


def test_a_run_reports_and_checkpoints_fp32_masters_from_a_bf16_checkpoint(
    tmp_path: Path, bf16_checkpoint: Path
) -> None:
    cfg = _config(tmp_path, bf16_checkpoint, precision="bf16-mixed", max_steps=2, checkpoint_every_steps=1)
    assert train(cfg) == EXIT_OK
    start = next(e for e in read_events(tmp_path / "run") if e["kind"] == "run_start")
    assert start["precision"] == "bf16-mixed"
    assert list(start["param_dtypes"]) == ["trained_float32"]
    ckpt = tmp_path / "run" / "checkpoints" / "step-00000002"
    optim = torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert {s["exp_avg"].dtype for s in optim["state"].values()} == {FP32}
    weights = torch.load(ckpt / "model.pt", weights_only=True)
    assert {v.dtype for k, v in weights.items() if v.is_floating_point()} == {FP32}
