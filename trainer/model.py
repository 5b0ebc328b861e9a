"""Model construction: Hugging Face id/dir or a config.json (random init), SDPA attention, gradient
checkpointing (every or every other layer, or selective: matmul outputs kept, the rest recomputed), optional LoRA via peft, parameter dtypes per precision, and
the FLOPs per token behind MFU and HFU."""

from __future__ import annotations

import contextlib
import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .final_model import save_final as save_final  # its home is final_model.py; kept importable here


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cuda":
        return torch.device(f"cuda:{local_rank}")
    return torch.device(name)


@dataclass(frozen=True)
class Precision:
    """What a precision promises, parameter by parameter.

    ``name``: the resolved precision (``fp32``, ``bf16-mixed``, ``fp16-mixed`` or ``bf16``).
    ``compute``: the matmul dtype (autocast's under ``*-mixed``). ``trained``: the dtype of trained
    parameters, hence of their gradients and optimizer states (fp32 master weights except pure ``bf16``).
    ``frozen``: the dtype of frozen parameters (a LoRA base: 16-bit except under ``fp32``).
    ``autocast``: whether the forward runs under ``torch.autocast(compute)``.
    """

    name: str
    compute: torch.dtype
    trained: torch.dtype
    frozen: torch.dtype
    autocast: bool


def resolve_precision(name: str, device: torch.device) -> Precision:
    """``auto``: bf16-mixed on GPUs with bf16, else fp16-mixed; fp32 on CPU. ``fp16`` means ``fp16-mixed``
    (pure fp16 training diverges). Only ``bf16`` trains pure 16-bit weights and optimizer states."""
    if name == "auto":
        if device.type == "cuda":
            name = "bf16-mixed" if torch.cuda.is_bf16_supported() else "fp16-mixed"
        else:
            name = "fp32"
    if name == "fp16":
        name = "fp16-mixed"
    if name == "fp32":
        return Precision(name, torch.float32, torch.float32, torch.float32, False)
    if name == "bf16":
        return Precision(name, torch.bfloat16, torch.bfloat16, torch.bfloat16, False)
    if name in ("bf16-mixed", "fp16-mixed"):
        half = torch.bfloat16 if name == "bf16-mixed" else torch.float16
        return Precision(name, half, torch.float32, half, True)
    raise ValueError(f"--precision must be one of auto, fp32, bf16-mixed, fp16-mixed, fp16, bf16 (not {name!r})")


def _dtype_kwarg(transformers: Any, dtype: torch.dtype) -> dict[str, Any]:
    """The load dtype keyword: ``dtype`` since transformers 4.56, ``torch_dtype`` before."""
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def apply_precision(model: torch.nn.Module, precision: Precision) -> dict[str, int]:
    """Cast every parameter to what ``precision`` promises for it: trained ones to ``precision.trained``,
    frozen ones to ``precision.frozen``. Buffers (rotary frequencies, masks) keep their dtype. Tied
    parameters stay tied (the same ``Parameter`` is cast once). Returns parameter counts per dtype."""
    counts: dict[str, int] = {}
    for p in model.parameters():
        want = precision.trained if p.requires_grad else precision.frozen
        if p.is_floating_point() and p.dtype != want:
            p.data = p.data.to(want)
        key = str(p.dtype).replace("torch.", "")
        counts[key] = counts.get(key, 0) + p.numel()
    return counts


