"""The block layout of mixture-of-experts and multi-head latent attention decoders, from a ``config.json``.

Mixture-of-experts (MoE) models keep every expert's weights (what memory must hold) but send each
token through only ``experts_per_token`` of them (what the matmuls cost). This module reads the
three config dialects transformers uses and lists every linear of one kind of layer as plain tuples
``(path, in_features, out_features, bias, count)``; :mod:`gpuplanner.plan.model_spec` turns them into
``LinearModule`` objects and counts total and active parameters from them.

- Mixtral (``mixtral``): ``num_local_experts`` experts ``block_sparse_moe.experts.w1/w3/w2`` of
  ``intermediate_size``, router ``block_sparse_moe.gate``; every layer is an MoE layer.
- Qwen-MoE (``qwen2_moe``, ``qwen3_moe``): ``num_experts`` experts ``mlp.experts.gate/up/down_proj``
  of ``moe_intermediate_size``, router ``mlp.gate``; Qwen2-MoE adds one always-on
  ``mlp.shared_expert`` of ``shared_expert_intermediate_size`` and its one-output
  ``mlp.shared_expert_gate``. Layers in ``mlp_only_layers``, and all but every
  ``decoder_sparse_step``-th, keep a dense MLP of ``intermediate_size``.
- DeepSeek (``deepseek_v2``, ``deepseek_v3``): ``n_routed_experts`` experts of
  ``moe_intermediate_size`` plus ``n_shared_experts`` always-on experts (one MLP of
  ``n_shared_experts x moe_intermediate_size``), router ``mlp.gate``; the first
  ``first_k_dense_replace`` layers, and all but every ``moe_layer_freq``-th after them, are dense.
  DeepSeek's multi-head latent attention (``kv_lora_rank``) projects keys and values through a
  low-rank latent (and queries too when ``q_lora_rank`` is set).

Pure Python, standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplanner.plan.setup import PlanInputError

Linear = tuple[str, int, int, bool, int]  # path, in_features, out_features, bias, count
PosInt = Callable[..., int]

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


@dataclass(frozen=True)
class MoeLayout:
    """How many layers are MoE, and what one token visits in them."""

    num_experts: int
    experts_per_token: int
    moe_layers: int
    dense_layers: int
    mlp: tuple[Linear, ...]  # every MLP linear of the model (dense layers, experts, shared experts, routers)
    expert_params: int  # weights of one routed expert (all its linears, one layer)
    active_intermediate: int  # MLP width a token passes through in an MoE layer (k experts + shared)


def is_moe(cfg: Mapping[str, Any]) -> bool:
    return any(cfg.get(key) for key in ("num_local_experts", "num_experts", "n_routed_experts"))


def _count_moe_layers(layers: int, first_dense: int, step: int, dense_listed: set[int]) -> int:
    return sum(1 for i in range(layers) if i >= first_dense and (i + 1) % step == 0 and i not in dense_listed)


def moe_layout(cfg: Mapping[str, Any], model_type: str, h: int, layers: int, inter: int, pos_int: PosInt) -> MoeLayout:
    """The MLP side of an MoE config; raises :class:`PlanInputError` naming a field that cannot be."""
    experts = pos_int(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    k = pos_int(cfg, "num_experts_per_tok", default=2)
    if k > experts:
        raise PlanInputError(
            "model-config", f"num_experts_per_tok ({k}) must not exceed the number of experts ({experts})"
        )
    gated = ("gate_proj", "up_proj", "down_proj")
    if model_type == "mixtral" or cfg.get("num_local_experts"):
        mi, shared_inter, moe_layers = inter, 0, layers
        names, prefix, router = ("w1", "w3", "w2"), "block_sparse_moe", "block_sparse_moe.gate"
    elif cfg.get("n_routed_experts"):  # DeepSeek
        mi = pos_int(cfg, "moe_intermediate_size")
        shared_inter = mi * int(cfg.get("n_shared_experts") or 0)
        first = int(cfg.get("first_k_dense_replace") or 0)
        if not 0 <= first <= layers:
            raise PlanInputError("model-config", f"first_k_dense_replace must be from 0 to {layers}, got {first!r}")
        moe_layers = _count_moe_layers(layers, first, pos_int(cfg, "moe_layer_freq", default=1), set())
        names, prefix, router = gated, "mlp", "mlp.gate"
    else:  # Qwen-MoE
        mi = pos_int(cfg, "moe_intermediate_size", default=inter)
        shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
        listed = cfg.get("mlp_only_layers") or []
        if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise PlanInputError("model-config", "mlp_only_layers must be a list of layer numbers")
        step = pos_int(cfg, "decoder_sparse_step", default=1)
        moe_layers = _count_moe_layers(layers, 0, step, set(listed))
        names, prefix, router = gated, "mlp", "mlp.gate"
    dense = layers - moe_layers
    mlp: list[Linear] = []
    if dense:
        mlp += [("mlp.gate_proj", h, inter, False, dense), ("mlp.up_proj", h, inter, False, dense)]
        mlp += [("mlp.down_proj", inter, h, False, dense)]
    if moe_layers:
        n = moe_layers * experts
        first_up, second_up, down = names  # two h -> mi projections, then mi -> h
        mlp += [
            (f"{prefix}.experts.{first_up}", h, mi, False, n),
            (f"{prefix}.experts.{second_up}", h, mi, False, n),
            (f"{prefix}.experts.{down}", mi, h, False, n),
            (router, h, experts, False, moe_layers),
        ]
        if shared_inter:
            shared = "mlp.shared_experts" if cfg.get("n_routed_experts") else "mlp.shared_expert"
            mlp += [
                (f"{shared}.gate_proj", h, shared_inter, False, moe_layers),
                (f"{shared}.up_proj", h, shared_inter, False, moe_layers),
                (f"{shared}.down_proj", shared_inter, h, False, moe_layers),
            ]
            if not cfg.get("n_routed_experts"):
                mlp.append(("mlp.shared_expert_gate", h, 1, False, moe_layers))
    return MoeLayout(
        num_experts=experts,
        experts_per_token=k,
        moe_layers=moe_layers,
        dense_layers=dense,
        mlp=tuple(mlp),
        expert_params=3 * h * mi,
        active_intermediate=k * mi + shared_inter if moe_layers else inter,
    )


def latent_attention(
    cfg: Mapping[str, Any], h: int, heads: int, layers: int, pos_int: PosInt
) -> tuple[list[Linear], int, int]:
    """DeepSeek's multi-head latent attention: (linears, norm parameters per layer, value head dim)."""
    kv_rank = pos_int(cfg, "kv_lora_rank")
    nope = pos_int(cfg, "qk_nope_head_dim")
    rope = pos_int(cfg, "qk_rope_head_dim")
    v_dim = pos_int(cfg, "v_head_dim")
    bias = bool(cfg.get("attention_bias") or False)
    q_head = nope + rope
    mods: list[Linear] = []
    norms = kv_rank
    q_rank = cfg.get("q_lora_rank")
    if q_rank:
        q_rank = pos_int(cfg, "q_lora_rank")
        mods += [
            ("self_attn.q_a_proj", h, q_rank, bias, layers),
            ("self_attn.q_b_proj", q_rank, heads * q_head, False, layers),
        ]
        norms += q_rank
    else:
        mods.append(("self_attn.q_proj", h, heads * q_head, False, layers))
    mods += [
        ("self_attn.kv_a_proj_with_mqa", h, kv_rank + rope, bias, layers),
        ("self_attn.kv_b_proj", kv_rank, heads * (nope + v_dim), False, layers),
        ("self_attn.o_proj", heads * v_dim, h, bias, layers),
    ]
    return mods, norms, v_dim
