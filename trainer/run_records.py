"""What a run reports about itself: the host and model facts of ``run_start``, the windowed ``step``
record (throughput, MFU/HFU, spend) and the totals ``run_end`` carries."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch

from . import protocol
from .trainer_core import TrainerCore


def host_info(device: torch.device) -> dict[str, Any]:
    gpus = []
    if device.type == "cuda":
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "mem_total_bytes": p.total_memory})
    return {"host": socket.gethostname(), "gpus": gpus, "cpu_count": os.cpu_count()}


def peak_mem(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


def model_arch(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's Hugging Face config for ``run_start`` (:func:`trainer.protocol.model_arch`); None without one
    (a LoRA-wrapped model forwards ``config`` to its base)."""
    hf_config = getattr(model, "config", None)
    to_dict = getattr(hf_config, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        return protocol.model_arch(to_dict())
    except (TypeError, ValueError):
        return None


class Reporting(TrainerCore):
    def _emit_step(
        self, win: dict[str, Any], gb: int, fpt: float, peak: float | None, lr: float, sample_ids: list[int] | None
    ) -> None:
        c, s = self.config, self.state
        now = time.perf_counter()
        dt = max(1e-9, now - win["t"])
        loss = float((win["loss"] / max(1, win["targets"])).item())  # the one host sync, at logging only
        tokens_per_s = win["steps"] * gb * c.seq_len / dt
        rec: dict[str, Any] = dict(
            step=s.step,
            epoch=s.epoch,
            loss=loss,
            lr=lr,
            tokens_total=s.tokens_total,
            samples_total=s.samples_total,
            tokens_per_s=tokens_per_s,
            samples_per_s=win["steps"] * gb / dt,
            step_time_s=dt / win["steps"],
            data_wait_s=win["wait"] / win["steps"],
            peak_mem_bytes=peak_mem(self.device),
            mfu=(fpt * tokens_per_s / (peak * self.info.world)) if peak else None,
            hfu=(self.flops.hardware * tokens_per_s / (peak * self.info.world)) if peak else None,
            spend_usd=self._spend(),
            gpu_hours=s.gpu_hours,
            elapsed_s=s.elapsed_s,
            steps_in_record=win["steps"],
            **self.phase_fields(),
        )
        if self.compile_clock is not None:  # paid time spent compiling so far in this process
            rec["compile_s"] = round(self.compile_clock.seconds, 3)
        if sample_ids is not None:
            rec["sample_ids"] = sample_ids
        self.tele.emit("step", **rec)
        win.update(t=now, steps=0, wait=0.0, targets=0)
        win["loss"] = torch.zeros((), device=self.device)

    def _totals(self) -> dict[str, Any]:
        s = self.state
        return {
            "steps": s.step,
            "tokens_total": s.tokens_total,
            "samples_total": s.samples_total,
            "spend_usd": self._spend(),
            "gpu_hours": s.gpu_hours,
            "elapsed_s": s.elapsed_s,
        }
