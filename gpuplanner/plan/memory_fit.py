"""What fits: the largest micro-batch a GPU holds and concrete, re-estimated changes that make a setup fit.
Built on :func:`gpuplanner.plan.memory.estimate_memory`. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gpuplanner.plan.memory import GIB, estimate_memory, fits
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.setup import PlanInputError, TrainSetup

MAX_MICRO_BATCH = 1024
SHARD_COUNTS = (2, 4, 8, 16, 32, 64)  # the GPU counts sharding suggestions try


def max_micro_batch(spec: ModelSpec, setup: TrainSetup, capacity_gib: float, headroom: float = 0.95) -> int:
    """Largest micro-batch (up to 1024) that fits; 0 when even 1 does not."""

    def ok(mb: int) -> bool:
        return fits(estimate_memory(spec, replace(setup, micro_batch=mb)), capacity_gib, headroom)

    if not ok(1):
        return 0
    lo, hi = 1, MAX_MICRO_BATCH
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _keep_batch(spec: ModelSpec, setup: TrainSetup, cap: float, headroom: float) -> TrainSetup | None:
    """Smaller micro-batch k with more accumulation m so that k*m stays micro_batch*grad_accum."""
    per_gpu = setup.micro_batch * setup.grad_accum
    best = max_micro_batch(spec, replace(setup, micro_batch=1, grad_accum=per_gpu), cap, headroom)
    if best < 1:
        return None
    for k in range(min(best, setup.micro_batch - 1), 0, -1):
        if per_gpu % k == 0:
            return replace(setup, micro_batch=k, grad_accum=per_gpu // k)
    return None


def _variant(setup: TrainSetup, **changes: Any) -> TrainSetup | None:
    """``setup`` with ``changes``, or None when that combination is not a valid setup (QLoRA in fp32)."""
    try:
        return replace(setup, **changes)
    except PlanInputError:
        return None


def fit_suggestions(
    spec: ModelSpec,
    setup: TrainSetup,
    capacity_gib: float,
    headroom: float = 0.95,
    larger_gpus: Sequence[tuple[str, float]] = (),
) -> list[str]:
    """Concrete changes, each re-estimated and checked to fit; empty when the setup already fits."""
    if fits(estimate_memory(spec, setup), capacity_gib, headroom):
        return []
    out: list[str] = []

    def check(candidate: TrainSetup | None, text: str) -> bool:
        if candidate is not None and fits(estimate_memory(spec, candidate), capacity_gib, headroom):
            total = estimate_memory(spec, candidate).total / GIB
            out.append(f"{text} (≈{total:.1f} GiB)")
            return True
        return False

    if setup.grad_checkpointing != "full":
        check(replace(setup, grad_checkpointing="full"), "enable full gradient checkpointing")
    smaller = _keep_batch(spec, setup, capacity_gib, headroom)
    if smaller is not None:
        check(
            smaller,
            f"micro-batch {smaller.micro_batch} with {smaller.grad_accum} accumulation steps (same effective batch)",
        )
    elif setup.grad_checkpointing != "full":
        ck = replace(setup, grad_checkpointing="full")
        smaller = _keep_batch(spec, ck, capacity_gib, headroom)
        if smaller is not None:
            check(
                smaller,
                f"full gradient checkpointing with micro-batch {smaller.micro_batch} and {smaller.grad_accum} accumulation steps",
            )
    if setup.optimizer != "adamw-8bit" and setup.method == "full":
        check(replace(setup, optimizer="adamw-8bit"), "8-bit AdamW (bitsandbytes)")
    if setup.method == "full":
        try:
            lora = replace(setup, method="lora")
            if not check(lora, f"LoRA rank {setup.lora_rank} on {', '.join(setup.lora_targets)}"):
                qsetup = replace(
                    setup, method="qlora", precision="bf16-mixed" if setup.precision == "fp32" else setup.precision
                )
                if not check(qsetup, f"QLoRA (4-bit base) rank {setup.lora_rank}"):
                    check(replace(qsetup, grad_checkpointing="full"), "QLoRA with full gradient checkpointing")
        except ValueError:
            pass
    elif setup.method == "lora":
        check(_variant(setup, method="qlora"), "QLoRA (4-bit base) instead of LoRA")
    if not out:  # sharding over more GPUs only when no change on this many GPUs makes it fit
        for n in SHARD_COUNTS:
            if n > setup.gpus and check(replace(setup, sharding="fsdp", gpus=n), f"FSDP (ZeRO-3) over {n} GPUs"):
                break
    if not out:  # nothing single works: combine checkpointing, a smaller micro-batch and a lighter method
        combos = [setup] + ([replace(setup, method="lora")] if setup.method == "full" else [])
        if setup.method != "qlora":
            combos.append(
                replace(setup, method="qlora", precision="bf16-mixed", tf32=False)  # TF32 is for fp32 only
                if setup.precision == "fp32"
                else replace(setup, method="qlora")
            )
        for base in combos:
            ck = replace(base, grad_checkpointing="full")
            small = _keep_batch(spec, ck, capacity_gib, headroom) if ck.micro_batch > 1 else None
            cand = small or ck
            label = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA (4-bit base)"}[base.method]
            if check(
                cand,
                f"{label} with full gradient checkpointing, micro-batch {cand.micro_batch} and "
                f"{cand.grad_accum} accumulation steps (same effective batch)",
            ):
                break
    larger = sorted(((name, cap) for name, cap in larger_gpus if cap > capacity_gib), key=lambda x: x[1])
    for name, cap in larger:
        if fits(estimate_memory(spec, setup), cap, headroom):
            out.append(f"a larger GPU: {name} ({cap:.1f} GiB)")
            return out
    if larger and not out:
        out += _elsewhere(spec, setup, larger, headroom)
    return out


def _lighter_setups(setup: TrainSetup) -> list[tuple[TrainSetup, str]]:
    """The setup, then LoRA and QLoRA of it (lighter methods first only when lighter than the given one),
    each with full gradient checkpointing and micro-batch 1 (the same effective batch), and a label."""
    out: list[tuple[TrainSetup, str]] = []
    methods = ("full", "lora", "qlora")
    for method in methods[methods.index(setup.method) :]:
        precision = "bf16-mixed" if method == "qlora" and setup.precision == "fp32" else setup.precision
        candidate = _variant(
            setup,
            method=method,
            precision=precision,
            tf32=setup.tf32 and precision == "fp32",
            grad_checkpointing="full",
            micro_batch=1,
            grad_accum=setup.micro_batch * setup.grad_accum,
        )
        if candidate is not None:
            label = {"full": "the full fine-tune", "lora": "LoRA", "qlora": "QLoRA (4-bit base)"}[method]
            out.append((candidate, f"{label} with full gradient checkpointing and micro-batch 1"))
    return out


def _elsewhere(spec: ModelSpec, setup: TrainSetup, larger: Sequence[tuple[str, float]], headroom: float) -> list[str]:
    """When nothing on this GPU makes it fit: the smallest larger GPU that holds the lightest change (LoRA or
    QLoRA when the given method does not fit anywhere), and how many of the largest GPU FSDP needs for the
    given method (each re-estimated and checked)."""
    out: list[str] = []
    smallest = float("inf")  # a lighter method is named only when it fits a smaller GPU than a heavier one
    for candidate, label in _lighter_setups(setup):
        memory = estimate_memory(spec, candidate)
        hit = next(((n, c) for n, c in larger if c < smallest and fits(memory, c, headroom)), None)
        if hit is not None:
            out.append(f"{label} on a larger GPU: {hit[0]} ({hit[1]:.0f} GiB; ≈{memory.total / GIB:.1f} GiB)")
            smallest = hit[1]
    name, cap = larger[-1]
    for n in SHARD_COUNTS:
        if n <= setup.gpus:
            continue
        sharded = _variant(setup, sharding="fsdp", gpus=n, grad_checkpointing="full")
        if sharded is not None and fits(estimate_memory(spec, sharded), cap, headroom):
            total = estimate_memory(spec, sharded).total / GIB
            out.append(f"FSDP (ZeRO-3) over {n} x {name} with full gradient checkpointing (≈{total:.1f} GiB per GPU)")
            break
    return out
