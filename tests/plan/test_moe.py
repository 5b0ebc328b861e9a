"""Mixture-of-experts configs: total parameters for memory, active parameters for FLOPs.

The published sizes are hand-computed below from each model's config.json; the tiny configs are
checked against the models transformers builds from them.
"""

from __future__ import annotations

import pytest

from gpuplanner.plan import memory as mem
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.step_model import matmul_params
from gpuplanner.plan.throughput import flops_per_token

# mistralai/Mixtral-8x7B-v0.1 config.json
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
# Qwen/Qwen1.5-MoE-A2.7B config.json
QWEN_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
# deepseek-ai/DeepSeek-V2-Lite config.json
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 27,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 102400,
    "tie_word_embeddings": False,
}


def test_mixtral_total_and_active_by_hand() -> None:
    spec = ms.from_config(MIXTRAL_8X7B)
    attention = 4096 * 4096 * 2 + 4096 * 1024 * 2  # q, o; k, v (8 KV heads)
    expert = 3 * 4096 * 14336  # w1, w3, w2
    router, norms = 4096 * 8, 2 * 4096
    embeddings = 2 * 32000 * 4096  # untied input and output
    total = 32 * (attention + 8 * expert + router + norms) + embeddings + 4096
    active = 32 * (attention + 2 * expert + router + norms) + embeddings + 4096
    assert (spec.n_params, spec.active_params) == (total, active) == (46_702_792_704, 12_879_925_248)
    assert (spec.num_experts, spec.experts_per_token) == (8, 2)
    assert spec.intermediate_size == 2 * 14336  # what one token passes through
    assert spec.quantizable_params == 32 * (attention + 8 * expert + router)


def test_qwen_moe_total_and_active_by_hand() -> None:
    spec = ms.from_config(QWEN_MOE_A27B)
    attention = 3 * (2048 * 2048 + 2048) + 2048 * 2048  # q, k, v with bias; o
    expert = 3 * 2048 * 1408
    shared = 3 * 2048 * 5632 + 2048  # the always-on expert and its one-output gate
    router, norms = 2048 * 60, 2 * 2048
    embeddings = 2 * 151936 * 2048
    total = 24 * (attention + 60 * expert + shared + router + norms) + embeddings + 2048
    active = 24 * (attention + 4 * expert + shared + router + norms) + embeddings + 2048
    assert (spec.n_params, spec.active_params) == (total, active) == (14_315_784_192, 2_689_173_504)
    assert spec.intermediate_size == 4 * 1408 + 5632


def test_deepseek_latent_attention_and_shared_experts_by_hand() -> None:
    spec = ms.from_config(DEEPSEEK_V2_LITE)
    # q_proj to 16 x (128 + 64), the latent kv_a (512 + 64) with its norm, kv_b to 16 x (128 + 128), o
    attention = 2048 * 3072 + 2048 * 576 + 512 + 512 * 4096 + 2048 * 2048
    expert = 3 * 2048 * 1408
    shared = 3 * 2048 * 2 * 1408  # two shared experts as one MLP
    router, norms = 64 * 2048, 2 * 2048
    dense = attention + 3 * 2048 * 10944 + norms  # first_k_dense_replace = 1
    embeddings = 2 * 102400 * 2048
    total = dense + 26 * (attention + 64 * expert + shared + router + norms) + embeddings + 2048
    active = dense + 26 * (attention + 6 * expert + shared + router + norms) + embeddings + 2048
    assert (spec.n_params, spec.active_params) == (total, active) == (15_706_484_224, 2_661_150_208)


def test_flops_count_active_parameters_and_memory_total() -> None:
    spec = ms.from_config(MIXTRAL_8X7B)
    setup = TrainSetup(precision="bf16", seq_len=1024, grad_checkpointing="none", optimizer="adamw-fused")
    # matmuls: everything a token uses but the input embedding lookup
    assert matmul_params(spec) == spec.active_params - 32000 * 4096
    attention = 4.0 * 32 * 1024 * 32 * 128 * 3.0
    assert flops_per_token(spec, setup, spec.n_params) == pytest.approx(6.0 * matmul_params(spec) + attention)
    # memory holds every expert: pure bf16 weights, grads and two AdamW states = 8 bytes per parameter
    b = mem.estimate_memory(spec, setup)
    assert b.weights + b.gradients + b.optimizer == 8 * spec.n_params
    # a dense model of the active size would need far less: the plan must not treat MoE as dense
    assert b.total > 3 * 8 * spec.active_params


def test_dense_models_are_unchanged() -> None:
    spec = ms.from_preset("llama-3.1-8b")
    assert spec.active_params == spec.n_params and spec.num_experts == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"num_local_experts": 0}, "num_local_experts"),
        ({"num_local_experts": "8"}, "num_local_experts"),
    ],
)
def test_impossible_moe_configs_get_one_clear_line(change: dict, field: str) -> None:
    with pytest.raises(PlanInputError) as err:
        ms.from_config({**MIXTRAL_8X7B, **change})
    assert field in err.value.message


def test_first_dense_layers_must_be_a_count() -> None:
    with pytest.raises(PlanInputError) as err:
        ms.from_config({**DEEPSEEK_V2_LITE, "first_k_dense_replace": -1})
    assert "first_k_dense_replace" in err.value.message


TINY_MOE = {
    "mixtral": {
        **MIXTRAL_8X7B,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "num_local_experts": 4,
        "vocab_size": 300,
    },
    "qwen2_moe": {
        **QWEN_MOE_A27B,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 96,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 3,
        "mlp_only_layers": [1],
        "vocab_size": 300,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "tie_word_embeddings": False,
    },
    "deepseek_v2": {
        **DEEPSEEK_V2_LITE,
        "hidden_size": 64,
        "intermediate_size": 160,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 3,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "v_head_dim": 8,
        "vocab_size": 300,
    },
}


@pytest.mark.parametrize("key", sorted(TINY_MOE))
def test_tiny_moe_parameter_count_matches_transformers(key: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(TINY_MOE[key])
    spec = ms.from_config(cfg)
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config = transformers.AutoConfig.for_model(cfg["model_type"], **kwargs)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert spec.n_params == sum(p.numel() for p in model.parameters())
    assert spec.active_params < spec.n_params


def test_plan_of_a_moe_config_end_to_end(tmp_path, capsys) -> None:
    """`plan --model-config` on Mixtral's config: the report names total and active parameters, the
    JSON carries them, memory holds every expert and the speed counts only the active ones."""
    import json

    from gpuplanner.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_8X7B))
    args = ["plan", "--model-config", str(path), "--gpu", "H100 SXM", "--gpus", "8", "--sharding", "fsdp"]
    assert main([*args, "--method", "full", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "46.70B params, 12.88B active: 2 of 8 experts per token" in out
    assert main([*args, "--method", "full", "--precision", "bf16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    inputs = doc["inputs"]
    assert (inputs["params"], inputs["active_params"]) == (46_702_792_704, 12_879_925_248)
    assert (inputs["experts"], inputs["experts_per_token"]) == (8, 2)
    # bf16 weights of all 46.7B parameters sharded 8 ways (plus the gathered units)
    assert doc["memory"]["weights_gib"] >= 2 * 46_702_792_704 / 8 / 1024**3
    # MFU counts the model FLOPs of the active parameters: a dense 46.7B model at the same speed
    # would report 46.7 / 12.9 times the MFU, far above 1 for any sane speed
    throughput = doc["throughput"]
    assert 0.05 < throughput["mfu"] < 0.8
