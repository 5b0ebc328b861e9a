"""``trainer bench``: a short calibration run of one configuration; throughput and MFU as JSON."""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import replace
from typing import TextIO

from .config import TrainConfig
from .loop import train
from .reports import BenchReport
from .run_state import BenchStats


def bench(config: TrainConfig, warmup_steps: int = 5, steps: int = 30, records: TextIO | None = None) -> BenchReport:
    """``records``: a text stream that receives the run's records (step records and ``run_end`` with the
    time per phase), as ``trainer train`` prints them; None (``trainer bench``): no records."""
    import torch

    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as tmp:
        cfg = replace(
            config,
            run_dir=config.run_dir if config.run_dir != "run" else tmp,
            max_steps=warmup_steps + steps,
            warmup_steps=max(0, config.warmup_steps),
            checkpoint_every_steps=0,
            checkpoint_every_minutes=0,
            resume=False,
            eval_every_steps=0,
            events_stdout=records is not None,
            gpu_interval_s=0,
            cache_dir=config.cache_dir or tmp + "/token-cache",
        )
        stats = BenchStats(warmup_steps=warmup_steps)
        if torch.cuda.is_available() and cfg.device != "cpu":
            torch.cuda.reset_peak_memory_stats()
        code = train(cfg, stdout=records, bench=stats)
        if code != 0 or not stats.step_times:
            raise RuntimeError(f"benchmark run failed (exit {code})")
        if torch.cuda.is_available() and cfg.device != "cpu":
            stats.peak_allocated = int(torch.cuda.max_memory_allocated())
            stats.peak_reserved = int(torch.cuda.max_memory_reserved())
    # Throughput over the wall span of the measured steps (from the end of the last warm-up step to the
    # end of the last step): data loading, the optimizer, telemetry and all bookkeeping between steps
    # count, as they do for any wall-clock comparison (tests/benchmarks/trainer_vs_hf.py).
    n = len(stats.step_times)
    first = len(stats.step_ends) - n
    start = stats.step_ends[first - 1] if first > 0 else stats.loop_start
    total_time = stats.step_ends[-1] - start
    tokens_per_s = stats.tokens_per_step * n / total_time
    world = stats.info.get("world_size", 1)
    report: BenchReport = {**stats.info}
    report.update(
        {
            "method": "lora" if cfg.lora_rank > 0 else "full",
            "seq_len": cfg.seq_len,
            "micro_batch": cfg.micro_batch,
            "grad_accum": cfg.grad_accum,
            "warmup_steps": warmup_steps,
            "measured_steps": n,
            "tokens_per_s": tokens_per_s,
            "samples_per_s": stats.samples_per_step * n / total_time,
            "step_time_s": total_time / n,
            "step_time_p50_s": statistics.median(stats.step_times),
            "data_wait_share": sum(stats.data_waits) / total_time,
            "peak_mem_allocated_bytes": stats.peak_allocated or None,
            "peak_mem_reserved_bytes": stats.peak_reserved or None,
            "flops_per_token": stats.flops_per_token,
            "hardware_flops_per_token": stats.hardware_flops_per_token,
            "peak_flops": stats.peak_flops,
            # MFU as the field reports it (model FLOPs: no recompute, no embedding lookup); HFU with recompute.
            "mfu": utilisation(stats.flops_per_token, tokens_per_s, stats.peak_flops, world),
            "hfu": utilisation(stats.hardware_flops_per_token, tokens_per_s, stats.peak_flops, world),
        }
    )
    return report


def utilisation(flops_per_token: float, tokens_per_s: float, peak_flops: float | None, world: int) -> float | None:
    """Achieved FLOP/s over the peak of ``world`` devices (None when the peak is unknown, e.g. a CPU)."""
    if not peak_flops:
        return None
    return flops_per_token * tokens_per_s / (peak_flops * world)
