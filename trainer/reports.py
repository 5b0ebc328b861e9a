"""The JSON documents the trainer prints for the launcher: ``trainer probe``, ``trainer bench`` and
``python -m trainer.nvml_sampler``, as TypedDicts (standard library only, like ``protocol.py``: the
desktop app imports these types without torch).

The launcher adds its own keys to the probe and bench documents (``gpuplanner.launch.host_reports``);
the key names are part of the JSON contracts in docs/json.md.
"""

from __future__ import annotations

from typing import TypedDict


class GpuProbe(TypedDict):
    """One GPU as ``trainer probe`` reports it."""

    index: int
    name: str
    mem_total_bytes: int
    compute_capability: str  # "8.0"
    multiprocessors: int
    bf16: bool
    driver: str | None


class ProbeReport(TypedDict, total=False):
    """What ``trainer probe`` prints: one document describing the host. The trainer writes every key;
    ``total=False`` because the launcher's document of a failed probe (``HostProbe``) has none of them."""

    host: str
    platform: str
    python: str
    torch: str
    transformers: str | None
    peft: str | None
    cuda_runtime: str | None
    cuda_driver: str | None  # "12.4"
    driver: str | None
    gpu_count: int
    gpus: list[GpuProbe]
    cpu_cores: int | None  # the cores this process may use
    cpu_count: int | None
    ram_bytes: int | None
    run_root: str
    disk_free_bytes: int
    disk_total_bytes: int


class BenchInfo(TypedDict, total=False):
    """What the training loop says of a ``trainer bench`` run (``BenchStats.info``; ``compile_s`` once a
    compiled model has compiled)."""

    device: str  # the GPU's name, or "cpu"
    precision: str
    tf32: bool
    param_dtypes: dict[str, int]
    loss_impl: str
    compile: bool
    params: int
    trainable_params: int
    world_size: int
    compile_s: float


class BenchReport(BenchInfo, total=False):
    """What ``trainer bench`` prints: the loop's BenchInfo and the measured speed. The trainer writes every
    key; ``total=False`` so the launcher's result (``BenchResult``) can extend it."""

    method: str  # "lora" | "full"
    seq_len: int
    micro_batch: int
    grad_accum: int
    warmup_steps: int
    measured_steps: int
    tokens_per_s: float
    samples_per_s: float
    step_time_s: float
    step_time_p50_s: float
    data_wait_share: float
    peak_mem_allocated_bytes: int | None
    peak_mem_reserved_bytes: int | None
    flops_per_token: float
    hardware_flops_per_token: float
    peak_flops: float | None
    mfu: float | None
    hfu: float | None


class GpuUtilisation(TypedDict):
    """What ``python -m trainer.nvml_sampler`` prints: the host's GPUs' utilisation now (stop-when-idle)."""

    node: str
    simulated: bool
    util_pct: list[float | None]
