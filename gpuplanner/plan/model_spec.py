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
- ``qwen`` (Qwen v1, ``QWenLMHeadModel``, remote code): fused ``attn.c_attn`` (with bias) and
  ``attn.c_proj``, a gated MLP ``mlp.w1``/``mlp.w2``/``mlp.c_proj`` whose width is half the
  config's ``intermediate_size`` (Qwen-7B: 7.72B parameters).

A ``model_type`` outside these is read as a Llama-like decoder, and the spec's ``reading_note`` says
so (every plan shows it as a warning): the planner never guesses quietly.

The types are in :mod:`gpuplanner.plan.model_shape` (re-exported here) and the reading and checking of a
``config.json`` in :mod:`gpuplanner.plan.model_config`. Pure Python, standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuplanner.plan.model_config import MAX_PARAMS, MAX_SYNTH_PARAMS, check_config, config_int, config_opt
from gpuplanner.plan.model_shape import LinearModule as LinearModule  # re-exported
from gpuplanner.plan.model_shape import ModelSpec as ModelSpec  # re-exported
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
    "qwen",
    *MOE_TYPES,
)
# The Llama-like types read exactly (the rest of LLAMA_LIKE reads its own fields in moe_layout.py)
EXACT_TYPES = frozenset(LLAMA_LIKE) | {"gpt2", "bert"}


# --------------------------------------------------------------------------------------------------
# Building specs from configs
# --------------------------------------------------------------------------------------------------


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
    given_type = cfg.get("model_type")
    model_type = str(given_type or "llama").lower()
    family = _family_of(model_type)
    label = name or str(cfg.get("_name_or_path") or cfg.get("name") or model_type)
    if family == "gpt2":
        spec = _gpt2(cfg, label, source)
    elif family == "bert":
        spec = _bert(cfg, label, source)
    else:
        spec = _llama(cfg, label, source, family, model_type)
    if model_type not in EXACT_TYPES or not given_type:
        what = (
            f"model_type {model_type!r} is not a layout" if given_type else "the config has no model_type, not a layout"
        )
        spec = replace(
            spec,
            reading_note=(
                f"{what} the planner reads exactly: read as a Llama-like decoder of {spec.n_params / 1e9:.3g}B "
                "parameters; check that against the model card (or plan with --params N)"
            ),
        )
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
    h = config_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = config_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = config_int(cfg, "num_attention_heads", "n_head", "num_heads")
    kv = config_int(cfg, "num_key_value_heads", default=heads)
    hd_raw = cfg.get("head_dim") if model_type != "qwen" else cfg.get("kv_channels")
    hd = int(hd_raw) if isinstance(hd_raw, (int, float)) and not isinstance(hd_raw, bool) and hd_raw > 0 else h // heads
    if hd < 1:
        raise PlanInputError("model-config", "hidden_size must be at least num_attention_heads")
    inter = config_int(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * h)
    vocab = config_int(cfg, "vocab_size")
    tied = bool(config_opt(cfg, "tie_word_embeddings", model_type.startswith("gemma")))
    attn_bias = bool(config_opt(cfg, "attention_bias", False)) or model_type in ("qwen2", "qwen2_moe")
    o_bias = bool(config_opt(cfg, "attention_bias", False))
    mlp_bias = bool(config_opt(cfg, "mlp_bias", False))
    gemma2 = model_type in ("gemma2", "gemma3_text")
    qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2")
    norms = 4 if gemma2 else 2
    act = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu")
    q, kvd = heads * hd, kv * hd
    L = layers
    latent_norms = 0
    if model_type == "qwen":  # Qwen v1: fused QKV with bias, o without; the MLP is half intermediate_size wide
        inter //= 2
        attention = [LinearModule("attn.c_attn", h, 3 * q, True, L), LinearModule("attn.c_proj", q, h, False, L)]
    elif cfg.get("kv_lora_rank"):  # DeepSeek's multi-head latent attention
        raw, latent_norms, hd = latent_attention(cfg, h, heads, L, config_int)
        attention = [LinearModule(*m) for m in raw]
        kv = heads  # keys and values are expanded per head from the latent
    else:
        attention = [
            LinearModule("self_attn.q_proj", h, q, attn_bias, L),
            LinearModule("self_attn.k_proj", h, kvd, attn_bias, L),
            LinearModule("self_attn.v_proj", h, kvd, attn_bias, L),
            LinearModule("self_attn.o_proj", q, h, o_bias, L),
        ]
    moe = moe_layout(cfg, model_type, h, L, inter, config_int) if is_moe(cfg) else None
    if model_type == "qwen":
        mlp = [
            LinearModule("mlp.w1", h, inter, False, L),
            LinearModule("mlp.w2", h, inter, False, L),
            LinearModule("mlp.c_proj", inter, h, False, L),
        ]
    elif moe is None:
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
    h = config_int(cfg, "n_embd", "hidden_size")
    L = config_int(cfg, "n_layer", "num_hidden_layers")
    heads = config_int(cfg, "n_head", "num_attention_heads")
    inter = config_int(cfg, "n_inner", default=4 * h)
    vocab = config_int(cfg, "vocab_size")
    pos = config_int(cfg, "n_positions", "max_position_embeddings", default=1024)
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
        activation=str(config_opt(cfg, "activation_function", "gelu_new")),
        norm="layernorm",
        norms_per_layer=2,
        attn_bias=True,
        max_positions=pos,
        resid_dropout=float(config_opt(cfg, "resid_pdrop", 0.1)),
        attn_dropout=float(config_opt(cfg, "attn_pdrop", 0.1)),
        linears=tuple(mods),
        tensors=_tensor_list(tensors),
        hf_config=dict(cfg),
    )


def _bert(cfg: Mapping[str, Any], label: str, source: str) -> ModelSpec:
    h = config_int(cfg, "hidden_size")
    L = config_int(cfg, "num_hidden_layers")
    heads = config_int(cfg, "num_attention_heads")
    inter = config_int(cfg, "intermediate_size", default=4 * h)
    vocab = config_int(cfg, "vocab_size")
    pos = config_int(cfg, "max_position_embeddings", default=512)
    types = config_int(cfg, "type_vocab_size", default=2)
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
        activation=str(config_opt(cfg, "hidden_act", "gelu")),
        norm="layernorm",
        norms_per_layer=2,
        attn_bias=True,
        max_positions=pos,
        resid_dropout=float(config_opt(cfg, "hidden_dropout_prob", 0.1)),
        attn_dropout=float(config_opt(cfg, "attention_probs_dropout_prob", 0.1)),
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
    "qwen": ("attn.c_attn", "attn.c_proj"),
    "generic": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "gpt2": ("attn.c_attn", "attn.c_proj"),
    "bert": ("query", "key", "value", "attention.output.dense"),
}


def _attention_names(spec: ModelSpec) -> tuple[str, ...]:
    return _ATTENTION.get(spec.model_type) or _ATTENTION[spec.family]


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
            names.extend(_attention_names(spec))
        elif t in ("all-linear", "all_linear", "all"):
            names.append("\0all-linear")
        elif t:
            names.append(t)
    from gpuplanner.plan.setup import DEFAULT_LORA_TARGETS

    if spec.model_type in ("gpt2", "bert", "qwen") and tuple(targets) == DEFAULT_LORA_TARGETS:
        names = list(_attention_names(spec))  # the Llama-named default means "the attention projections"
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
