"""The fastest training settings that fit one GPU option, keeping what the training means.

For a GPU of given memory, the candidates keep the effective batch (a smaller micro-batch with more
accumulation), then add gradient checkpointing (every other layer, then every layer), 8-bit AdamW
states and, over several GPUs, ZeRO-2 or FSDP sharding. Every candidate is checked with the memory
model, and the one the step model finds fastest wins. The method (full, LoRA, QLoRA), precision and
sequence length are never changed: they change what is trained, not how it fits. Settings named in
``pinned`` are left as the user set them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace

from gpuplanner.plan.memory import MemoryBreakdown, estimate_memory, fits
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.setup import TrainSetup

# Settings ``pinned`` may name (TrainSetup field names).
PINNABLE = ("micro_batch", "grad_checkpointing", "optimizer", "sharding")
CHANGE_PENALTY = 0.01
_MORE_CHECKPOINTING = {
    "none": ("none", "every-other", "full"),
    "every-other": ("every-other", "full"),
    "full": ("full",),
    "selective": ("selective", "full"),
}


@dataclass(frozen=True)
class FittedSetup:
    setup: TrainSetup
    changes: tuple[str, ...]  # what differs from the requested setup, in words


def _micro_batches(setup: TrainSetup) -> Iterator[tuple[int, int]]:
    """(micro_batch, grad_accum) pairs with the same samples per GPU per step, largest first."""
    per_gpu = setup.micro_batch * setup.grad_accum
    for k in range(setup.micro_batch, 0, -1):
        if per_gpu % k == 0:
            yield k, per_gpu // k


def candidates(setup: TrainSetup, pinned: Collection[str] = ()) -> Iterator[TrainSetup]:
    """Every variant of ``setup`` that keeps the effective batch, method, precision and sequence length."""
    batches = [(setup.micro_batch, setup.grad_accum)] if "micro_batch" in pinned else list(_micro_batches(setup))
    ckpts = (
        (setup.grad_checkpointing,) if "grad_checkpointing" in pinned else _MORE_CHECKPOINTING[setup.grad_checkpointing]
    )
    optimizers = [setup.optimizer]
    if "optimizer" not in pinned and setup.optimizer in ("adamw", "adamw-fused"):
        optimizers.append("adamw-8bit")
    shardings = [setup.sharding]
    if "sharding" not in pinned and setup.gpus > 1:
        shardings += [s for s in ("zero2", "fsdp") if s != setup.sharding]
    for mb, accum in batches:
        for ckpt in ckpts:
            for optimizer in optimizers:
                for sharding in shardings:
                    yield replace(
                        setup,
                        micro_batch=mb,
                        grad_accum=accum,
                        grad_checkpointing=ckpt,
                        optimizer=optimizer,
                        sharding=sharding,
                    )


def describe_changes(old: TrainSetup, new: TrainSetup) -> tuple[str, ...]:
    changes = []
    if (new.micro_batch, new.grad_accum) != (old.micro_batch, old.grad_accum):
        changes.append(f"micro-batch {new.micro_batch} x {new.grad_accum} accumulation")
    if new.grad_checkpointing != old.grad_checkpointing:
        changes.append(f"checkpointing {new.grad_checkpointing}")
    if new.optimizer != old.optimizer:
        changes.append(f"optimizer {new.optimizer}")
    if new.sharding != old.sharding:
        changes.append(f"sharding {new.sharding}")
    return tuple(changes)


@dataclass(frozen=True)
class Candidate:
    """One candidate setting with what does not depend on the GPU: its memory and its changes."""

    setup: TrainSetup
    memory: MemoryBreakdown
    changes: tuple[str, ...]
    weight: float  # what a change costs: the speed is multiplied by this before comparing


def fitting_candidates(
    setup: TrainSetup, pinned: Collection[str], memory: Callable[[TrainSetup], MemoryBreakdown]
) -> tuple[Candidate, ...]:
    """Every candidate of ``setup`` (:func:`candidates`, in that order) with its memory and changes.

    None of it depends on the GPU, so ``compare`` builds this once per GPU count and setup and tries it
    on every GPU with :func:`fastest_candidate`."""
    out = []
    for candidate in candidates(setup, pinned):
        changes = describe_changes(setup, candidate)
        out.append(Candidate(candidate, memory(candidate), changes, 1.0 - CHANGE_PENALTY * len(changes)))
    return tuple(out)


def fastest_candidate(
    requested: Candidate,
    options: Sequence[Candidate],
    capacity_gib: float,
    headroom: float,
    speed: Callable[[TrainSetup], float],
) -> FittedSetup | None:
    """:func:`fastest_fitting` over candidates built beforehand (``requested``: the setup as asked, with
    its memory)."""
    if fits(requested.memory, capacity_gib, headroom):
        return FittedSetup(requested.setup, ())
    best: tuple[float, Candidate] | None = None
    for option in options:
        if not fits(option.memory, capacity_gib, headroom):
            continue
        # each change must buy more than 1% of speed: no 8-bit states or sharding for nothing
        score = speed(option.setup) * option.weight
        if best is None or score > best[0]:
            best = (score, option)
    if best is None:
        return None
    return FittedSetup(best[1].setup, best[1].changes)


def fastest_fitting(
    model: ModelSpec,
    setup: TrainSetup,
    capacity_gib: float,
    headroom: float,
    speed: Callable[[TrainSetup], float],
    pinned: Collection[str] = (),
    memory: Callable[[TrainSetup], MemoryBreakdown] | None = None,
) -> FittedSetup | None:
    """The candidate that fits in ``capacity_gib x headroom`` with the highest ``speed`` (tokens/s);
    the requested setup itself when it fits; None when nothing fits. ``memory`` estimates a candidate's
    memory (default :func:`estimate_memory` of ``model``)."""
    memory_of = memory or (lambda s: estimate_memory(model, s))
    requested = Candidate(setup, memory_of(setup), (), 1.0)
    if fits(requested.memory, capacity_gib, headroom):
        return FittedSetup(setup, ())
    return fastest_candidate(requested, fitting_candidates(setup, pinned, memory_of), capacity_gib, headroom, speed)
