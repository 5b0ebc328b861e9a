"""One optimizer step's arithmetic: the learning-rate schedule, the optimizer, the loss of a micro-batch,
gradient accumulation normalised by the real target count, and the DDP wrapper.

Functions of their arguments, no trainer state; the training loop (``trainer/loop.py``) calls them
once per step.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.nn.functional as F

from .config import TrainConfig
from .losses import IGNORE_INDEX, causal_loss_sum


def lr_at(step: int, base: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to ``base`` then cosine decay to ``base * min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), foreach=True)


def target_count(batch: dict[str, torch.Tensor]) -> int:
    """Loss targets of a micro-batch: one per example (classification), the next tokens that are targets
    (``targets``: prompts and document ends are not), or every next token."""
    ids = batch["input_ids"]
    if "labels" in batch:  # classification: one target per example
        return int(ids.shape[0])
    if "targets" in batch:
        return int((batch["targets"] != IGNORE_INDEX).sum())
    return int(ids.shape[0] * (ids.shape[1] - 1))


def classification_logits(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device, autocast: Any
) -> torch.Tensor:
    ids = batch["input_ids"].to(device, non_blocking=True)
    mask = batch["attention_mask"].to(device, non_blocking=True)
    with autocast():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def classification_loss_sum(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device, autocast: Any
) -> torch.Tensor:
    """Summed cross-entropy over the examples of a micro-batch (fp32 logits)."""
    logits = classification_logits(model, batch, device, autocast)
    return F.cross_entropy(logits, batch["labels"].to(device, non_blocking=True), reduction="sum")


def _grad_sync(model: torch.nn.Module, world: int, last: bool, defer_fsdp: bool = False) -> Any:
    """DDP: ``no_sync`` before the last micro-batch (its gradients are full-size on every rank either way).

    FSDP2: reduce-scatter after every micro-batch (torchtitan's choice), so a rank only ever holds its
    shard of the gradient (FSDP2 adds each micro-step's reduced shard to the sharded ``.grad``). With
    ``defer_fsdp`` (``--fsdp-defer-grad-sync``) the reduce-scatter runs only on the last micro-batch:
    one collective per step, but FSDP2 keeps the whole unsharded gradient on every rank in between."""
    set_sync, no_sync = getattr(model, "set_requires_gradient_sync", None), getattr(model, "no_sync", None)
    if world > 1 and set_sync is not None:
        set_sync(last or not defer_fsdp)
        return contextlib.nullcontext()
    if world > 1 and not last and no_sync is not None:
        return no_sync()
    return contextlib.nullcontext()


def accumulate(
    model: torch.nn.Module,
    micro_batches: list[dict[str, torch.Tensor]],
    device: torch.device,
    autocast: Any,
    global_targets: int,
    world: int = 1,
    scaler: Any = None,
    loss_fn: Any = causal_loss_sum,
    defer_fsdp_sync: bool = False,
) -> torch.Tensor:
    """Forward/backward over the micro-batches of one optimizer step.

    Each micro-batch's summed loss is divided by the real target count of the whole step across all
    ranks (times ``world``, since DDP and FSDP average gradients), so the gradient equals that of one
    big batch. DDP all-reduces only on the last micro-batch; FSDP reduce-scatters every micro-batch
    (only on the last with ``defer_fsdp_sync``), see :func:`_grad_sync`.
    Targets are next tokens (``causal_loss_sum``) or class labels (``classification_loss_sum``).
    Returns the summed loss (a device tensor; no host sync here).
    """
    total = torch.zeros((), device=device)
    for k, batch in enumerate(micro_batches):
        with _grad_sync(model, world, k == len(micro_batches) - 1, defer_fsdp_sync):
            loss = loss_fn(model, batch, device, autocast)
            scaled = loss * (world / global_targets)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach()
    return total


# DDP's gradient bucket size: PyTorch's default is 25 MB; fewer, larger all-reduces overlap the backward
# better on fast interconnects (torchtitan uses 100 MB for its DDP, torchtitan/models/llama3/infra/parallelize.py).
DDP_BUCKET_MB = 100


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP as the fast trainers set it up: gradients are views into the all-reduce buckets
    (``gradient_as_bucket_view``: no second copy of the gradients, no copy in and out of the buckets),
    and 100 MB buckets. Not ``static_graph``: on this trainer's models (GPT-2 with its tied head and
    the chunked loss) static-graph DDP averaged wrong gradients in our 2-process gloo test, with or
    without accumulation (weights off by up to 9e-3 from the one-process big batch after 6 steps),
    and without ``find_unused_parameters`` it would save little."""
    return torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=True,
        bucket_cap_mb=DDP_BUCKET_MB,
    )
