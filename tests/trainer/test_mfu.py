"""MFU as the field reports it (6N per token plus attention, no recompute, no embedding lookup) and HFU
(with recompute) beside it, checked against a hand count of the tiny GPT-2's parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.conftest import TINY_GPT2, make_config, read_events
from trainer.loop import EXIT_OK, train
from trainer.model import build_model, training_flops

L, D, V, P, T = TINY_GPT2["n_layer"], TINY_GPT2["n_embd"], TINY_GPT2["vocab_size"], TINY_GPT2["n_positions"], 32
# One GPT-2 block: two LayerNorms (weight + bias), c_attn (D x 3D + 3D), attention c_proj (D x D + D),
# c_fc (D x 4D + 4D), mlp c_proj (4D x D + D).
BLOCK = 2 * 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * 4 * D + 4 * D) + (4 * D * D + D)
TOKEN_EMBEDDING = V * D  # tied: the output head's matmul uses it, so it counts
POSITION_EMBEDDING = P * D  # a lookup only: it does not count
MATMUL = TOKEN_EMBEDDING + L * BLOCK + 2 * D  # + the final LayerNorm
ATTENTION = 12 * L * T * D  # forward 4 L T D (scores and their use), backward twice that
RECOMPUTE_ALL = 2 * L * BLOCK + 4 * L * T * D  # one more forward of every block


def _model(tmp_path: Path, model_config: Path, **kw):
    cfg = make_config(tmp_path / "run", model_config, **kw)
    return build_model(cfg, 257, 256)


def test_full_finetune_flops_match_a_hand_count(tmp_path: Path, model_config: Path) -> None:
    model = _model(tmp_path, model_config)
    assert sum(p.numel() for p in model.parameters()) == MATMUL + POSITION_EMBEDDING
    for recompute, extra in (("off", 0), ("every", RECOMPUTE_ALL), ("every-other", RECOMPUTE_ALL // 2)):
        flops = training_flops(model, T, recompute)
        assert flops.matmul_params == MATMUL
        assert flops.model == 6 * MATMUL + ATTENTION  # the same whatever is recomputed
        assert flops.hardware == flops.model + extra, recompute


def test_lora_flops_count_frozen_weights_at_4_and_adapters_at_6(tmp_path: Path, model_config: Path) -> None:
    model = _model(tmp_path, model_config, lora_rank=4, lora_targets=["c_attn"])
    adapters = L * (4 * D + 3 * D * 4)  # lora_A (r x D) and lora_B (3D x r) on each c_attn
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == adapters
    flops = training_flops(model, T, "every")
    assert flops.model == 4 * MATMUL + 6 * adapters + ATTENTION
    assert flops.hardware == flops.model + 2 * L * (BLOCK + adapters // L) + 4 * L * T * D


def test_step_records_and_bench_report_mfu_and_hfu(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    # A made-up peak of 1 TFLOP/s gives the CPU an MFU to report.
    cfg = make_config(run, model_config, max_steps=3, grad_checkpointing="every", peak_tflops=1.0)
    assert train(cfg) == EXIT_OK
    events = read_events(run)
    start = next(e for e in events if e["kind"] == "run_start")
    assert start["flops_per_token"] == 6 * MATMUL + ATTENTION
    assert start["hardware_flops_per_token"] == 6 * MATMUL + ATTENTION + RECOMPUTE_ALL
    for step in (e for e in events if e["kind"] == "step"):
        assert step["mfu"] == pytest.approx(start["flops_per_token"] * step["tokens_per_s"] / 1e12)
        assert step["hfu"] == pytest.approx(start["hardware_flops_per_token"] * step["tokens_per_s"] / 1e12)
        assert step["hfu"] > step["mfu"] > 0

    from trainer.bench import bench

    doc = bench(make_config(tmp_path / "b", model_config, grad_checkpointing="every-other", peak_tflops=1.0), 1, 2)
    assert doc["flops_per_token"] == 6 * MATMUL + ATTENTION
    assert doc["hardware_flops_per_token"] == doc["flops_per_token"] + RECOMPUTE_ALL // 2
    assert doc["hfu"] / doc["mfu"] == pytest.approx(doc["hardware_flops_per_token"] / doc["flops_per_token"])