def build_model(
    config: TrainConfig,
    vocab_size: int,
    eos_id: int | None = None,
    labels: list[str] | None = None,
    pad_id: int | None = None,
    precision: Precision | None = None,
    device: torch.device | None = None,
    meta: bool = False,
) -> torch.nn.Module:
    """Causal LM, or (``task == "seq-cls"``) a sequence classifier with ``labels`` as its classes
    (``id2label``/``label2id`` in its config) and ``pad_id`` as pad token (GPT-2 style models pool the
    last non-pad token, so they need one).

    Parameter dtypes are set here, whatever dtype the checkpoint was saved in and whatever the
    transformers version's loading default (``precision``, default from ``config.precision`` and
    ``config.device``): see :func:`model_precision`.

    ``meta``: the same model with its parameters and buffers on the ``meta`` device (no memory, no
    values), built from the checkpoint's config without reading its weights; FSDP's meta-device
    initialisation (``trainer/fsdp.py`` ``materialise``) fills it, shard by shard.
    """
    import transformers

    if precision is None:
        precision = resolve_precision(config.precision, pick_device(config.device))
    precision = model_precision(precision, lora=config.lora_rank > 0, qlora=config.qlora)

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
        with torch.device("meta") if meta else contextlib.nullcontext():
            model = auto.from_config(hf_config, **kwargs)
    elif meta:
        if cls or config.qlora or config.lora_rank > 0:
            raise ValueError("meta-device initialisation is for full fine-tuning of a causal LM")
        hf_config = transformers.AutoConfig.from_pretrained(_model_name(config))
        with torch.device("meta"):
            model = auto.from_config(hf_config, **kwargs)
    else:
        if cls:  # a new head when the checkpoint's classes differ
            kwargs.update(label_kwargs, ignore_mismatched_sizes=True)
        # Load straight into the dtype the base will have (a LoRA base in 16 bit never exists in fp32).
        load_dtype = precision.frozen if config.lora_rank > 0 else precision.trained
        if config.qlora:
            kwargs.update(qlora_load_kwargs(transformers, precision, device or pick_device(config.device)))
            load_dtype = precision.compute
        model = auto.from_pretrained(_model_name(config), **kwargs, **_dtype_kwarg(transformers, load_dtype))
        if config.qlora:
            prepare_kbit(model)
    if cls and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = pad_id if pad_id is not None else eos_id
    if config.grad_checkpointing != "off":
        every_n = 2 if config.grad_checkpointing == "every-other" else 1
        ckpt_kwargs: dict[str, Any] = {"use_reentrant": False}
        if config.grad_checkpointing == "selective":
            ckpt_kwargs["context_fn"] = (
                alternate_matmul_context if config.selective_policy == "alternate-matmul" else selective_context
            )
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(ckpt_kwargs, every_n_layers=every_n)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)
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
        for p in model.parameters():  # the base: frozen dtype before peft adds the adapters (4-bit: uint8, kept)
            if p.is_floating_point() and p.dtype != precision.frozen:
                p.data = p.data.to(precision.frozen)
        model = apply_lora(model, config)
    apply_precision(model, precision)
    return model


def _saved_ops() -> frozenset[Any]:
    """The ops whose outputs selective checkpointing keeps: every matmul and the fused attention
    kernels (what is costly to recompute). Ops a torch build lacks are skipped."""
    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_flash_attention_forward",
        "_efficient_attention_forward",
    )
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


SELECTIVE_SAVED_OPS = _saved_ops()


def selective_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """Selective activation checkpointing (Korthikanti et al. 2022, "Reducing Activation Recomputation
    in Large Transformer Models"; torchtitan's op-level policy): keep the outputs of matmuls and
    attention kernels, recompute everything else in the block during backward (norms and their fp32
    copies, activation functions, rotary embeddings, casts, dropout, residual adds). Those are cheap,
    memory-bound ops, so the recompute adds almost no FLOPs while the block's many elementwise
    intermediates are not kept from forward to backward."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in SELECTIVE_SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def selective_context() -> Any:
    """``context_fn`` for ``torch.utils.checkpoint.checkpoint`` under ``--grad-checkpointing selective``."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(selective_policy)


# The matmul ops the alternate-matmul policy counts in forward order (a linear with a bias is addmm).
_COUNTED_MATMULS = frozenset(getattr(torch.ops.aten, n).default for n in ("mm", "addmm"))


