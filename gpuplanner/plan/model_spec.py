"""What a model is, as far as memory and compute planning need it.

A :class:`ModelSpec` comes from a shipped preset (``resources/models/presets.json``), from a Hugging
Face ``config.json``, or from a bare parameter count. Every module whose parameters the memory model
needs is listed with its shape (``ModelSpec.linears``), so LoRA adapter sizes and QLoRA's quantized
share are exact, and the parameter count matches ``sum(p.numel() for p in model.parameters())`` of the
model transformers builds from the same config.

Which Hugging Face class a config counts as:
- ``gpt2``: ``GPT2LMHeadModel`` (head tied to ``wte``, so the same count as ``GPT2Model``).
- ``bert``: the first of ``architectures`` that we know; ``BertForMaskedLM`` (the presets; no pooler,
  MLM transform + tied decoder + decoder bias), ``BertForSequenceClassification`` (pooler +
  classifier of ``num_labels``), otherwise ``BertModel`` (with pooler).
- ``llama`` family (llama, mistral, qwen2, qwen3, gemma, gemma2 and look-alikes): ``*ForCausalLM``.

Pure Python, standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuplanner.plan.moe_layout import MOE_TYPES, is_moe, latent_attention, moe_layout
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.resources import resource_path
from trainer.protocol import config_model_name

# HF model types that share the Llama decoder layout (pre-norm RMSNorm, rotary, gated MLP).
LLAMA_LIKE = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "granite",
    *MOE_TYPES,
)

# bitsandbytes 8-bit optimizers keep 32-bit state for tensors below this many elements
# (``min_8bit_size=4096`` in bnb.optim.Optimizer8bit).
BNB_MIN_8BIT_SIZE = 4096


@dataclass(frozen=True)
class LinearModule:
    """One linear (or GPT-2 ``Conv1D``) module; ``count`` is how many the model has (per-layer ones x layers).

    ``path`` is the module's name below the layer (``self_attn.q_proj``) or below the model for the
    ones outside the blocks (``lm_head``). ``in_block`` is True for the decoder/encoder blocks' linears
    (what bitsandbytes quantizes for QLoRA and what peft's ``all-linear`` targets).
    """

    path: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    in_block: bool = True
    is_output: bool = False  # the output embedding (peft's all-linear leaves it out)
    tied: bool = False  # weight shared with the input embedding (counted there)

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    n_params: int
    source: str
    model_type: str = "llama"
    architecture: str = ""
    activation: str = "silu"
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm"
    norms_per_layer: int = 2
    qk_norm: bool = False
    attn_bias: bool = False
    max_positions: int = 0
    # dropout probabilities that matter for saved masks (GPT-2 / BERT)
    resid_dropout: float = 0.0
    attn_dropout: float = 0.0
    logit_softcap: bool = False
    # Gemma 2 soft-caps the attention scores too (tanh), which keeps one more score-sized tensor
    # under eager attention
    attn_softcap: bool = False
    linears: tuple[LinearModule, ...] = ()
    # parameter tensors, for exact optimizer bookkeeping:
    # (numel, rows, cols) per tensor kind, with a count; rows/cols 0 for 1-D tensors
    tensors: tuple[tuple[int, int, int, int], ...] = ()
    hf_config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # mixture of experts: every expert's weights are held (n_params), each token passes through
    # experts_per_token of them (n_active_params; 0 for a dense model, where it equals n_params)
    num_experts: int = 0
    experts_per_token: int = 0
    n_active_params: int = 0

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass uses: all of them for a dense model."""
        return self.n_active_params or self.n_params

    # --- precomputed aggregates (cheap properties for the estimator) ---
    @property
    def layer_params(self) -> int:
        """Parameters of one block (what FSDP gathers per wrapped layer)."""
        return _derived(self)["layer_params"]

    @property
    def root_params(self) -> int:
        """Parameters outside the blocks (embeddings, head, final norm)."""
        return max(0, self.n_params - self.num_layers * self.layer_params)

    @property
    def quantizable_params(self) -> int:
        """Weights of the block linears: what QLoRA stores in 4 bit."""
        return _derived(self)["quantizable"]

    @property
    def n_tensors(self) -> int:
        return _derived(self)["n_tensors"]

    @property
    def small_tensor_params(self) -> int:
        """Parameters in tensors under bitsandbytes' 8-bit threshold (kept with 32-bit state)."""
        return _derived(self)["small_params"]

    @property
    def adafactor_state_elems(self) -> int:
        """Elements of Adafactor's factored second moment: rows+cols per matrix, numel per vector."""
        return _derived(self)["adafactor"]

    @property
    def largest_tensor(self) -> int:
        return _derived(self)["largest"]

    @property
    def block_linear_params(self) -> int:
        return _derived(self)["block_linear"]


@lru_cache(maxsize=512)
def _derived(spec: ModelSpec) -> dict[str, int]:
    quant = sum(m.weight_params * m.count for m in spec.linears if m.in_block)
    # one block's share of the block linears (a dense model has count == layers for each)
    layer_lin = sum(
        (m.weight_params + (m.out_features if m.bias else 0)) * m.count for m in spec.linears if m.in_block
    ) // max(1, spec.num_layers)
    layer_other = _layer_norm_params(spec)
    n_tensors = sum(c for _, _, _, c in spec.tensors)
    small = sum(n * c for n, _, _, c in spec.tensors if n < BNB_MIN_8BIT_SIZE)
    ada = sum(((r + k) if r and k else n) * c for n, r, k, c in spec.tensors)
    largest = max((n for n, _, _, _ in spec.tensors), default=spec.n_params)
    return {
        "layer_params": layer_lin + layer_other,
        "quantizable": min(quant, spec.n_params),
        "n_tensors": n_tensors,
        "small_params": small,
        "adafactor": ada,
        "largest": largest,
        "block_linear": quant,
    }


def _layer_norm_params(spec: ModelSpec) -> int:
    h = spec.hidden_size
    if spec.norm == "layernorm":
        return spec.norms_per_layer * 2 * h
    return spec.norms_per_layer * h + (2 * spec.head_dim if spec.qk_norm else 0)


# --------------------------------------------------------------------------------------------------
# Building specs from configs
# --------------------------------------------------------------------------------------------------


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    text = cfg.get("text_config")
    if isinstance(text, Mapping):
        for key in keys:
            if key in text and text[key] is not None:
                return text[key]
    if default is not None:
        return default
    raise PlanInputError("model-config", f"config has no {' / '.join(keys)}")


def _pos_int(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> int:
    value = _get(cfg, *keys, default=default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or int(value) != value
        or value < 1
    ):
        raise PlanInputError("model-config", f"{keys[0]} must be a positive whole number, got {_shown(value)}")
    return int(value)


# --------------------------------------------------------------------------------------------------
# What a config.json may hold: every field the spec reads, with limits no real model comes near
# (the largest dense models have ~130 layers, hidden 25,600, vocabularies of 262,144 and contexts of
# 10M tokens). Anything else in the file is ignored.
# --------------------------------------------------------------------------------------------------

_INT_LIMITS: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 1 << 17),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), 4096),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "num_key_value_heads"), 4096),
    "head_dim": 1 << 14,
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner"), 1 << 21),
    "vocab_size": 1 << 23,
    **dict.fromkeys(("max_position_embeddings", "n_positions"), 1 << 27),
    "type_vocab_size": 1 << 16,
    "num_labels": 1 << 20,
    # mixture of experts and latent attention (see moe_layout.py)
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), 1 << 16),
    **dict.fromkeys(("num_experts_per_tok", "n_shared_experts"), 1 << 12),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size"), 1 << 21),
    **dict.fromkeys(("moe_layer_freq", "decoder_sparse_step"), 4096),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), 1 << 17),
}
_PROBABILITIES = ("resid_pdrop", "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob")
_BOOLS = ("tie_word_embeddings", "attention_bias", "mlp_bias")
_STRINGS = ("model_type", "hidden_act", "hidden_activation", "activation_function", "_name_or_path", "name")
MAX_STRING = 512
MAX_PARAMS = 10**14  # 100T parameters: 50x the largest models trained
MAX_SYNTH_PARAMS = 10**13  # --params: the Llama-like shapes made up for a bare count stay within the limits


