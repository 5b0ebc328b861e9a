"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Element-wise max over ranks (the stop flag and checkpoint-due flag: see :class:`AgreeSchedule`)."""
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


class AgreeSchedule:
    """When the ranks agree on the stop flag and a time-based checkpoint (an all-reduce whose result the
    host must read: a CPU-GPU sync that drains the GPU's queue of work).

    Agreeing after every step costs that sync every step; here the ranks agree every ``every`` steps,
    or, with ``every`` 0, about every ``target_s`` seconds: at each agreement every rank proposes the
    number of steps that took about ``target_s`` on it, and the all-reduce that agrees on the flags also
    takes the smallest proposal (max of the negatives), so every rank knows the same next agreement step
    without another collective. A stop signal is acted on at most that long after it arrives.
    Steps that every rank knows alike (a step-based checkpoint, the last step) need no agreement and are
    handled by the caller. One process: every step is an agreement (there is nothing to sync).
    """

    def __init__(self, info: DistInfo, every: int = 0, target_s: float = 1.0, most: int = 50) -> None:
        self.info, self.every, self.target_s, self.most = info, every, target_s, most
        self.next_step = 0  # agree after the first step: a stop during start-up is acted on at once
        self.since_t: float | None = None
        self.since_step = 0
        self.count = 0  # agreements made (for tests and telemetry)

    def due(self, step: int) -> bool:
        return not self.info.distributed or step >= self.next_step

    def proposal(self, step: int, now: float) -> int:
        """Steps until the next agreement, as this rank sees it."""
        if self.every > 0:
            return self.every
        if self.since_t is None or step <= self.since_step:
            return 1
        per_step = (now - self.since_t) / (step - self.since_step)
        return max(1, min(self.most, int(self.target_s / per_step) if per_step > 0 else self.most))

    def agree(self, step: int, flags: list[int], device: torch.device, clock: Any = time.monotonic) -> list[int]:
        """Collective: the element-wise max of ``flags`` over ranks; sets the next agreement step."""
        self.count += 1
        if not self.info.distributed:
            return flags
        out = all_max([*flags, -self.proposal(step, clock())], self.info, device)
        self.next_step = step + max(1, -out[-1])
        self.since_t, self.since_step = clock(), step  # after the collective: the span holds whole steps
        return out[:-1]
