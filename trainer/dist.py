"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""

from __future__ import annotations

import os
from dataclasses import dataclass

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
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))

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
