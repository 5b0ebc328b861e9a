"""Item 9 of issue 17: ``--grad-checkpointing selective`` keeps matmul and attention outputs and
recomputes the rest; the gradients are the plain ones, the kept memory is what the planner counts,
and the planner's FLOPs add no recompute."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from gpuplanner.plan import memory
from gpuplanner.plan.model_spec import from_config, from_preset
from gpuplanner.plan.setup import TrainSetup
from gpuplanner.plan.throughput import flops_per_token
from tests.trainer.conftest import make_config, read_events
from trainer import losses
from trainer.loop import EXIT_OK, train
from trainer.model import build_model, training_flops

CPU = torch.device("cpu")
LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "vocab_size": 96,
    "tie_word_embeddings": False,
}


def _model(tmp_path: Path, ckpt: str, cfg: dict | None = None) -> torch.nn.Module:
    path = tmp_path / f"{ckpt}.json"
    path.write_text(json.dumps(cfg or LLAMA))
    config = make_config(tmp_path / "run", path, grad_checkpointing=ckpt, precision="fp32", loss_impl="plain")
    model = build_model(config, vocab_size=96, eos_id=0)
    model.train()
    return model


def _ids() -> torch.Tensor:
    return torch.randint(0, 96, (4, 64), generator=torch.Generator().manual_seed(3))


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    loss = losses.causal_loss_sum(model, {"input_ids": _ids()}, CPU, contextlib.nullcontext)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_selective_gives_the_plain_gradients(tmp_path: Path) -> None:
    ref = _grads(_model(tmp_path, "off"))
    for ckpt in ("selective", "every"):
        got = _grads(_model(tmp_path, ckpt))
        for name, g in ref.items():
            torch.testing.assert_close(got[name], g, rtol=1e-5, atol=1e-6, msg=f"{ckpt}: {name}")


def _kept_bytes(model: torch.nn.Module) -> int:
    """Bytes alive after the forward (what autograd and the checkpoints keep for backward), less the
    parameters; MemTracker counts every tensor the forward allocates."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model)
    ids = _ids()
    with tracker:
        loss = losses.causal_loss_sum(model, {"input_ids": ids}, CPU, contextlib.nullcontext)
        current = tracker.get_tracker_snapshot("current")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    del loss
    return int(sum(v["Total"] for v in current.values())) - params


def test_selective_keeps_what_the_planner_counts(tmp_path: Path) -> None:
    kept = {ckpt: _kept_bytes(_model(tmp_path, ckpt)) for ckpt in ("off", "selective", "every")}
    assert kept["every"] < kept["selective"] < kept["off"]
    spec = from_config(LLAMA)
    tokens = 4 * 64
    per_layer = memory.selective_layer_bytes(spec, "fp32", "sdpa")
    # q, k, v, o, gate, up, down outputs + attention output + log-sum-exp, per token per layer
    h, kv, i, heads = 64, 2 * 16, 176, 4
    assert per_layer == 4 * (h + kv + kv + h + i + i + h) + 4 * h + 4 * heads
    measured = kept["selective"] - kept["every"]  # both keep each block's input; selective also its outputs
    assert measured == pytest.approx(2 * per_layer * tokens, rel=0.05)
    # The planner's activations follow. GPT-2 124M, 8 x 1024 tokens, bf16-mixed: the logits outweigh one
    # block's recompute, so the activations are the kept tensors alone: selective adds its outputs per block.
    gpt2 = from_preset("gpt2")
    acts = {
        c: memory.estimate_memory(
            gpt2, TrainSetup(precision="bf16-mixed", micro_batch=8, seq_len=1024, grad_checkpointing=c)
        ).activations
        for c in ("none", "full", "selective")
    }
    assert acts["full"] < acts["selective"] < acts["none"]
    kept_gpt2 = memory.selective_layer_bytes(gpt2, "amp", "sdpa") * 8 * 1024
    assert acts["selective"] - acts["full"] == gpt2.num_layers * kept_gpt2


def test_selective_recomputes_no_matmul_flops(tmp_path: Path) -> None:
    off, sel, full = (training_flops(_model(tmp_path, c), 64, c) for c in ("off", "selective", "every"))
    assert sel.hardware == off.hardware == sel.model and full.hardware > sel.hardware
    spec = from_config(LLAMA)
    none = TrainSetup(seq_len=64, grad_checkpointing="none")
    selective = TrainSetup(seq_len=64, grad_checkpointing="selective")
    full_setup = TrainSetup(seq_len=64, grad_checkpointing="full")
    assert flops_per_token(spec, selective, spec.n_params) == flops_per_token(spec, none, spec.n_params)
    assert flops_per_token(spec, full_setup, spec.n_params) > flops_per_token(spec, none, spec.n_params)


def test_a_run_with_selective_checkpointing_trains(tmp_path: Path, model_config: Path) -> None:
    cfg = make_config(tmp_path / "sel", model_config, max_steps=3, grad_checkpointing="selective")
    assert train(cfg) == EXIT_OK
    events = read_events(tmp_path / "sel")
    assert events[0]["config"]["grad_checkpointing"] == "selective"
    assert events[-1]["status"] == "finished"


def _alt_model(tmp_path: Path) -> torch.nn.Module:
    path = tmp_path / "alt.json"
    path.write_text(json.dumps(LLAMA))
    config = make_config(
        tmp_path / "run",
        path,
        grad_checkpointing="selective",
        selective_policy="alternate-matmul",
        precision="fp32",
        loss_impl="plain",
    )
    model = build_model(config, vocab_size=96, eos_id=0)
    model.train()
    return model


def test_alternate_matmul_policy_gives_the_plain_gradients_and_keeps_what_the_planner_counts(tmp_path: Path) -> None:
    """Issue 28 item 3: the middle option (torchtitan's op policy) keeps every other matmul output."""
    from gpuplanner.plan.activation_ledger import SELECTIVE_ALTERNATE_MATMUL

    ref = _grads(_model(tmp_path, "off"))
    got = _grads(_alt_model(tmp_path))
    for name, g in ref.items():
        torch.testing.assert_close(got[name], g, rtol=1e-5, atol=1e-6, msg=name)
    kept_alt = _kept_bytes(_alt_model(tmp_path))
    kept = {ckpt: _kept_bytes(_model(tmp_path, ckpt)) for ckpt in ("selective", "every")}
    assert kept["every"] < kept_alt < kept["selective"]
    spec = from_config(LLAMA)
    per_layer = memory.selective_layer_bytes(spec, "fp32", "sdpa", SELECTIVE_ALTERNATE_MATMUL)
    h, kv, i, heads = 64, 2 * 16, 176, 4
    assert per_layer == 4 * (h + kv + i + h) + 4 * h + 4 * heads  # q, v, gate, down + attention + lse
    assert kept_alt - kept["every"] == pytest.approx(2 * per_layer * 4 * 64, rel=0.05)


def test_alternate_matmul_policy_counts_its_recomputed_matmuls_in_hfu(tmp_path: Path) -> None:
    sel = training_flops(_model(tmp_path, "selective"), 64, "selective")
    alt = training_flops(_alt_model(tmp_path), 64, "selective", "alternate-matmul")
    h, kv, i = 64, 2 * 16, 176
    recomputed_per_layer = h * kv + h * h + h * i  # k, o, up: the 2nd, 4th and 6th matmul
    assert alt.model == sel.model
    assert alt.hardware - sel.hardware == 2.0 * 2 * recomputed_per_layer
