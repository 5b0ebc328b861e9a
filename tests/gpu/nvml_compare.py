"""The product's NVML sampler against ``nvidia-smi --query-gpu`` read at the same moments.

During one training run the sampler (``trainer/nvml_sampler.py``: :class:`GpuSampler` over
:class:`NvmlSource`) takes a sample every ``interval_s``; each sample's callback reads nvidia-smi at once,
so every pair is one moment seen two ways. :func:`compare` sums the pairs up per field: the figures both
report (utilisation, memory, SM clock and its maximum, power, temperature, throttle reasons) with their
differences, and the ones only NVML gives here (GPM SM and tensor activity, SM occupancy, PCIe and
NVLink throughput) with how often they came and their range.
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from typing import Any

from tests.gpu.smi import SmiReader
from trainer.nvml_sampler import GpuSampler, NvmlSource, open_source
from trainer.protocol import throttle_reason_names

# sampler field -> nvidia-smi field, and the scale that turns the smi value into the sampler's unit
BOTH = {
    "util_pct": ("utilization.gpu", 1.0),
    "mem_used_bytes": ("memory.used", 1.0),
    "mem_total_bytes": ("memory.total", 1.0),
    "sm_clock_mhz": ("clocks.sm", 1.0),
    "sm_clock_max_mhz": ("clocks.max.sm", 1.0),
    "power_w": ("power.draw", 1.0),
    "temp_c": ("temperature.gpu", 1.0),
}
NVML_ONLY = (
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "pcie_tx_mbps",
    "pcie_rx_mbps",
    "nvlink_tx_mbps",
    "nvlink_rx_mbps",
)


def open_sampler_source(dry_run: bool) -> Any:
    """The dry run's scripted Hopper (``tests/fake_nvml.py``), else the real NVML of GPU 0 (the
    simulated source, labelled, where NVML cannot be opened)."""
    if dry_run:
        from tests.fake_nvml import FakeGpu, FakeNvml

        return NvmlSource([0], nvml=FakeNvml(gpus=[FakeGpu.hopper()]), node="dry-run")
    return open_source([0], None)


class PairedSampling:
    """Runs the product's sampler in its own thread; every sample is paired with an nvidia-smi read."""

    def __init__(self, source: Any, smi_command: list[str] | None, interval_s: float) -> None:
        self.smi = SmiReader(smi_command)
        self.pairs: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.sampler = GpuSampler(source, self._emit, interval_s)
        self.simulated = bool(getattr(source, "simulated", False))
        self.dmon: dict[str, Any] = {}

    def _emit(self, kind: str, **rec: Any) -> None:
        if rec.get("index", 0) != 0:
            return
        smi = self.smi.read()
        with self._lock:
            self.pairs.append({"t": time.time(), "nvml": rec, "smi": smi})

    def __enter__(self) -> PairedSampling:
        self.sampler.sample_once()  # GPM and NVLink rates need a first sample to difference against
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.sample_once()
        self.sampler.stop()
        self.dmon = gpm_dmon(self.smi.command)


def gpm_dmon(command: list[str] | None) -> dict[str, Any]:
    """nvidia-smi's own GPM reading (``dmon --gpm-metrics`` 2: SM activity, 3: SM occupancy, 5: any tensor
    activity), kept as text: its columns differ between drivers, so it is read by a person."""
    if not command:
        return {"error": "nvidia-smi not found"}
    try:
        done = subprocess.run(
            [*command, "dmon", "-c", "2", "-i", "0", "--gpm-metrics", "2,3,5"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[:300]}
    return {"text": done.stdout.strip()[:2000]}


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def compare(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per field: both readings' means and the mean and largest absolute difference over the pairs."""
    both: dict[str, Any] = {}
    for field, (smi_field, scale) in BOTH.items():
        diffs, nv, sm = [], [], []
        for pair in pairs:
            a = pair["nvml"].get(field)
            b = (pair["smi"] or {}).get(smi_field)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                nv.append(float(a))
                sm.append(float(b) * scale)
                diffs.append(abs(float(a) - float(b) * scale))
        both[field] = {
            "smi_field": smi_field,
            "pairs": len(diffs),
            "nvml_mean": statistics.fmean(nv) if nv else None,
            "smi_mean": statistics.fmean(sm) if sm else None,
            "mean_abs_diff": statistics.fmean(diffs) if diffs else None,
            "max_abs_diff": max(diffs) if diffs else None,
        }
    masks = [
        (p["nvml"].get("throttle_reasons"), (p["smi"] or {}).get("clocks_event_reasons.active"))
        for p in pairs
        if isinstance(p["nvml"].get("throttle_reasons"), int)
        and isinstance((p["smi"] or {}).get("clocks_event_reasons.active"), int)
    ]
    last = pairs[-1]["nvml"] if pairs else {}
    both["throttle_reasons"] = {
        "smi_field": "clocks_event_reasons.active",
        "pairs": len(masks),
        "agree": sum(1 for a, b in masks if a == b),
        "nvml_names": sorted({n for a, _ in masks for n in throttle_reason_names(a) or []}),
        "smi_names": sorted({n for _, b in masks for n in throttle_reason_names(b) or []}),
    }
    only = {
        field: _stats([float(p["nvml"][field]) for p in pairs if isinstance(p["nvml"].get(field), (int, float))])
        for field in NVML_ONLY
    }
    return {
        "samples": len(pairs),
        "both": both,
        "nvml_only": only,
        "gpm": bool(last.get("gpm")),
        "nvlink_links": last.get("nvlink_links"),
        "simulated": bool(last.get("simulated")),
    }