def alternate_matmul_policy(counts: dict[str, int], ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """``--selective-policy alternate-matmul``: torchtitan's op-level selective checkpointing
    (``selective_ac_option = "op"``): keep what :func:`selective_policy` keeps except every second matmul
    of the block in forward order (the 1st, 3rd, 5th, ... are kept). ``counts`` belongs to one
    checkpointed block's forward; torch versions that ask the policy again while recomputing
    (``ctx.is_recompute``) count those calls apart, so both passes make the same choices. About half the
    kept matmul outputs, for recomputing half the block's matmuls."""
    from torch.utils.checkpoint import CheckpointPolicy

    if op in _COUNTED_MATMULS:
        key = "recompute" if getattr(ctx, "is_recompute", False) else "forward"
        counts[key] = counts.get(key, 0) + 1
        if counts[key] % 2 == 0:
            return CheckpointPolicy.PREFER_RECOMPUTE
    return CheckpointPolicy.MUST_SAVE if op in SELECTIVE_SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def alternate_matmul_context() -> Any:
    """``context_fn`` under ``--selective-policy alternate-matmul`` (fresh counts per checkpointed block)."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(functools.partial(alternate_matmul_policy, {}))


class QLoRAUnavailable(RuntimeError):
    """``--qlora`` on a host without bitsandbytes (or one that cannot load it); the message says how to fix it."""


def qlora_load_kwargs(transformers: Any, precision: Precision, device: torch.device) -> dict[str, Any]:
    """``from_pretrained`` arguments that load the base in 4-bit NF4 with double quantisation (the QLoRA
    paper's and peft's recipe), computing in ``precision.compute`` (bf16 under bf16-mixed), straight
    onto ``device`` (quantised as it is placed: the 16-bit base never exists whole)."""
    try:
        import bitsandbytes  # noqa: F401
    except Exception as exc:  # ImportError, or a build that cannot load its native library
        raise QLoRAUnavailable(
            f"--qlora needs bitsandbytes ({type(exc).__name__}: {exc}); install it with "
            "pip install bitsandbytes (or pip install 'gpuplanner[qlora]')"
        ) from None
    quant = transformers.BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=precision.compute,
    )
    index = device.index if device.index is not None else 0
    return {"quantization_config": quant, "device_map": {"": index if device.type == "cuda" else device.type}}


def prepare_kbit(model: torch.nn.Module) -> None:
    """peft's ``prepare_model_for_kbit_training``: freeze the base, cast its remaining 16-bit parameters
    (norms, embeddings, head) to fp32 for stability, as the QLoRA recipe does. Activation
    checkpointing is the trainer's own (``--grad-checkpointing``), so peft's is not turned on here."""
    import warnings

    import peft

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def is_quantized(p: torch.Tensor) -> bool:
    """A bitsandbytes 4-bit weight (packed uint8 with a quantisation state)."""
    return getattr(p, "quant_state", None) is not None


def param_count(p: torch.Tensor) -> int:
    """Elements a parameter stands for: a 4-bit weight packs two per byte, its real shape is in its
    quantisation state."""
    state = getattr(p, "quant_state", None)
    shape = getattr(state, "shape", None)
    return math.prod(shape) if shape is not None else p.numel()


def model_precision(precision: Precision, lora: bool, qlora: bool = False) -> Precision:
    """The dtypes of one model's parameters under ``precision``.

    Full fine-tuning: every parameter is trained, in ``precision.trained`` (fp32 master weights under
    ``fp32`` and ``*-mixed``, bf16 under pure ``bf16``). LoRA: the frozen base in 16 bit (fp32 under
    ``fp32``) and the adapters (and a classifier head) in fp32 under every precision, as peft keeps them
    and the planner counts them: they are a tiny share of memory, and fp32 keeps their small updates.
    """
    if qlora:  # prepare_model_for_kbit_training keeps the unquantised base (norms, embeddings) in fp32
        return replace(precision, trained=torch.float32, frozen=torch.float32)
    if lora:
        return replace(precision, trained=torch.float32)
    return precision


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
        lora_alpha=config.lora_alpha or 2 * config.lora_rank,  # type: ignore[arg-type]  # peft says int; scales as alpha / r
        lora_dropout=config.lora_dropout,
        # peft's shorthand for every linear but the output head (the QLoRA paper's choice) is a string
        target_modules="all-linear" if config.lora_targets == ["all-linear"] else (config.lora_targets or None),
        fan_in_fan_out=conv1d,
    )
    import warnings

    with warnings.catch_warnings():  # peft's own use of deprecated transformers APIs is not ours to fix
        warnings.simplefilter("ignore", FutureWarning)
        return peft.get_peft_model(model, lora)


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    total = sum(param_count(p) for p in model.parameters())
    trainable = sum(param_count(p) for p in model.parameters() if p.requires_grad)
    return total, trainable


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs per trained token, as the field counts them (PaLM appendix B, nanoGPT, torchtitan).

    ``model``: the work the model needs, the numerator of MFU: 6 per parameter that takes part in a
    matmul (2 forward, 4 backward: activation and weight gradients), 4 for frozen ones (no weight
    gradient: LoRA's base), plus attention's 12 x layers x seq_len x (heads x head_dim) (scores and their
    use, forward 4, backward 8, the full square as the field counts it). Embedding lookups are no
    matmul: their tables count only where the output head uses them (tied weights).
    ``hardware``: what the hardware computes, the numerator of HFU: ``model`` plus the recomputed
    forward of checkpointed blocks (2 per block parameter and attention's 4 x seq_len x width per layer).
    """

    model: float
    hardware: float
    matmul_params: int
    attention: float


def _model_name(config: TrainConfig) -> str:
    """The Hugging Face model to load (``--model``; validate() asks for it without ``--model-config``)."""
    if not config.model:
        raise ValueError("no model to load: give --model or --model-config")
    return config.model


def output_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The model's output projection, or None for a model without one (not a Hugging Face model, or one
    whose class does not define it: transformers raises NotImplementedError there)."""
    get = getattr(model, "get_output_embeddings", None)
    try:
        return get() if get is not None else None
    except (AttributeError, NotImplementedError):
        return None


def _matmul_parameters(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter], set[int]]:
    """(parameters that take part in a matmul, ids of the embedding tables that are lookups only)."""
    head = output_head(model)
    head_weight = getattr(head, "weight", None)
    lookups = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, torch.nn.Embedding) and m.weight is not head_weight  # a tied head is a matmul
    }
    return [p for p in model.parameters() if id(p) not in lookups], lookups


def _block_params(model: torch.nn.Module, lookups: set[int]) -> tuple[int, int]:
    """(parameters inside the transformer blocks, number of blocks), blocks as ``_no_split_modules`` names them."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    seen: set[int] = set()
    total = 0
    for block in blocks:
        for p in block.parameters():
            if id(p) not in seen and id(p) not in lookups:
                seen.add(id(p))
                total += param_count(p)
    return total, len(blocks)


