"""A plan's settings in people's words (the PDF report's settings table): labels as the Plan form names
them and values with their units ("8.03 B", "2,048 tokens", "TF32 off"), never the JSON keys or raw
numbers. Qt-free; takes the plan document's ``inputs`` (the CLI's names)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplanner.export.human import human_hours, human_money, human_number, significant

PRECISION_WORDS = {"fp32": "fp32", "fp16-mixed": "fp16 mixed", "bf16-mixed": "bf16 mixed", "bf16": "pure bf16"}
OPTIMIZER_WORDS = {
    "adamw": "AdamW",
    "adamw-fused": "AdamW (fused)",
    "adamw-8bit": "8-bit AdamW",
    "sgd": "SGD",
    "adafactor": "Adafactor",
}
SHARDING_WORDS = {"ddp": "DDP (replicated)", "zero2": "ZeRO-2", "fsdp": "FSDP (fully sharded)"}
ATTENTION_WORDS = {"eager": "eager", "sdpa": "SDPA (fused)"}
CHECKPOINTING_WORDS = {"none": "none", "full": "full", "every-other": "every other block", "selective": "selective"}


def count_text(count: float) -> str:
    """A parameter count: "124 M", "8.03 B", "1.1 T"."""
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= size:
            return f"{significant(count / size, 3)} {unit}"
    return f"{count:,.0f}"


def _method(inputs: Mapping[str, Any]) -> str:
    method = str(inputs.get("method") or "")
    if method in ("lora", "qlora"):
        name = "QLoRA (4-bit base)" if method == "qlora" else "LoRA"
        targets = inputs.get("lora_targets") or []
        rank = inputs.get("lora_rank")
        text = f"{name}, rank {rank}" if rank else name
        return text + (f" on {', '.join(str(t) for t in targets)}" if targets else "")
    return {"full": "full fine-tune"}.get(method, method)


def _model(inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    source = inputs.get("model_source")
    if inputs.get("model") and source != "params":
        rows.append(("Model", f"{inputs['model']}" + (" (preset)" if source == "preset" else "")))
    params, active = inputs.get("params"), inputs.get("active_params")
    if params:
        text = count_text(float(params))
        if active and active != params:
            text += f" ({count_text(float(active))} active)"
        rows.append(("Parameters", text))
    if inputs.get("experts"):
        rows.append(("Experts", f"{inputs['experts']}, {inputs.get('experts_per_token') or '?'} per token"))
    return rows


def _batch(inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    micro, accum, seq = inputs.get("micro_batch"), inputs.get("grad_accum"), inputs.get("seq_len")
    gpus = int(inputs.get("gpus") or 1)
    if micro:
        rows.append(("Micro-batch", f"{micro} sequences per GPU"))
    if accum:
        rows.append(("Accumulation steps", f"{accum}"))
    if seq:
        rows.append(("Sequence length", f"{int(seq):,} tokens"))
    if micro and accum:
        sequences = int(micro) * int(accum) * gpus
        tokens = f" ({sequences * int(seq):,} tokens)" if seq else ""
        rows.append(("Global batch", f"{sequences:,} sequences{tokens}"))
    return rows


def _data(inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    epochs = inputs.get("epochs")
    per_epoch = (
        f"{int(inputs['tokens']):,} tokens"
        if inputs.get("tokens")
        else (f"{int(inputs['samples']):,} samples" if inputs.get("samples") else "")
    )
    if per_epoch:
        rows.append(("Data per epoch", per_epoch))
    if epochs:
        rows.append(("Epochs", human_number(float(epochs))))
    if inputs.get("tokens_per_s"):
        rows.append(("Measured speed", f"{human_number(float(inputs['tokens_per_s']))} tokens/s"))
    if inputs.get("samples_per_min"):
        rows.append(("Measured speed", f"{human_number(float(inputs['samples_per_min']))} samples/min"))
    if inputs.get("mfu"):
        rows.append(("MFU", f"{float(inputs['mfu']):.0%}"))
    return rows


def _money(inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("Pricing", str(inputs.get("pricing") or "on-demand"))]
    if inputs.get("price"):
        rows.append(("Price per GPU-hour", human_money(float(inputs["price"]))))
    if inputs.get("spot_price"):
        rows.append(("Spot price per GPU-hour", human_money(float(inputs["spot_price"]))))
    if inputs.get("spot_discount"):
        rows.append(("Spot discount", f"{float(inputs['spot_discount']):.0%}"))
    if inputs.get("interruptions_per_hour"):
        rows.append(("Interruptions", f"{human_number(float(inputs['interruptions_per_hour']))} per hour"))
    if inputs.get("restart_minutes") is not None:
        rows.append(("Restart after a preemption", human_hours(float(inputs["restart_minutes"]) / 60.0)))
    if inputs.get("checkpoint_minutes") is not None:
        rows.append(("Checkpoint every", human_hours(float(inputs["checkpoint_minutes"]) / 60.0)))
    if inputs.get("checkpoint_write_s"):
        rows.append(("Checkpoint write", human_hours(float(inputs["checkpoint_write_s"]) / 3600.0)))
    if inputs.get("spot_overhead_pct"):
        rows.append(("Spot overhead", f"{float(inputs['spot_overhead_pct']):g}%"))
    if inputs.get("deadline_hours"):
        rows.append(("Deadline", human_hours(float(inputs["deadline_hours"]))))
    if inputs.get("budget_usd"):
        rows.append(("Budget", human_money(float(inputs["budget_usd"]))))
    if inputs.get("max_gpu_hours"):
        rows.append(("Max GPU-hours", human_number(float(inputs["max_gpu_hours"]))))
    if inputs.get("headroom"):
        rows.append(("Usable GPU memory", f"{float(inputs['headroom']):.0%}"))
    return rows


def settings_rows(inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` pairs of a plan's settings, in the Plan form's order, set values only."""
    precision = str(inputs.get("precision") or "")
    rows = _model(inputs)
    rows.append(("Method", _method(inputs)))
    if precision:
        rows.append(("Precision", PRECISION_WORDS.get(precision, precision)))
    if "tf32" in inputs:
        rows.append(("TF32 (fp32 matmuls)", "on" if inputs.get("tf32") else "off"))
    if inputs.get("optimizer"):
        rows.append(("Optimizer", OPTIMIZER_WORDS.get(str(inputs["optimizer"]), str(inputs["optimizer"]))))
    rows += _batch(inputs)
    for key, label, words in (
        ("grad_checkpointing", "Gradient checkpointing", CHECKPOINTING_WORDS),
        ("attention", "Attention", ATTENTION_WORDS),
    ):
        if inputs.get(key):
            rows.append((label, words.get(str(inputs[key]), str(inputs[key]))))
    if inputs.get("gpu"):
        rows.append(("GPUs", f"{int(inputs.get('gpus') or 1)} x {inputs['gpu']}"))
    if inputs.get("sharding") and int(inputs.get("gpus") or 1) > 1:
        rows.append(("Sharding", SHARDING_WORDS.get(str(inputs["sharding"]), str(inputs["sharding"]))))
    if inputs.get("engine"):
        rows.append(("Training stack", str(inputs["engine"])))
    if inputs.get("compile"):
        rows.append(("torch.compile", "on"))
    rows += _data(inputs)
    rows += _money(inputs)
    return rows
