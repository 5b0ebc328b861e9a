"""What a run reports about itself: the ``run_start`` record (host, device and model facts), the same
facts for ``trainer bench``, the windowed ``step`` record (throughput, MFU/HFU, spend) and the totals
``run_end`` carries."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch

from . import allocator, protocol
from . import data as data_mod
from . import fsdp as fsdp_mod
from .config import to_dict
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
    """Emits the run's ``run_start`` and ``step`` records and sums up its totals."""

    def _emit_run_start(
        self,
        raw: torch.nn.Module,
        dev_name: str,
        tf32: bool,
        peak: float | None,
        n_params: int,
        n_trainable: int,
        resumed_from_step: int | None,
    ) -> None:
        """The ``run_start`` record (trainer/protocol.py): what this process trains, where and how."""
        c, info = self.config, self.info
        self.tele.emit(
            "run_start",
            at=self.started_wall,
            config=to_dict(c),
            **host_info(self.device),
            world_size=info.world,
            device=dev_name,
            precision=self.precision.name,
            param_dtypes=self.param_dtypes(),
            tf32=tf32,
            loss_impl=self.loss_impl,
            compile=self.compiled,
            alloc_conf=allocator.current() if self.device.type == "cuda" else None,
            params=n_params,
            trainable_params=n_trainable,
            train_sequences=self.data.n_train,
            eval_sequences=self.data.n_eval,
            **self._data_facts(),
            steps_total=self.total_steps,
            flops_per_token=self.flops.model,
            hardware_flops_per_token=self.flops.hardware,
            peak_flops=peak,
            resumed_from_step=resumed_from_step,
            pid=os.getpid(),
            task=c.task,
            fsdp=self.fsdp,
            meta_init=self.meta_init,
            param_bytes_per_rank=fsdp_mod.local_parameter_bytes(self.model),
            model_arch=model_arch(raw),
            **({"labels": self.data.labels} if isinstance(self.data, data_mod.ClassificationData) else {}),
        )

    def _data_facts(self) -> dict[str, Any]:
        """How the causal-LM data was packed and held out (``run_start``'s ``packing`` and ``eval_split``)."""
        if not isinstance(self.data, data_mod.PackedData):
            return {}
        split = "eval-data" if self.config.eval_data else ("random-documents" if self.data.n_eval else "none")
        return {"packing": "documents" if self.data.documents else "stream", "eval_split": split}

    def _fill_bench(
        self, dev_name: str, tf32: bool, peak: float | None, n_params: int, n_trainable: int, gb: int
    ) -> None:
        """``trainer bench``: the run's facts into :class:`~trainer.run_state.BenchStats`."""
        assert self.bench is not None
        c = self.config
        self.bench.flops_per_token, self.bench.peak_flops = self.flops.model, peak
        self.bench.hardware_flops_per_token = self.flops.hardware
        self.bench.tokens_per_step, self.bench.samples_per_step = gb * c.seq_len, gb
        self.bench.info = {
            "device": dev_name,
            "precision": self.precision.name,
            "tf32": tf32,
            "param_dtypes": self.param_dtypes(),
            "loss_impl": self.loss_impl,
            "compile": self.compiled,
            "params": n_params,
            "trainable_params": n_trainable,
            "world_size": self.info.world,
        }

    def param_dtypes(self) -> dict[str, int]:
        """Parameter count per dtype: trained parameters (and so their gradients and optimizer states)
        and frozen ones separately, as the precision promises them."""
        out: dict[str, int] = {}
        for p in self._raw_model().parameters():
            key = ("trained_" if p.requires_grad else "frozen_") + str(p.dtype).replace("torch.", "")
            out[key] = out.get(key, 0) + p.numel()
        return out

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
