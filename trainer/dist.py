"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as torch_dist


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @classmethod
    def from_env(cls) -> DistInfo:
        return cls(
            int(os.environ.get("RANK", 0)),
            int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)),
            int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def init(info: DistInfo, device: torch.device) -> None:
    if info.distributed and not torch_dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch_dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")


def shutdown() -> None:
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    if info.distributed:
        torch_dist.barrier()


def all_max(values: list[int], info: DistInfo, device: torch.device) -> list[int]:
    """Element-wise max over ranks (the stop flag and checkpoint-due flag agreed at each step)."""
    if not info.distributed:
        return values
    t = torch.tensor(values, dtype=torch.int64, device=device)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def all_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.distributed:
        torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM)
    return t


def storage_leader(info: DistInfo, run_dir: Path) -> int:
    """The lowest rank whose run directory is the same folder as this rank's (its node's file writer).

    Each node's local rank 0 drops a uniquely named token file into its run directory; every rank
    looks for every token in its own run directory. With one shared file system every rank sees
    rank 0's token (leader 0 everywhere, as before); with a disk per node each node's local rank 0
    leads its node. A collective: every rank must call it.
    """
    if not info.distributed:
        return info.rank
    token = None
    if info.local_rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        token = f".storage-rank{info.rank}-{secrets.token_hex(8)}"
        (run_dir / token).write_bytes(b"")
    tokens: list[str | None] = [None] * info.world
    torch_dist.all_gather_object(tokens, token)
    visible = [r for r, t in enumerate(tokens) if t is not None and (run_dir / t).exists()]
    torch_dist.barrier()
    if token is not None:
        try:
            (run_dir / token).unlink()
        except OSError:
            pass
    if not visible:  # a run dir this rank cannot see its node's token in: write its own files
        return info.rank
    return min(visible)