def _opt(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    """A field's value, or ``default`` when it is missing or null (a checked field, see check_config)."""
    value = cfg.get(key)
    return default if value is None else value


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else f"a JSON {type(value).__name__}"
    return text if len(text) <= 40 else text[:40] + "..."


def _bad(field: str, message: str) -> PlanInputError:
    return PlanInputError("model-config", f"field {field}: {message}")


def check_config(cfg: Any, where: str = "") -> None:
    """Raise :class:`PlanInputError` naming the first field of a config dict (and ``text_config``) that
    holds what no real model has: a wrong type, NaN/infinity, or a number beyond the limits above."""
    if not isinstance(cfg, Mapping):
        raise PlanInputError("model-config", "the config must be a JSON object")
    for key, limit in _INT_LIMITS.items():
        value = cfg.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or int(value) != value or not 1 <= value <= limit:
            raise _bad(where + key, f"must be a whole number from 1 to {limit:,}, got {_shown(value)}")
    for key in _PROBABILITIES:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _bad(where + key, f"must be a probability from 0 to 1, got {_shown(value)}")
    for key in _BOOLS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise _bad(where + key, f"must be true or false, got {_shown(value)}")
    for key in _STRINGS:
        value = cfg.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_STRING):
            raise _bad(where + key, f"must be a string of at most {MAX_STRING} characters, got {_shown(value)}")
    first_dense = cfg.get("first_k_dense_replace")
    if first_dense is not None and (
        isinstance(first_dense, bool) or not isinstance(first_dense, int) or not 0 <= first_dense <= 4096
    ):
        raise _bad(
            where + "first_k_dense_replace", f"must be a whole number from 0 to 4,096, got {_shown(first_dense)}"
        )
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        soft = cfg.get(key)
        if soft is not None and (
            isinstance(soft, bool) or not isinstance(soft, (int, float)) or not 0 <= soft < math.inf
        ):
            raise _bad(where + key, f"must be a finite number, 0 or more, got {_shown(soft)}")
    archs = cfg.get("architectures")
    if archs is not None and (
        not isinstance(archs, list)
        or len(archs) > 64
        or not all(isinstance(a, str) and len(a) <= MAX_STRING for a in archs)
    ):
        raise _bad(where + "architectures", f"must be a list of class names, got {_shown(archs)}")
    labels = cfg.get("id2label")
    if labels is not None and (not isinstance(labels, Mapping) or len(labels) > _INT_LIMITS["num_labels"]):
        raise _bad(where + "id2label", f"must be an object of at most {_INT_LIMITS['num_labels']:,} labels")
    text = cfg.get("text_config")
    if text is not None:
        if not isinstance(text, Mapping):
            raise _bad(where + "text_config", f"must be a JSON object, got {_shown(text)}")
        if not where:
            check_config(text, "text_config.")


