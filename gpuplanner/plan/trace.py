"""Trace mode: measure what one real training step keeps alive, without a GPU and without weights.

Where torch and transformers are installed, the model is built from the spec's config under
``FakeTensorMode`` (tensors carry shapes and dtypes but no storage), one training step runs for real
through autograd (forward, loss, backward, optimizer step) and PyTorch's own memory tracker
(``torch.distributed._tools.mem_tracker.MemTracker``) records every storage by kind. The result is a
:class:`MemoryBreakdown` with ``source="trace"``; callers fall back to :func:`estimate_memory` on
:class:`TraceUnavailable` and say which one answered.

What the trace cannot see: the CUDA context and allocator slack (added from the same constants as the
formula), CUDA-only kernels (the trace runs on the CPU device, so autocast uses the CPU op lists and
SDPA the CPU flash kernel), bitsandbytes (QLoRA, 8-bit optimizers) and multi-GPU sharding.
torch is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

from gpuplanner.plan.memory import CUDA_CONTEXT_BYTES, MemoryBreakdown
from gpuplanner.plan.memory_allocator import slack_bytes
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.model_spec import resolve_targets
from gpuplanner.plan.setup import TrainSetup


class TraceUnavailable(RuntimeError):
    """Tracing cannot answer for this setup (missing library, unsupported option, or a failure)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _imports() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
        from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
        from torch.distributed._tools.mem_tracker import MemTracker  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        raise TraceUnavailable(f"trace mode needs torch and transformers ({exc.__class__.__name__}: {exc})") from None
    return torch, transformers


def _check_supported(spec: ModelSpec, setup: TrainSetup) -> None:
    if setup.method == "qlora":
        raise TraceUnavailable("QLoRA needs bitsandbytes on a CUDA device; the trace cannot run it")
    if setup.optimizer == "adamw-8bit":
        raise TraceUnavailable("8-bit AdamW (bitsandbytes) cannot run under the trace")
    if setup.gpus > 1:
        raise TraceUnavailable("the trace covers one GPU; multi-GPU sharding comes from the formulas")
    if setup.grad_checkpointing in ("every-other", "selective"):
        raise TraceUnavailable(f"{setup.grad_checkpointing} checkpointing is not traced")


def build_config(spec: ModelSpec, setup: TrainSetup) -> Any:
    """The transformers config object for ``spec`` with the attention implementation of ``setup``."""
    _, transformers = _imports()
    cfg = {k: v for k, v in dict(spec.hf_config).items() if k not in ("aliases", "architectures", "model_type")}
    model_type = spec.model_type if spec.family != "generic" else "llama"
    if spec.family == "generic" and spec.model_type not in ("llama",):
        model_type = "llama"
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except Exception as exc:
        raise TraceUnavailable(f"transformers cannot build a {model_type!r} config: {exc}") from None
    config._attn_implementation = "eager" if setup.attention == "eager" else "sdpa"
    if spec.architecture:
        config.architectures = [spec.architecture]
    return config


def _model_class(spec: ModelSpec, transformers: Any) -> Any:
    if spec.family == "bert":
        return {
            "BertForMaskedLM": transformers.AutoModelForMaskedLM,
            "BertForSequenceClassification": transformers.AutoModelForSequenceClassification,
        }.get(spec.architecture, transformers.AutoModelForMaskedLM)
    return transformers.AutoModelForCausalLM


def trace_memory(spec: ModelSpec, setup: TrainSetup, *, steps: int = 2) -> MemoryBreakdown:
    """Run one training step under FakeTensorMode and report what autograd and the optimizer keep.

    ``steps`` steps run; statistics are taken from the last one (the first creates optimizer state).
    """
    torch, transformers = _imports()
    _check_supported(spec, setup)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecations and tracker chatter from inside the libraries
            return _trace(torch, transformers, spec, setup, max(1, steps))
    except TraceUnavailable:
        raise
    except Exception as exc:  # anything inside transformers/peft/torch: fall back to the formula
        raise TraceUnavailable(f"tracing failed: {exc.__class__.__name__}: {exc}") from None


