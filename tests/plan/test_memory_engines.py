"""Memory modelling fixes of issue 24, each by hand: what a stack selected with ``--engine`` keeps on the GPU
(LitGPT's LoRA under FSDP, a transformers model in the user's own loop) and eager attention's backward
(traced against a real step in tests/plan/test_trace.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuplanner.plan import engines
from gpuplanner.plan import memory as mem
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import TrainSetup


def test_litgpt_lora_under_fsdp_holds_gradients_as_if_nothing_were_frozen() -> None:
    """LitGPT wraps each block (frozen weights and adapters) in one FSDP1 unit with use_orig_params=True: the
    flat gradient covers the whole block. With accumulation (no_sync) every GPU holds every block's whole
    16-bit gradient; without, the shards plus the one block being reduced."""
    spec = ms.from_preset("mistral-7b-v0.1")
    blocks = spec.layer_params * spec.num_layers
    s = TrainSetup(
        method="lora",
        precision="bf16",
        micro_batch=1,
        seq_len=1304,
        gpus=2,
        sharding="fsdp",
        grad_accum=128,
        grad_checkpointing="full",
        engine="litgpt",
    )
    accumulating = mem.estimate_memory(spec, s)
    assert accumulating.peak_moment == "start-of-backward"
    assert accumulating.gradients == 2 * blocks == 2 * 32 * 218_112_000  # 13.0 GiB for Mistral 7B
    assert accumulating.gradients / mem.GIB == pytest.approx(13.0, abs=0.01)
    # without accumulation: every block's gradient shard plus the unsharded gradient of the block being
    # reduced, against the adapters' fp32 gradient shards on a stack that wraps them apart (DeepSpeed's plan
    # differs from LitGPT's here in nothing else at the end of the backward)
    once = mem.estimate_memory(spec, replace(s, grad_accum=1))
    apart = mem.estimate_memory(spec, replace(s, grad_accum=1, engine="deepspeed"))
    trainable = mem.trainable_params(spec, s)
    assert once.end_of_backward - apart.end_of_backward == blocks + 2 * spec.layer_params - 2 * trainable
    # a stack whose adapters live apart (FSDP2 per-parameter shards) keeps adapter gradients only
    assert not engines.ENGINES["torchtune"].lora_fsdp_shared_units
    assert mem.estimate_memory(spec, replace(s, engine="torchtune")).gradients < 0.01 * blocks
    # a full fine-tune on 2 GPUs under no_sync holds the same whole 16-bit gradient, not shards on top, and
    # as the backward ends the root unit's per-parameter gradients and their flat copy (FSDP1, below)
    full = mem.estimate_memory(spec, replace(s, method="full"))
    assert full.peak_moment == "end-of-backward"
    assert full.gradients == 2 * spec.n_params + 2 * 2 * spec.root_params


def test_own_loop_takes_the_loss_on_16_bit_logits_by_hand() -> None:
    """hf-loop: nn.CrossEntropyLoss on the 16-bit logits a transformers >= 4.46 model returns without labels:
    the logits, the shifted copy and the log-softmax (forward), or the log-softmax, nll's gradient and
    log_softmax_backward's result (backward): 3 x 2 B per score, against 12 B when the Trainer upcasts."""
    spec = ms.from_preset("llama-3.1-8b")
    s = TrainSetup(method="lora", precision="bf16", micro_batch=2, seq_len=8192, grad_checkpointing="full")
    own = mem.estimate_memory(spec, replace(s, engine="hf-loop"))
    trainer = mem.estimate_memory(spec, replace(s, engine="hf-trainer"))
    scores = 2 * 8192 * spec.vocab_size
    assert own.logits == 6 * scores
    assert trainer.logits == 12 * scores
    assert own.logits / mem.GIB == pytest.approx(11.74, abs=0.01)
    assert engines.engine_named("hf-loop").loss("full") == engines.LOSS_HALF


