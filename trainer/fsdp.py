"""FSDP (``--fsdp``): PyTorch FSDP2 ``fully_shard`` on every transformer block, then on the root.

Parameters, gradients and optimizer state are sharded across the data-parallel ranks; each block's
parameters are all-gathered just for its forward and backward. Checkpoints hold *full* (unsharded)
state dicts gathered to rank 0, keyed by parameter name, so they are independent of the rank count
and load into a sharded or an unsharded model alike. Works with NCCL on GPUs and gloo on CPU.
"""

from __future__ import annotations

from typing import Any

import torch


def block_classes(model: torch.nn.Module) -> set[str]:
    """Class names of the transformer blocks: Hugging Face models list them in ``_no_split_modules``."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return names


def shard(model: torch.nn.Module) -> int:
    """Apply ``fully_shard`` to each transformer block and to the root (in place). Returns the block count."""
    from torch.distributed.fsdp import fully_shard

    classes = block_classes(model)
    blocks = [m for m in model.modules() if m is not model and type(m).__name__ in classes]
    if not blocks:
        raise RuntimeError(f"--fsdp: found no transformer blocks to shard in {type(model).__name__}")
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return len(blocks)


def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective (every rank calls it): the unsharded state dict on CPU, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: the unsharded optimizer state keyed by parameter name, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_options(cpu_offload=True))


def load_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every rank passes the full state dict; each keeps its own shard. Keys not given stay as they are."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state, options=_options(strict=False))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=_options())
