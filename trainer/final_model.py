"""The finished model in ``final/``, ready to serve: Hugging Face format with safetensors, in the training
dtype; a LoRA run's adapter as a peft adapter, and with ``--merge-lora`` the base with the adapter merged
in ``final/merged/``.

The training dtype is the precision's compute dtype (``bf16`` under ``bf16-mixed`` and pure ``bf16``,
``fp16`` under ``fp16-mixed``, ``fp32`` under ``fp32``): the fp32 master weights of a mixed-precision
run are what an optimizer needs, not what a server loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

MERGED = "merged"  # final/merged/: the LoRA base with the adapter merged (``--merge-lora``)


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Floating-point tensors in ``dtype`` (4-bit packed weights and integer buffers as they are)."""
    return {k: v.to(dtype) if v.is_floating_point() and v.dtype != dtype else v for k, v in state.items()}


def unique_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the second name of a tied weight (GPT-2's ``lm_head.weight``), as
    ``save_pretrained`` writes an unsharded model: the names of parameters and buffers, each once."""
    names = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    return {k: v for k, v in state.items() if k in names}


def _set_config_dtype(folder: Path, dtype: torch.dtype) -> None:
    """Record ``dtype`` in ``config.json`` (``dtype`` since transformers 4.56, ``torch_dtype`` before):
    ``save_pretrained`` takes it from the module's parameters, which may be the fp32 masters."""
    path = folder / "config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    name = str(dtype).replace("torch.", "")
    keys = [k for k in ("dtype", "torch_dtype") if k in config] or ["torch_dtype"]
    for key in keys:
        config[key] = name
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _save_pretrained(model: Any, path: Path, state: dict[str, torch.Tensor] | None) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"safe_serialization": True}
    if state is not None:
        kwargs["state_dict"] = state
    if hasattr(model, "should_save_on_this_rank"):
        # Recent transformers write only on global rank 0 under torch.distributed; we call this on the
        # writer of each node's own run directory (separate disks), so this rank must write.
        model.should_save_on_this_rank = lambda is_main_process: True
    restore: list[Any] = [m for m in model.modules() if getattr(m, "_trainer_restore_use_cache", False)]
    for m in restore:  # training ran without a KV cache; the served model caches
        m.config.use_cache = True
    try:
        model.save_pretrained(path, **kwargs)
    finally:
        for m in restore:
            m.config.use_cache = False


def save_final(
    model: torch.nn.Module,
    tokenizer: Any,
    path: Path,
    state_dict: dict[str, torch.Tensor] | None = None,
    dtype: torch.dtype | None = None,
) -> None:
    """Hugging Face format with safetensors (LoRA: the peft adapter, ``adapter_config.json`` and
    ``adapter_model.safetensors``, and for classification the head).

    ``state_dict``: the full weights when the model's own parameters are shards (FSDP). ``dtype``: the
    dtype the weights are written in (the training dtype; None: as the parameters are stored); the
    model's own parameters are not changed. Classifiers keep ``id2label``/``label2id`` in ``config.json``;
    LoRA classifiers, whose folder holds only the adapter, get the base model's ``config.json`` (with the
    labels) as ``base_config.json``.
    """
    hf: Any = model  # a transformers PreTrainedModel (or a peft model around one): its own attributes
    state = state_dict
    if dtype is not None:
        state = _cast(state if state is not None else unique_state(model, model.state_dict()), dtype)
    _save_pretrained(hf, path, state)
    if dtype is not None and not hasattr(model, "peft_config"):
        _set_config_dtype(path, dtype)
    tokenizer.save_pretrained(path)
    base = getattr(getattr(model, "base_model", None), "model", None)
    if hasattr(model, "peft_config") and base is not None and getattr(base.config, "id2label", None):
        (path / "base_config.json").write_text(base.config.to_json_string(), encoding="utf-8")


def _plain_weights(model: torch.nn.Module) -> bool:
    """True when every parameter is an ordinary tensor here: not a shard (FSDP's DTensor) and not a
    quantised 4-bit weight, so the adapter can be merged into the model in place."""
    return not any(hasattr(p, "to_local") or not p.is_floating_point() for p in model.parameters())


def save_merged(
    model: torch.nn.Module, tokenizer: Any, final: Path, dtype: torch.dtype, base_model: str | None
) -> Path:
    """``--merge-lora``: ``final/merged/``, the base with the LoRA adapter merged into its weights, in
    ``dtype``, loadable with plain transformers (no peft). After :func:`save_final` wrote the adapter.

    In place (``merge_and_unload`` of this peft model) when its weights are ordinary tensors; a sharded
    (FSDP) or 4-bit (QLoRA) base is loaded again from ``base_model`` in ``dtype`` on the CPU and the
    saved adapter merged into it (merging into 4-bit weights would round the update away). Call it last:
    the in-place merge changes ``model``."""
    out = final / MERGED
    peft_model: Any = model
    if _plain_weights(model):
        merged = peft_model.merge_and_unload()
    else:
        if not base_model:
            raise ValueError("--merge-lora of a sharded or 4-bit base reloads the base: give --model")
        import peft
        import transformers

        from .model import _dtype_kwarg

        base = transformers.AutoModelForCausalLM.from_pretrained(base_model, **_dtype_kwarg(transformers, dtype))
        merged = peft.PeftModel.from_pretrained(base, str(final)).merge_and_unload()
    merged = merged.to(dtype)
    _save_pretrained(merged, out, None)
    tokenizer.save_pretrained(out)
    return out