def test_eager_attention_backward_holds_the_upcast_gradient_by_hand() -> None:
    """Llama-style eager attention (softmax in fp32 over 16-bit scores): the recomputed block's saved scores
    (fp32 softmax output and its 16-bit copy: 6 B) and, in the softmax's backward, the incoming 16-bit
    gradient and its fp32 upcast (6 B) per score."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 128,
        "vocab_size": 256,
        "tie_word_embeddings": False,
    }
    spec = ms.from_config(cfg)
    s = TrainSetup(precision="bf16", micro_batch=2, seq_len=512, grad_checkpointing="full", optimizer="adamw-fused")
    eager = mem.estimate_memory(spec, replace(s, attention="eager"))
    sdpa = mem.estimate_memory(spec, s)
    scores = 2 * 8 * 512 * 512
    # eager adds the recomputed block's saved scores (6 B) and replaces the MLP's gradient buffers (three
    # 16-bit intermediate-wide tensors per token) by the softmax's (6 B per score)
    mlp_grad = 3 * 128 * 2 * 2 * 512
    assert eager.start_of_backward - sdpa.start_of_backward == 6 * scores + 6 * scores - mlp_grad


def test_sharded_qlora_keeps_16_bit_activations_by_hand() -> None:
    """QLoRA under FSDP / ZeRO-3 is never prepared with peft's prepare_model_for_kbit_training (TRL's
    SFTTrainer skips it for sharded QLoRA; Answer.AI's fsdp_qlora never calls it), so the norms stay 16 bit
    and so does the residual stream each checkpointed block keeps: half of what a one-GPU QLoRA keeps in fp32,
    the same as LoRA's."""
    spec = ms.from_preset("llama-3.1-8b")
    s = TrainSetup(
        method="qlora",
        precision="bf16",
        micro_batch=4,
        seq_len=2048,
        gpus=2,
        sharding="fsdp",
        grad_checkpointing="full",
        engine="hf-trainer",
        lora_rank=64,
    )
    sharded = mem.estimate_memory(spec, s)
    single = mem.estimate_memory(spec, replace(s, gpus=1, sharding="ddp"))
    lora = mem.estimate_memory(spec, replace(s, method="lora"))
    tokens = 4 * 2048
    kept_16 = spec.num_layers * 2 * spec.hidden_size * tokens  # each block's 16-bit input
    assert sharded.peak_moment == single.peak_moment == "start-of-backward"
    assert sharded.activations == lora.activations
    assert single.activations - sharded.activations == pytest.approx(kept_16, rel=0.05)
    assert single.activations == pytest.approx(2 * sharded.activations, rel=0.01)


def test_fsdp1_root_unit_gradients_at_the_end_of_backward_by_hand(monkeypatch) -> None:
    """FSDP1 (LitGPT, accelerate) makes each parameter's gradient, then their flat concatenation: the root
    unit's (embeddings, untied head, final norm) are alive twice as the backward ends. LitGPT's gemma-2b full
    fine-tune on 4 A10G (published 16.23 GiB allocated, tests/data/published/memory.csv) is that moment."""
    models = json.loads((Path(__file__).parents[1] / "data" / "published" / "models.json").read_text())
    spec = ms.from_config({k: v for k, v in models["gemma-2b"].items() if not k.startswith("_")}, "gemma-2b")
    s = TrainSetup(
        method="full",
        precision="bf16",
        micro_batch=1,
        grad_accum=4,
        seq_len=512,
        gpus=4,
        sharding="fsdp",
        grad_checkpointing="full",
        engine="litgpt",
    )
    flat = mem.estimate_memory(spec, s)
    monkeypatch.setitem(engines.ENGINES, "litgpt", replace(engines.ENGINES["litgpt"], fsdp_flat_params=False))
    per_param = mem.estimate_memory(spec, s)
    root = engines.as_run(spec, engines.ENGINES["litgpt"]).root_params  # with LitGPT's own head
    assert flat.end_of_backward - per_param.end_of_backward == 2 * 2 * root
    assert flat.peak_moment == "end-of-backward"
    assert flat.allocated / mem.GIB == pytest.approx(17.43e9 / mem.GIB, rel=0.02)
    assert not engines.ENGINES["torchtitan"].fsdp_flat_params and not engines.ENGINES["bundled"].fsdp_flat_params


def test_fsdp_optimizer_step_sees_weight_shards_only_by_hand() -> None:
    """Every FSDP unit is resharded after its backward (FSDP1's root too), so at the optimizer step no
    gathered unit is alive: fp32 weight, gradient and two state shards plus foreach AdamW's buffer shard."""
    spec = ms.from_preset("llama-3.1-8b")
    n = spec.n_params
    s = TrainSetup(precision="bf16-mixed", optimizer="adamw", micro_batch=1, seq_len=512, gpus=8, sharding="fsdp")
    b = mem.estimate_memory(spec, s)
    shard = -(-4 * n // 8)
    assert b.optimizer_step == 3 * shard + -(-8 * n // 8)
    assert b.peak_moment == "optimizer-step"
    assert b.weights == b.gradients == shard  # no gathered unit, no block's unsharded gradient
