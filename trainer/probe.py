"""``trainer probe``: one JSON document describing this host for the planner."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
from pathlib import Path

from .reports import GpuProbe, ProbeReport


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def _version(distribution: str) -> str | None:
    """The installed version of ``distribution``, read from its metadata: importing peft imports transformers,
    and the two cost seconds of CPU on every probe (the launcher checks separately that they import)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except (metadata.PackageNotFoundError, ValueError):
        return None


def _nvml_driver() -> tuple[str | None, str | None]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            return (
                driver.decode() if isinstance(driver, bytes) else str(driver),
                f"{cuda // 1000}.{(cuda % 1000) // 10}",
            )
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None, None


def probe(run_root: str | Path = ".") -> ProbeReport:
    import torch

    driver, driver_cuda = _nvml_driver()
    gpus: list[GpuProbe] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(
                {
                    "index": i,
                    "name": p.name,
                    "mem_total_bytes": int(p.total_memory),
                    "compute_capability": f"{p.major}.{p.minor}",
                    "multiprocessors": p.multi_processor_count,
                    "bf16": p.major >= 8,
                    "driver": driver,
                }
            )
    root = Path(run_root)
    while not root.exists() and root != root.parent:
        root = root.parent
    disk = shutil.disk_usage(root)
    cores: int | None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "cuda_runtime": torch.version.cuda,
        "cuda_driver": driver_cuda,
        "driver": driver,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "cpu_cores": cores,
        "cpu_count": os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "run_root": str(root.resolve()),
        "disk_free_bytes": disk.free,
        "disk_total_bytes": disk.total,
    }
