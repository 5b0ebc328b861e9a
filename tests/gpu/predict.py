"""What the planner predicts for a configuration of the GPU check, from the inputs a user gives
``gpuplanner plan`` (:class:`PlanInputs`: the model's config.json, method, precision, micro-batch,
sequence length, checkpointing, the GPU), planned by ``make_plan`` against the shipped catalog.

Only ``gpuplanner.plan`` is imported (pure: no database, no network), so this runs with a plain
``python3`` that has none of the desktop side's dependencies.
"""

from __future__ import annotations

from typing import Any

from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.plan.planner import make_plan

GIB = 1024**3
# The trainer's --grad-checkpointing values as the planner's --grad-checkpointing values.
CHECKPOINTING = {"off": "none", "every": "full", "every-other": "every-other", "selective": "selective"}


def catalog_gpu_name(device_name: str | None) -> str | None:
    """The catalog's name for the GPU a driver reports (``NVIDIA H100 80GB HBM3`` -> its catalog entry)."""
    if not device_name:
        return None
    spec = load_catalog().find_gpu(device_name)
    if spec is None:  # "NVIDIA H100 80GB HBM3": try the words before the memory size too
        words = device_name.replace("NVIDIA", "").split()
        for n in range(len(words), 0, -1):
            spec = load_catalog().find_gpu(" ".join(words[:n]))
            if spec is not None:
                break
    return spec.name if spec is not None else None


def plan_inputs(row: dict[str, Any], gpu: str) -> PlanInputs:
    return PlanInputs(
        model_config=row["config_path"],
        method=row["method"],
        lora_rank=row["lora_rank"],
        lora_targets=tuple(row["lora_targets"]),
        precision=row["precision"],
        micro_batch=row["micro_batch"],
        grad_accum=1,
        seq_len=row["seq_len"],
        grad_checkpointing=CHECKPOINTING[row["checkpointing"]],
        attention="sdpa",
        gpu=gpu,
        gpus=1,
    )


def predict(row: dict[str, Any], gpu: str) -> dict[str, Any]:
    """The plan's speed and peak memory (as each tool measures it) for one configuration on ``gpu``."""
    plan = make_plan(plan_inputs(row, gpu).to_request(default_gpu=None), load_catalog(), suggest=False)
    memory = plan.memory
    return {
        "gpu": plan.gpu.name if plan.gpu else gpu,
        "tokens_per_s": plan.throughput.tokens_per_s,
        "step_time_s": row["micro_batch"] * row["seq_len"] / plan.throughput.tokens_per_s,
        "mfu": plan.throughput.mfu,
        "hfu": plan.throughput.hfu,
        "speed_source": plan.throughput.source,
        "uncertainty_pct": plan.throughput.uncertainty_pct,
        "peak_allocated_bytes": memory.measured("allocated"),
        "peak_reserved_bytes": memory.measured("reserved"),
        "smi_used_max_bytes": memory.measured("nvidia-smi"),
        "total_bytes": memory.total,
        "capacity_gib": plan.capacity_gib,
        "fits": plan.fits,
        "precision": plan.setup.precision,
        "warnings": list(plan.warnings),
    }


def does_not_fit_micro_batch(row: dict[str, Any], gpu: str, margin: float = 2.0, limit: int = 4096) -> int | None:
    """The smallest power-of-two micro-batch whose planned peak is at least ``margin`` x the GPU's memory
    (the deliberate OOM probe: clearly over, not at the edge where the estimate's error decides; twice,
    because part of the planned peak, the fp32 logits, is what the trainer's chunked loss avoids)."""
    mb = 1
    while mb <= limit:
        got = predict({**row, "micro_batch": mb}, gpu)
        if got["capacity_gib"] and got["total_bytes"] / GIB >= margin * got["capacity_gib"]:
            return mb
        mb *= 2
    return None
