"""One configuration of the GPU check, in a process of its own: ``python3 -m tests.gpu.worker SPEC OUT``.

SPEC is the configuration as JSON (written by :mod:`tests.gpu.check`); OUT receives what was measured.
A process per configuration gives each its own CUDA context, so ``max_memory_allocated`` and
nvidia-smi's used memory are this configuration's alone, and an out-of-memory error (the deliberate
probe) or a crash takes nothing else down. The parent kills the process at the configuration's time
budget.

- ``kind: bench``: the bundled trainer's own benchmark (``trainer.bench.bench``: warm-up steps, then
  measured steps; tokens/s, step time, MFU and HFU as the trainer computes them, peak allocated and
  reserved memory), the run's time per phase from its ``run_end`` record, and the highest used memory
  nvidia-smi showed meanwhile; with ``nvml``, the product's NVML sampler paired with nvidia-smi.
- ``kind: hf``: the same work under the Hugging Face ``Trainer`` (+ peft for LoRA), through
  ``tests/benchmarks/trainer_vs_hf.py``'s ``hf``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.gpu.smi import MemoryWatch


class RunEndRecords:
    """A text sink for the trainer's records (``bench(records=...)``): keeps the ``run_end`` record."""

    def __init__(self) -> None:
        self.run_end: dict[str, Any] | None = None
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") == "run_end":
                self.run_end = rec
        return len(text)

    def flush(self) -> None:
        pass


def _train_config(spec: dict[str, Any], work: Path) -> Any:
    from trainer.config import TrainConfig

    model_kwargs: dict[str, Any] = {"model_config": spec["config_path"]}
    if spec["method"] == "qlora":  # QLoRA quantises a saved checkpoint: save the random model first
        model_kwargs = {"model": str(_saved_model(spec, work))}
    return TrainConfig(
        run_dir=str(work / "run"),
        data=[spec["data"]],
        cache_dir=spec["cache_dir"],
        seq_len=spec["seq_len"],
        micro_batch=spec["micro_batch"],
        lr=1e-4,
        warmup_steps=0,
        eval_fraction=0.0,
        device=spec["device"],
        precision=spec["precision"],
        grad_checkpointing=spec["checkpointing"],
        compile=spec["compile"],
        compile_backend=spec["compile_backend"],
        lora_rank=spec["lora_rank"] if spec["method"] != "full" else 0,
        lora_targets=list(spec["lora_targets"]) if spec["method"] != "full" else [],
        qlora=spec["method"] == "qlora",
        **model_kwargs,
    )


def _saved_model(spec: dict[str, Any], work: Path) -> Path:
    import torch
    import transformers

    raw = json.loads(Path(spec["config_path"]).read_text())
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(0)
    from trainer.model import _dtype_kwarg

    model = transformers.AutoModelForCausalLM.from_config(config, **_dtype_kwarg(transformers, torch.bfloat16))
    path = work / "saved-model"
    model.save_pretrained(path)
    from trainer.data import ByteTokenizer

    ByteTokenizer().save_pretrained(path)  # random weights, no tokenizer of their own: bytes, as the trainer saves
    return path


def run_bench(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    from tests.gpu.nvml_compare import PairedSampling, compare, open_sampler_source
    from trainer.bench import bench

    cfg = _train_config(spec, work)
    records = RunEndRecords()
    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(MemoryWatch(spec["smi_command"]))
        paired = None
        if spec.get("nvml"):
            source = open_sampler_source(spec["dry_run"])
            paired = stack.enter_context(PairedSampling(source, spec["smi_command"], spec["nvml_interval_s"]))
        result = bench(cfg, warmup_steps=spec["warmup_steps"], steps=spec["steps"], records=records)
    phases = (records.run_end or {}).get("phases") or {}
    out: dict[str, Any] = {
        "tokens_per_s": result["tokens_per_s"],
        "step_time_s": result["step_time_s"],
        "step_time_p50_s": result["step_time_p50_s"],
        "mfu": result["mfu"],
        "hfu": result["hfu"],
        "peak_allocated_bytes": result["peak_mem_allocated_bytes"],
        "peak_reserved_bytes": result["peak_mem_reserved_bytes"],
        "smi_used_max_bytes": watch.max_bytes,
        "smi_samples": watch.samples,
        "smi_error": watch.reader.error,
        "data_wait_share": result["data_wait_share"],
        "compile_s": result.get("compile_s"),
        "phases_s": phases,
        "params": result["params"],
        "trainable_params": result["trainable_params"],
        "device": result["device"],
        "precision": result["precision"],
        "loss_impl": result["loss_impl"],
        "compiled": result["compile"],
        "flops_per_token": result["flops_per_token"],
        "peak_flops": result["peak_flops"],
        "measured_steps": result["measured_steps"],
    }
    if paired is not None:
        out["nvml"] = {
            **compare(paired.pairs),
            "smi_unsupported_fields": paired.smi.unsupported,
            "smi_error": paired.smi.error,
            "smi_gpm_dmon": paired.dmon,
            "pairs": paired.pairs,
        }
    return out


def run_hf(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    import torch

    from tests.benchmarks.trainer_vs_hf import hf

    args = argparse.Namespace(
        seq_len=spec["seq_len"],
        batch=spec["micro_batch"],
        steps=spec["steps"],
        warmup=spec["warmup_steps"],
        device=spec["device"],
        precision=spec["precision"],
    )
    cuda = spec["device"] != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    lora = {"rank": spec["lora_rank"], "targets": list(spec["lora_targets"])} if spec["method"] == "lora" else None
    with MemoryWatch(spec["smi_command"]) as watch:
        tokens_per_s = hf(
            Path(spec["config_path"]),
            args,
            work,
            data=[spec["data"]],
            lora=lora,
            checkpointing=spec["checkpointing"] != "off",
        )
    return {
        "tokens_per_s": tokens_per_s,
        "step_time_s": spec["micro_batch"] * spec["seq_len"] / tokens_per_s,
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()) if cuda else None,
        "smi_used_max_bytes": watch.max_bytes,
        "smi_samples": watch.samples,
        "smi_error": watch.reader.error,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.gpu.worker")
    p.add_argument("spec")
    p.add_argument("out")
    a = p.parse_args(argv)
    spec = json.loads(Path(a.spec).read_text())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{spec['name']}-", dir=spec.get("work_dir")) as tmp:
        measured = (run_hf if spec["kind"] == "hf" else run_bench)(spec, Path(tmp))
    measured["wall_s"] = time.perf_counter() - started
    Path(a.out).write_text(json.dumps(measured, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
