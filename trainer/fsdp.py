"""FSDP (``--fsdp``): PyTorch FSDP2 ``fully_shard`` on every transformer block, an untied embedding and
output head (a unit each), then the root; under ``*-mixed`` with torchtitan's mixed-precision policy.

Parameters, gradients and optimizer state are sharded across the data-parallel ranks; each block's
parameters are all-gathered just for its forward and backward. Checkpoints are sharded DCP saves
(``trainer/sharded_checkpoint.py``), keyed by parameter name, so they reload on another rank count; the
finished model (``final/``) is gathered to full tensors. With meta-device initialisation
(:func:`materialise`) no rank but rank 0 ever holds the whole model, and rank 0 only on the CPU.
Works with NCCL on GPUs and gloo on CPU.
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


def mixed_precision(compute: torch.dtype | None) -> Any:
    """torchtitan's FSDP2 policy under ``*-mixed``: all-gather the parameters in the 16-bit compute dtype
    (half the gather traffic and the unsharded copy's memory) and reduce-scatter gradients in fp32; the
    sharded master weights and optimizer states stay fp32. None (fp32, pure bf16): gather as stored."""
    if compute is None or compute == torch.float32:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)


def _own_group_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The input embedding and the output head, when they do not share a weight (torchtitan shards them
    as units of their own: their all-gathers then overlap the first and last blocks instead of holding
    the largest matrices for the whole step in the root unit). Tied, they stay in the root."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    try:
        emb = get_in() if get_in else None
        head = get_out() if get_out else None
    except (AttributeError, NotImplementedError):
        return []
    emb_w, head_w = getattr(emb, "weight", None), getattr(head, "weight", None)
    if emb is None or head is None or emb_w is None or head_w is None or emb_w is head_w:
        return []
    return [emb, head]


def offload_policy(offload: bool) -> Any:
    """FSDP2's ``CPUOffloadPolicy`` under ``--optimizer-offload``: the sharded parameters, their gradients
    and the optimizer states live in CPU memory (pinned with CUDA, for asynchronous copies) and the
    optimizer steps there; each unit's parameters are copied to the GPU for its all-gather. None: off."""
    if not offload:
        return None
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=torch.cuda.is_available())


def shard(model: torch.nn.Module, compute: torch.dtype | None = None, offload: bool = False) -> int:
    """Apply ``fully_shard`` to each transformer block, to an untied embedding and head (one unit each),
    and to the root (in place), with :func:`mixed_precision` of ``compute`` (the autocast dtype under
    ``*-mixed``, else None) and :func:`offload_policy`. The untied output head stays gathered from its
    forward through its backward (``reshard_after_forward=False``, as torchtitan's last unit): its backward
    comes right after its forward, so resharding would only gather it again. Returns the number of units
    below the root."""
    from torch.distributed.fsdp import fully_shard

    policy = mixed_precision(compute)
    kw: dict[str, Any] = {"mp_policy": policy} if policy is not None else {}
    cpu = offload_policy(offload)
    if cpu is not None:
        kw["offload_policy"] = cpu
    classes = block_classes(model)
    blocks = [m for m in model.modules() if m is not model and type(m).__name__ in classes]
    if not blocks:
        raise RuntimeError(f"--fsdp: found no transformer blocks to shard in {type(model).__name__}")
    own = _own_group_modules(model)
    units = [*own, *blocks]
    for unit in units:
        head = bool(own) and unit is own[-1]
        fully_shard(unit, **{**kw, **({"reshard_after_forward": False} if head else {})})
    fully_shard(model, **kw)
    return len(units)


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of gradients this rank holds now: each parameter's ``.grad`` as stored here (its local shard
    under FSDP) and, under FSDP2, the unsharded gradients it accumulates between micro-steps whose
    reduce-scatter is deferred (``set_requires_gradient_sync(False)``; FSDP2 keeps them on its own
    parameter records, not in ``.grad``: on the unsharded parameter, or upcast to ``reduce_dtype``)."""
    total = 0
    for p in model.parameters():
        g = p.grad
        if g is not None:
            local = g.to_local() if hasattr(g, "to_local") else g
            total += local.numel() * local.element_size()
    for m in model.modules():
        get_state = getattr(m, "_get_fsdp_state", None)
        group = getattr(get_state(), "_fsdp_param_group", None) if get_state is not None else None
        for fp in getattr(group, "fsdp_params", None) or ():
            unsharded = getattr(fp, "_unsharded_param", None)
            for acc in (getattr(fp, "unsharded_accumulated_grad", None), getattr(unsharded, "grad", None)):
                if acc is not None:
                    total += acc.numel() * acc.element_size()
    return total


def non_persistent_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Buffers a state dict leaves out (rotary ``inv_freq``, attention masks): computed when a module
    is built, so a model built on the meta device has none of their values."""
    out: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules():
        for name in sorted(getattr(module, "_non_persistent_buffers_set", ())):
            buf = module._buffers.get(name)
            if buf is not None:
                out[f"{prefix}.{name}" if prefix else name] = buf
    return out


def meta_init_wanted(config: Any) -> bool:
    """Meta-device initialisation applies to FSDP full fine-tuning of a causal LM (LoRA, QLoRA and
    classification heads keep the ordinary load)."""
    return bool(
        config.fsdp and config.meta_init and config.task != "seq-cls" and config.lora_rank == 0 and not config.qlora
    )


def materialise(
    model: torch.nn.Module,
    device: torch.device,
    full_state: dict[str, Any] | None,
    buffers: dict[str, torch.Tensor] | None,
) -> None:
    """Collective, after :func:`shard` of a model built on the meta device: allocate each rank's shards
    (and the unsharded buffers) on ``device``, then fill them from rank 0's full state dict, which rank 0
    passes (the others pass None): ``set_model_state_dict`` broadcasts it piece by piece and each rank
    keeps only its shard. Non-persistent buffers are not in a state dict; rank 0 broadcasts its values."""
    import torch.distributed as tdist
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    model.to_empty(device=device)
    set_model_state_dict(model, full_state or {}, options=_options(broadcast_from_rank0=True))
    rank0 = tdist.get_rank() == 0
    for name, buf in non_persistent_buffers(model).items():
        if rank0:
            if buffers is None or name not in buffers:
                raise RuntimeError(f"meta-device initialisation: rank 0 has no value for buffer {name}")
            buf.copy_(buffers[name])
        tdist.broadcast(buf, src=0)


def local_parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of parameters this rank holds (its shards under FSDP; each tied parameter once)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_model_state(model: torch.nn.Module) -> dict[str, Any]:
    """Collective (every rank calls it): the unsharded state dict on CPU, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: the unsharded optimizer state keyed by parameter name, on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_options(cpu_offload=True))


def load_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Every rank passes the full state dict; each keeps its own shard. Keys not given stay as they are."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state, options=_options(strict=False))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=_options())