def _family_of(model_type: str) -> str:
    if model_type == "gpt2":
        return "gpt2"
    if model_type == "bert":
        return "bert"
    if model_type in LLAMA_LIKE:
        return "llama"
    return "generic"


def from_config(cfg: Mapping[str, Any], name: str | None = None, *, source: str = "config") -> ModelSpec:
    """Spec from a Hugging Face ``config.json`` dict; unknown model types are read as Llama-like."""
    check_config(cfg)
    if isinstance(cfg.get("text_config"), Mapping) and "hidden_size" not in cfg:
        merged = dict(cfg["text_config"])
        cfg = merged
    model_type = str(cfg.get("model_type") or "llama").lower()
    family = _family_of(model_type)
    label = name or str(cfg.get("_name_or_path") or cfg.get("name") or model_type)
    if family == "gpt2":
        spec = _gpt2(cfg, label, source)
    elif family == "bert":
        spec = _bert(cfg, label, source)
    else:
        spec = _llama(cfg, label, source, family, model_type)
    if spec.n_params > MAX_PARAMS:
        raise PlanInputError(
            "model-config",
            f"the config describes {spec.n_params:.3g} parameters, more than any real model ({MAX_PARAMS:.0e})",
        )
    return spec


def _tensor_list(items: list[tuple[int, int, int]]) -> tuple[tuple[int, int, int, int], ...]:
    counts: dict[tuple[int, int, int], int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return tuple((n, r, k, c) for (n, r, k), c in counts.items())


def _linear_tensors(mods: list[LinearModule], layers: int) -> list[tuple[int, int, int]]:
    out = []
    for m in mods:
        reps = m.count if not m.in_block else 1
        for _ in range(reps if not m.tied else 0):
            out.append((m.weight_params, m.out_features, m.in_features))
            if m.bias:
                out.append((m.out_features, 0, 0))
    return out


def _llama(cfg: Mapping[str, Any], label: str, source: str, family: str, model_type: str) -> ModelSpec:
    h = _pos_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _pos_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _pos_int(cfg, "num_attention_heads", "n_head", "num_heads")
    kv = _pos_int(cfg, "num_key_value_heads", default=heads)
    hd_raw = cfg.get("head_dim")
    hd = int(hd_raw) if isinstance(hd_raw, (int, float)) and not isinstance(hd_raw, bool) and hd_raw > 0 else h // heads
    if hd < 1:
        raise PlanInputError("model-config", "hidden_size must be at least num_attention_heads")
    inter = _pos_int(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * h)
    vocab = _pos_int(cfg, "vocab_size")
    tied = bool(_opt(cfg, "tie_word_embeddings", model_type.startswith("gemma")))
    attn_bias = bool(_opt(cfg, "attention_bias", False)) or model_type in ("qwen2", "qwen2_moe")
    o_bias = bool(_opt(cfg, "attention_bias", False))
    mlp_bias = bool(_opt(cfg, "mlp_bias", False))
    gemma2 = model_type in ("gemma2", "gemma3_text")
    qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2")
    norms = 4 if gemma2 else 2
    act = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu")
    q, kvd = heads * hd, kv * hd
    L = layers
    latent_norms = 0
    if cfg.get("kv_lora_rank"):  # DeepSeek's multi-head latent attention
        raw, latent_norms, hd = latent_attention(cfg, h, heads, L, _pos_int)
        attention = [LinearModule(*m) for m in raw]
        kv = heads  # keys and values are expanded per head from the latent
    else:
        attention = [
            LinearModule("self_attn.q_proj", h, q, attn_bias, L),
            LinearModule("self_attn.k_proj", h, kvd, attn_bias, L),
            LinearModule("self_attn.v_proj", h, kvd, attn_bias, L),
            LinearModule("self_attn.o_proj", q, h, o_bias, L),
        ]
    moe = moe_layout(cfg, model_type, h, L, inter, _pos_int) if is_moe(cfg) else None
    if moe is None:
        mlp = [
            LinearModule("mlp.gate_proj", h, inter, mlp_bias, L),
            LinearModule("mlp.up_proj", h, inter, mlp_bias, L),
            LinearModule("mlp.down_proj", inter, h, mlp_bias, L),
        ]
    else:
        mlp = [LinearModule(*m) for m in moe.mlp]
    head = LinearModule("lm_head", h, vocab, False, 1, in_block=False, is_output=True, tied=tied)
    block_mods = attention + mlp
    mods = [*block_mods, head]
    norm_w = h
    if model_type == "olmo2":  # OLMo 2 normalizes the full q/k projections
        qk_extra = q + kvd
    else:
        qk_extra = 2 * hd if qk_norm else 0
    block_linear = sum((m.weight_params + (m.out_features if m.bias else 0)) * m.count for m in block_mods)
    layer_norms = norms * norm_w + qk_extra + latent_norms
    n = vocab * h + block_linear + L * layer_norms + h + (0 if tied else vocab * h)
    active = 0
    if moe is not None:
        idle = moe.moe_layers * (moe.num_experts - moe.experts_per_token) * moe.expert_params
        active = n - idle
        inter = moe.active_intermediate  # the MLP width one token passes through (activations, element-wise work)
    counts: dict[tuple[int, int, int], int] = {(vocab * h, vocab, h): 1, (h, 0, 0): 1}

    def add(item: tuple[int, int, int], times: int) -> None:
        counts[item] = counts.get(item, 0) + times

    for m in block_mods:
        add((m.weight_params, m.out_features, m.in_features), m.count)
        if m.bias:
            add((m.out_features, 0, 0), m.count)
    add((h, 0, 0), norms * L)
    if qk_extra:
        add((qk_extra // 2, 0, 0), 2 * L)
    if latent_norms:
        add((latent_norms, 0, 0), L)
    for item in _linear_tensors([head], L):
        add(item, 1)
    tensor_counts = tuple((a, b, c, k) for (a, b, c), k in counts.items())
    spec = ModelSpec(
        name=label,
        family=family,
        hidden_size=h,
        num_layers=L,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        intermediate_size=inter,
        vocab_size=vocab,
        tied_embeddings=tied,
        n_params=n,
        source=source,
        model_type=model_type,
        architecture=_arch(cfg),
        activation=act,
        norm="rmsnorm",
        norms_per_layer=norms,
        qk_norm=bool(qk_extra),
        attn_bias=attn_bias,
        max_positions=int(cfg.get("max_position_embeddings") or 0),
        logit_softcap=bool(cfg.get("final_logit_softcapping")),
        attn_softcap=bool(cfg.get("attn_logit_softcapping")),
        linears=tuple(mods),
        tensors=tensor_counts,
        hf_config=dict(cfg),
        num_experts=moe.num_experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        n_active_params=active,
    )
    return spec


def _arch(cfg: Mapping[str, Any]) -> str:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return ""


def _gpt2(cfg: Mapping[str, Any], label: str, source: str) -> ModelSpec:
    h = _pos_int(cfg, "n_embd", "hidden_size")
    L = _pos_int(cfg, "n_layer", "num_hidden_layers")
    heads = _pos_int(cfg, "n_head", "num_attention_heads")
    inter = _pos_int(cfg, "n_inner", default=4 * h)
    vocab = _pos_int(cfg, "vocab_size")
    pos = _pos_int(cfg, "n_positions", "max_position_embeddings", default=1024)
    mods = [
        LinearModule("attn.c_attn", h, 3 * h, True, L),
        LinearModule("attn.c_proj", h, h, True, L),
        LinearModule("mlp.c_fc", h, inter, True, L),
        LinearModule("mlp.c_proj", inter, h, True, L),
        LinearModule("lm_head", h, vocab, False, 1, in_block=False, is_output=True, tied=True),
    ]
    per_layer = sum(m.weight_params + m.out_features for m in mods[:4]) + 2 * 2 * h
    n = vocab * h + pos * h + L * per_layer + 2 * h
    block = [(h, 0, 0)] * 4 + [(m.weight_params, m.in_features, m.out_features) for m in mods[:4]]
    block += [(m.out_features, 0, 0) for m in mods[:4]]
    tensors = [(vocab * h, vocab, h), (pos * h, pos, h), (h, 0, 0), (h, 0, 0)] + block * L
    return ModelSpec(
        name=label,
        family="gpt2",
        hidden_size=h,
        num_layers=L,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=h // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        tied_embeddings=True,
        n_params=n,
        source=source,
        model_type="gpt2",
        architecture=_arch(cfg) or "GPT2LMHeadModel",
        activation=str(_opt(cfg, "activation_function", "gelu_new")),
        norm="layernorm",
        norms_per_layer=2,
        attn_bias=True,
        max_positions=pos,
        resid_dropout=float(_opt(cfg, "resid_pdrop", 0.1)),
        attn_dropout=float(_opt(cfg, "attn_pdrop", 0.1)),
        linears=tuple(mods),
        tensors=_tensor_list(tensors),
        hf_config=dict(cfg),
    )


def _bert(cfg: Mapping[str, Any], label: str, source: str) -> ModelSpec:
    h = _pos_int(cfg, "hidden_size")
    L = _pos_int(cfg, "num_hidden_layers")
    heads = _pos_int(cfg, "num_attention_heads")
    inter = _pos_int(cfg, "intermediate_size", default=4 * h)
    vocab = _pos_int(cfg, "vocab_size")
    pos = _pos_int(cfg, "max_position_embeddings", default=512)
    types = _pos_int(cfg, "type_vocab_size", default=2)
    arch = _arch(cfg) or "BertModel"
    mods = [
        LinearModule("attention.self.query", h, h, True, L),
        LinearModule("attention.self.key", h, h, True, L),
        LinearModule("attention.self.value", h, h, True, L),
        LinearModule("attention.output.dense", h, h, True, L),
        LinearModule("intermediate.dense", h, inter, True, L),
        LinearModule("output.dense", inter, h, True, L),
    ]
    per_layer = sum(m.weight_params + m.out_features for m in mods) + 2 * 2 * h
    n = (vocab + pos + types) * h + 2 * h + L * per_layer
    tensors = [(vocab * h, vocab, h), (pos * h, pos, h), (types * h, types, h), (h, 0, 0), (h, 0, 0)]
    block = _linear_tensors(mods, L) + [(h, 0, 0)] * 4
    tensors += block * L
    if arch == "BertForMaskedLM":
        head = [
            LinearModule("cls.predictions.transform.dense", h, h, True, 1, in_block=False),
            LinearModule("cls.predictions.decoder", h, vocab, True, 1, in_block=False, is_output=True, tied=True),
        ]
        n += h * h + h + 2 * h + vocab  # transform dense, transform LayerNorm, decoder bias (tied weight)
        tensors += [(h * h, h, h), (h, 0, 0), (h, 0, 0), (h, 0, 0), (vocab, 0, 0)]
    elif arch == "BertForSequenceClassification":
        labels = cfg.get("num_labels")
        labels = int(labels) if isinstance(labels, (int, float)) and not isinstance(labels, bool) else None
        if labels is None:
            id2label = cfg.get("id2label")
            labels = len(id2label) if isinstance(id2label, Mapping) and id2label else 2
        head = [
            LinearModule("pooler.dense", h, h, True, 1, in_block=False),
            LinearModule("classifier", h, labels, True, 1, in_block=False, is_output=True),
        ]
        n += h * h + h + h * labels + labels
        tensors += [(h * h, h, h), (h, 0, 0), (h * labels, labels, h), (labels, 0, 0)]
    else:
        arch = "BertModel"
        head = [LinearModule("pooler.dense", h, h, True, 1, in_block=False)]
        n += h * h + h
        tensors += [(h * h, h, h), (h, 0, 0)]
    return ModelSpec(
        name=label,
        family="bert",
        hidden_size=h,
        num_layers=L,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=h // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        tied_embeddings=True,
        n_params=n,
        source=source,
        model_type="bert",
        architecture=arch,
        activation=str(_opt(cfg, "hidden_act", "gelu")),
        norm="layernorm",
        norms_per_layer=2,
        attn_bias=True,
        max_positions=pos,
        resid_dropout=float(_opt(cfg, "hidden_dropout_prob", 0.1)),
        attn_dropout=float(_opt(cfg, "attention_probs_dropout_prob", 0.1)),
        linears=tuple(mods + head),
        tensors=_tensor_list(tensors),
        hf_config=dict(cfg),
    )


# --------------------------------------------------------------------------------------------------
# Presets, files, parameter counts
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    with open(resource_path("models", "presets.json"), encoding="utf-8") as fh:
        return dict(json.load(fh)["models"])


@lru_cache(maxsize=1)
def _alias_map() -> dict[str, str]:
    out: dict[str, str] = {}
    for key, cfg in _presets().items():
        out[_norm_name(key)] = key
        for alias in cfg.get("aliases", ()):
            out[_norm_name(alias)] = key
    return out


def _norm_name(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def list_presets() -> list[str]:
    return list(_presets())


@lru_cache(maxsize=64)
def _preset_spec(key: str) -> ModelSpec:
    cfg = {k: v for k, v in _presets()[key].items() if k != "aliases"}
    return from_config(cfg, name=key, source="preset")


def from_preset(name: str) -> ModelSpec:
    key = _alias_map().get(_norm_name(str(name)))
    if key is None:
        raise PlanInputError("model", f"unknown model {name!r}; presets: {', '.join(list_presets())}")
    return _preset_spec(key)


def from_config_file(path: str | Path) -> ModelSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanInputError("model-config", f"no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanInputError("model-config", f"cannot read {p}: {exc}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanInputError("model-config", f"{p} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise PlanInputError("model-config", f"{p} is nested deeper than any config.json") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise PlanInputError("model-config", f"{p} is not a usable config.json ({exc})") from None
    # The name the run history and bench results give a run of this file (not the config's own
    # ``_name_or_path``, which runs never see), so measured speeds find the plan.
    try:
        return from_config(cfg, name=config_model_name(str(path)))
    except PlanInputError as exc:
        raise PlanInputError("model-config", f"{p}: {exc.message}") from None


def _synth_config(n: int) -> dict[str, Any]:
    """A Llama-like shape (MHA, SwiGLU 8/3, untied) whose size is close to ``n`` parameters."""
    best: tuple[float, dict[str, Any]] | None = None
    for h in range(128, 16385, 128):
        vocab = 32000 if 2 * 32000 * h <= n / 3 else max(256, n // (8 * h))
        inter = max(64, int(round(8 * h / 3 / 64)) * 64)
        per_layer = 4 * h * h + 3 * h * inter + 2 * h
        rest = n - 2 * vocab * h - h
        layers = max(1, round(rest / per_layer)) if rest > 0 else 1
        total = 2 * vocab * h + h + layers * per_layer
        err = abs(total - n) / n
        aspect = abs(math.log(h / (128.0 * layers)))  # real models keep hidden/layers near 100-130
        score = aspect + 20.0 * err
        if best is None or score < best[0]:
            heads = h // 128
            best = (
                score,
                {
                    "model_type": "llama",
                    "hidden_size": h,
                    "num_hidden_layers": layers,
                    "num_attention_heads": heads,
                    "num_key_value_heads": heads,
                    "intermediate_size": inter,
                    "vocab_size": vocab,
                    "tie_word_embeddings": False,
                    "hidden_act": "silu",
                    "max_position_embeddings": 4096,
                },
            )
    assert best is not None
    return best[1]


def from_param_count(n: int) -> ModelSpec:
    """A plausible Llama-like spec of about ``n`` parameters; ``n_params`` is ``n`` exactly."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PlanInputError("params", f"must be a whole number of at least 1, got {n!r}")
    if n > MAX_SYNTH_PARAMS:
        raise PlanInputError("params", f"at most {MAX_SYNTH_PARAMS:.0e} (5x the largest models trained), got {n:.3g}")
    cfg = _synth_config(n)
    spec = from_config(cfg, name=f"{_human(n)} params (Llama-like shape)", source="params")
    return _replace_n(spec, n)


def _replace_n(spec: ModelSpec, n: int) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, n_params=n)


def _human(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


# --------------------------------------------------------------------------------------------------
# LoRA targets
# --------------------------------------------------------------------------------------------------

_ATTENTION = {
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "generic": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "gpt2": ("attn.c_attn", "attn.c_proj"),
    "bert": ("query", "key", "value", "attention.output.dense"),
}


def _matches(path: str, target: str) -> bool:
    # peft's rule for a string target: the full module name equals it or ends with "." + target
    return path == target or path.endswith("." + target)


@lru_cache(maxsize=1024)
def resolve_targets(spec: ModelSpec, targets: tuple[str, ...]) -> tuple[LinearModule, ...]:
    """The modules peft would wrap for ``targets`` (names, ``attention`` or ``all-linear``)."""
    names: list[str] = []
    for t in targets:
        t = str(t).strip()
        if t == "attention":
            names.extend(_ATTENTION[spec.family])
        elif t in ("all-linear", "all_linear", "all"):
            names.append("\0all-linear")
        elif t:
            names.append(t)
    from gpuplanner.plan.setup import DEFAULT_LORA_TARGETS

    if spec.family in ("gpt2", "bert") and tuple(targets) == DEFAULT_LORA_TARGETS:
        names = list(_ATTENTION[spec.family])  # the Llama-named default means "the attention projections"
    chosen = []
    for m in spec.linears:
        if "\0all-linear" in names and not m.is_output:
            chosen.append(m)
        elif any(_matches(m.path, t) for t in names if t != "\0all-linear"):
            chosen.append(m)
    unmatched = [t for t in names if t != "\0all-linear" and not any(_matches(m.path, t) for m in spec.linears)]
    if unmatched or not chosen:
        known = sorted({m.name for m in spec.linears} | {"attention", "all-linear"})
        bad = ", ".join(unmatched) if unmatched else ", ".join(targets)
        raise PlanInputError("lora-targets", f"{bad} matches no module of {spec.name}; choose from {', '.join(known)}")
    return tuple(chosen)


def lora_trainable_params(spec: ModelSpec, rank: int, targets: tuple[str, ...] | list[str]) -> int:
    """Adapter parameters peft adds: r x (in + out) per wrapped module (A: r x in, B: out x r)."""
    mods = resolve_targets(spec, tuple(targets))
    return sum(rank * (m.in_features + m.out_features) * m.count for m in mods)
