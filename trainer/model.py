"""Model construction: Hugging Face id/dir or a config.json (random init), SDPA attention, gradient
checkpointing (every or every other layer), optional LoRA via peft, precision choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cuda":
        return torch.device(f"cuda:{local_rank}")
    return torch.device(name)


def pick_precision(name: str, device: torch.device) -> torch.dtype:
    if name == "fp32":
        return torch.float32
    if name == "bf16":
        return torch.bfloat16
    if name == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def build_model(
    config: TrainConfig,
    vocab_size: int,
    eos_id: int | None = None,
    labels: list[str] | None = None,
    pad_id: int | None = None,
) -> torch.nn.Module:
    """Causal LM, or (``task == "seq-cls"``) a sequence classifier with ``labels`` as its classes
    (``id2label``/``label2id`` in its config) and ``pad_id`` as pad token (GPT-2 style models pool the
    last non-pad token, so they need one)."""
    import transformers

    cls = config.task == "seq-cls"
    auto = transformers.AutoModelForSequenceClassification if cls else transformers.AutoModelForCausalLM
    kwargs: dict[str, Any] = {"attn_implementation": config.attn_implementation}
    label_kwargs: dict[str, Any] = {}
    if cls:
        if not labels:
            raise ValueError("--task seq-cls needs the class labels")
        label_kwargs = {
            "num_labels": len(labels),
            "id2label": dict(enumerate(labels)),
            "label2id": {name: i for i, name in enumerate(labels)},
        }
    if config.model_config:
        raw = json.loads(Path(config.model_config).read_text(encoding="utf-8"))
        model_type = raw.pop("model_type", "gpt2")
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if eos_id is not None and raw.get("vocab_size", 0) and key not in raw:
                raw[key] = eos_id
        if cls and pad_id is not None and "pad_token_id" not in json.loads(Path(config.model_config).read_text()):
            raw["pad_token_id"] = pad_id
        raw.update(label_kwargs)
        hf_config = transformers.AutoConfig.for_model(model_type, **raw)
        if getattr(hf_config, "vocab_size", vocab_size) < vocab_size:
            raise ValueError(f"model vocab_size {hf_config.vocab_size} < tokenizer vocabulary {vocab_size}")
        torch.manual_seed(config.seed)
        model = auto.from_config(hf_config, **kwargs)
    else:
        if cls:  # a new head when the checkpoint's classes differ
            kwargs.update(label_kwargs, ignore_mismatched_sizes=True)
        model = auto.from_pretrained(config.model, **kwargs)
    if cls and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = pad_id if pad_id is not None else eos_id
    if config.grad_checkpointing != "off":
        every_n = 2 if config.grad_checkpointing == "every-other" else 1
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable({"use_reentrant": False}, every_n_layers=every_n)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if every_n == 2:
                blocks = [
                    m
                    for m in model.modules()
                    if m is not model
                    and hasattr(m, "gradient_checkpointing")
                    and ("Block" in type(m).__name__ or "Layer" in type(m).__name__)
                ]
                for i, block in enumerate(blocks):
                    block.gradient_checkpointing = i % 2 == 0
    # Training needs no KV cache: with ``use_cache`` on, every forward builds a DynamicCache and copies
    # each layer's keys and values into it (a torch.cat per layer, kept alive until backward). The
    # Hugging Face Trainer turns it off the same way (``config.use_cache = False``). The saved model
    # (``save_final``) gets the original value back, so inference with it still caches.
    if getattr(model.config, "use_cache", None):
        model.config.use_cache = False
        model._trainer_restore_use_cache = True  # a plain attribute: not in the config or state dict
    if config.fused_kernels:
        fuse_activations(model)
    if config.lora_rank > 0:
        model = apply_lora(model, config)
    return model


# Transformers activation classes that compute the tanh GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
# as a chain of elementwise ops (pow, mul, add, tanh, add, mul, mul): seven kernels each way, each one reading
# and writing the whole activation, several intermediates kept for backward. GPT-2 and GPT-J use them.
_TANH_GELU_CLASSES = ("NewGELUActivation", "FastGELUActivation", "AccurateGELUActivation")


def fuse_activations(model: torch.nn.Module) -> int:
    """Replace op-by-op tanh-GELU modules with ``torch.nn.GELU(approximate="tanh")``, the same function
    as one kernel each way; returns how many were replaced.

    Only module instances change: the model's config (``activation_function``) and weights do not,
    so the saved model loads and behaves as before everywhere.
    """
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ in _TANH_GELU_CLASSES and type(child).__module__.startswith("transformers."):
                setattr(parent, name, torch.nn.GELU(approximate="tanh"))
                replaced += 1
    return replaced


def apply_lora(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    try:
        import peft
    except ImportError as exc:  # pragma: no cover - depends on the host
        raise RuntimeError("--lora-rank needs peft: pip install peft") from exc
    from transformers.pytorch_utils import Conv1D

    conv1d = any(isinstance(m, Conv1D) for m in model.modules())  # GPT-2 style layers store weights transposed
    task = peft.TaskType.SEQ_CLS if config.task == "seq-cls" else peft.TaskType.CAUSAL_LM
    lora = peft.LoraConfig(
        task_type=task,
        r=config.lora_rank,
        lora_alpha=config.lora_alpha or 2 * config.lora_rank,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_targets or None,
        fan_in_fan_out=conv1d,
    )
    import warnings

    with warnings.catch_warnings():  # peft's own use of deprecated transformers APIs is not ours to fix
        warnings.simplefilter("ignore", FutureWarning)
        return peft.get_peft_model(model, lora)


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total, trainable


def flops_per_token(model: torch.nn.Module, seq_len: int, recompute: str, lora: bool) -> float:
    """Training FLOPs per token: 6N (2N fwd + 4N bwd) + attention, +2N with full recompute, ~4N for LoRA."""
    cfg = getattr(model, "config", None)
    n_params, _ = count_params(model)
    n_layer = getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", 0)) or 0
    hidden = getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0)) or 0
    factor = 4.0 if lora else 6.0
    if recompute == "every":
        factor += 2.0
    elif recompute == "every-other":
        factor += 1.0
    attention = (factor * 2) * n_layer * hidden * seq_len  # 12 * L * H * T for the plain 6N case
    return factor * n_params + attention


def save_final(
    model: torch.nn.Module, tokenizer: Any, path: Path, state_dict: dict[str, torch.Tensor] | None = None
) -> None:
    """Hugging Face format with safetensors (LoRA: the adapters, and for classification the head).

    ``state_dict``: the full weights when the model's own parameters are shards (FSDP).
    Classifiers keep ``id2label``/``label2id`` in ``config.json``; LoRA classifiers, whose folder holds
    only the adapter, get the base model's ``config.json`` (with the labels) as ``base_config.json``.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"safe_serialization": True}
    if state_dict is not None:
        kwargs["state_dict"] = state_dict
    if hasattr(model, "should_save_on_this_rank"):
        # Recent transformers write only on global rank 0 under torch.distributed; we call this on the
        # writer of each node's own run directory (separate disks), so this rank must write.
        model.should_save_on_this_rank = lambda is_main_process: True
    restore = [m for m in model.modules() if getattr(m, "_trainer_restore_use_cache", False)]
    for m in restore:
        m.config.use_cache = True
    try:
        model.save_pretrained(path, **kwargs)
    finally:
        for m in restore:
            m.config.use_cache = False
    tokenizer.save_pretrained(path)
    base = getattr(getattr(model, "base_model", None), "model", None)
    if hasattr(model, "peft_config") and base is not None and getattr(base.config, "id2label", None):
        (path / "base_config.json").write_text(base.config.to_json_string(), encoding="utf-8")
