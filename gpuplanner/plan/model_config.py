"""Reading a Hugging Face ``config.json`` dict: typed field look-ups (also inside ``text_config``) and
:func:`check_config`, which rejects what no real model holds, naming the field. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuplanner.plan.setup import PlanInputError


def config_value(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
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


def config_int(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> int:
    value = config_value(cfg, *keys, default=default)
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


def config_opt(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
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