def _alternate_recomputed_params(model: torch.nn.Module) -> int:
    """Parameters of the matmuls ``--selective-policy alternate-matmul`` recomputes: in each block, the
    2nd, 4th, ... matrix weight in registration order (the forward order of Llama- and GPT-2-style blocks)."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    total = 0
    for block in (m for m in model.modules() if type(m).__name__ in names):
        weights = [p for p in block.parameters() if p.dim() >= 2]
        total += sum(param_count(p) for p in weights[1::2])
    return total


def training_flops(
    model: torch.nn.Module, seq_len: int, recompute: str, selective_policy: str = "every-matmul"
) -> TrainingFlops:
    """Model FLOPs (MFU) and hardware FLOPs (HFU) per token for ``model`` trained at ``seq_len`` with
    activation checkpointing ``recompute`` (``off``, ``every``, ``every-other``, ``selective``: under the
    ``every-matmul`` policy no matmul is recomputed, so no FLOPs are added; under ``alternate-matmul``
    every other matmul of each block is). Frozen parameters (``requires_grad`` false) cost 4 per token
    instead of 6."""
    cfg = getattr(model, "config", None)
    params, lookups = _matmul_parameters(model)
    trained = sum(param_count(p) for p in params if p.requires_grad)
    frozen = sum(param_count(p) for p in params if not p.requires_grad)
    n_layer = getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", 0)) or 0
    hidden = getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0)) or 0
    heads = getattr(cfg, "num_attention_heads", getattr(cfg, "n_head", 0)) or 0
    head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if heads else 0)
    width = heads * head_dim if heads and head_dim else hidden  # query heads x head dim (GQA included)
    attention_forward = 4.0 * n_layer * seq_len * width
    model_flops = 6.0 * trained + 4.0 * frozen + 3.0 * attention_forward
    block_params, n_blocks = _block_params(model, lookups)
    if not n_blocks:
        block_params, n_blocks = sum(p.numel() for p in params), max(1, n_layer)
    if recompute == "every":
        share = 1.0
    elif recompute == "selective":
        share = 0.0  # matmul and attention outputs are kept: only elementwise work is recomputed
    elif recompute == "every-other":
        share = math.ceil(n_blocks / 2) / n_blocks  # blocks 0, 2, 4, ... are checkpointed
    else:
        share = 0.0
    hardware = model_flops + share * (2.0 * block_params + attention_forward)
    if recompute == "selective" and selective_policy == "alternate-matmul":
        hardware += 2.0 * _alternate_recomputed_params(model)
    return TrainingFlops(model_flops, hardware, trained + frozen, 3.0 * attention_forward)