def _trace(torch: Any, transformers: Any, spec: ModelSpec, setup: TrainSetup, steps: int) -> MemoryBreakdown:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from trainer.model import fuse_activations

    config = build_config(spec, setup)
    adapters = setup.uses_adapters
    half = torch.float16 if setup.precision.startswith("fp16") else torch.bfloat16
    if setup.precision == "fp32":
        param_dtype, autocast = torch.float32, None
    elif adapters or setup.precision == "bf16":
        param_dtype, autocast = half, None  # LoRA loads the base in 16 bit; pure bf16 has no autocast
    else:
        param_dtype, autocast = torch.float32, half
    notes = ["trace: one step under FakeTensorMode on the CPU device, recorded by torch MemTracker"]
    with FakeTensorMode(allow_non_fake_inputs=True):
        # LoRA: build in fp32 and cast the frozen base afterwards (fake tensors refuse peft's module casts)
        model = _model_class(spec, transformers).from_config(config, dtype=torch.float32 if adapters else param_dtype)
        # The bundled trainer runs op-by-op tanh GELUs as one kernel (--fused-kernels, on by default):
        # trace what a launched run keeps alive.
        fuse_activations(model)
        if adapters:
            try:
                import peft
            except Exception as exc:
                raise TraceUnavailable(f"LoRA tracing needs peft ({exc})") from None
            targets = sorted(
                {m.name if m.in_block else m.path for m in resolve_targets(spec, tuple(setup.lora_targets))}
            )
            lcfg = peft.LoraConfig(
                r=setup.lora_rank, lora_alpha=2 * setup.lora_rank, target_modules=targets, lora_dropout=0.0
            )
            model = peft.get_peft_model(model, lcfg, autocast_adapter_dtype=False)
            for p in model.parameters():  # frozen base in 16 bit, adapters stay fp32 as peft keeps them
                if not p.requires_grad and p.dtype != param_dtype:
                    p.data = p.data.to(param_dtype)
        if setup.grad_checkpointing == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if adapters and hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = _optimizer(torch, setup, params)
        ids = torch.randint(0, spec.vocab_size, (setup.micro_batch, setup.seq_len))
        mt = MemTracker()
        mt.track_external(model, opt)
        peaks: dict[str, int] = {}
        with mt:
            for step in range(steps):
                last = step == steps - 1
                if step:
                    mt.reset_mod_stats()
                if last:
                    _reset_peak(mt)
                ctx = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
                with ctx:
                    out = model(input_ids=ids, labels=ids)
                loss = out.loss
                del out  # like transformers' Trainer: only the loss survives the forward
                if last:
                    peaks["forward"] = _peak_total(mt)
                    fwd_snap = mt.get_tracker_snapshot("peak")
                    _reset_peak(mt)
                loss.backward()
                del loss
                if last:
                    peaks["backward"] = _peak_total(mt)
                    bwd_snap = mt.get_tracker_snapshot("peak")
                    _reset_peak(mt)
                opt.step()
                if last:
                    peaks["step"] = _peak_total(mt)
                    step_snap = mt.get_tracker_snapshot("peak")
                opt.zero_grad(set_to_none=True)
    best = max(peaks, key=lambda k: peaks[k])
    snap = {"forward": fwd_snap, "backward": bwd_snap, "step": step_snap}[best]
    dev = _dev_snapshot(snap)
    moment = {"forward": "start-of-backward", "backward": "start-of-backward", "step": "optimizer-step"}[best]
    if best == "backward" and dev.get("Gradient", 0) >= 0.9 * _grad_full(spec, setup):
        moment = "end-of-backward" if dev.get("Activation", 0) + dev.get("Temp", 0) < dev.get("Gradient", 0) else moment
    weights = dev.get("Parameter", 0) + dev.get("Buffer", 0)
    grads = dev.get("Gradient", 0)
    optim = dev.get("Optstate", 0)
    acts = dev.get("Activation", 0) + dev.get("Temp", 0) + dev.get("Other", 0)
    notes.append("trace activations include the logits and loss tensors")
    if autocast is not None:
        notes.append("trace used CPU autocast op lists; CUDA autocast differs in a few ops")
    return MemoryBreakdown(
        weights=weights,
        gradients=grads,
        optimizer=optim,
        activations=acts,
        logits=0,
        overhead=CUDA_CONTEXT_BYTES + slack_bytes(acts),
        peak_moment=moment,
        source="trace",
        notes=tuple(notes),
        cuda_context=CUDA_CONTEXT_BYTES,
        allocator_slack=slack_bytes(acts),  # the traced step's transient bytes: its activations and temporaries
    )


def _grad_full(spec: ModelSpec, setup: TrainSetup) -> int:
    from gpuplanner.plan.memory import trainable_params

    return trainable_params(spec, setup) * (2 if setup.precision == "bf16" and setup.method == "full" else 4)


def _optimizer(torch: Any, setup: TrainSetup, params: list[Any]) -> Any:
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if setup.optimizer == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if setup.optimizer == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-3)
    raise TraceUnavailable(f"optimizer {setup.optimizer} cannot be traced")


def _reset_peak(mt: Any) -> None:
    # MemTracker keeps one running peak; restart it from the current usage so each phase gets its own.
    mt._peak_mem = {}
    mt._peak_mem_snap = {}
    for dev, snap in mt.get_tracker_snapshot("current").items():
        mt._peak_mem[dev] = snap.get("Total", 0)
        mt._peak_mem_snap[dev] = dict(snap)


def _peak_total(mt: Any) -> int:
    return sum(s.get("Total", 0) for s in mt.get_tracker_snapshot("peak").values())


def _dev_snapshot(snap: Mapping[Any, Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for dev_snap in snap.values():
        for key, value in dev_snap.items():
            out[key] = out.get(key, 0) + int(value)
    return out
