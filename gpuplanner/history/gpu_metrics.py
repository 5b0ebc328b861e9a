"""Per-GPU telemetry of a run from its rollups: averages of the deeper metrics, clocks, throttle reasons.

Every figure comes from ``run_gpus`` (schema v4), never from a scan of raw samples. A metric that a
GPU never reported (no GPM before Hopper, no NVLink, an older driver, a run stored before v4) is
``None`` and listed in that GPU's ``missing``; it is never shown as 0. People read it as
:data:`MISSING`.

The keys of one GPU's dict (``runs show --json`` under ``gpus``; ``docs/telemetry.md``):

- ``node``, ``index``, ``samples``
- ``util_pct``: NVML utilisation, the share of time any kernel ran
- ``sm_active_pct``, ``sm_occupancy_pct``, ``tensor_active_pct``: GPM means (Hopper and newer)
- ``pcie_tx_mbps``, ``pcie_rx_mbps``, ``nvlink_tx_mbps``, ``nvlink_rx_mbps``: mean throughput, MB/s
- ``sm_clock_mhz`` (mean), ``sm_clock_max_mhz``, ``sm_clock_pct`` (the mean against the maximum)
- ``throttle_pct``: share of samples per throttle reason name (``power_cap``, ``hw_thermal``, ...),
  only reasons that occurred; ``slowdown_pct``: share of samples with any reason that slows work
  (:data:`trainer.protocol.SLOWDOWN_REASONS`); both None when the GPU reported no throttle mask
- ``missing``: the keys above that this GPU did not report
"""

from __future__ import annotations

import json
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.rollup import ANY_SLOWDOWN, METRIC_NAMES

MISSING = "not reported by this GPU"

# key -> (label, unit) for people; the order is the display order
METRICS: tuple[tuple[str, str, str], ...] = (
    ("util_pct", "NVML utilisation", "%"),
    ("sm_active_pct", "SM activity", "%"),
    ("sm_occupancy_pct", "SM occupancy", "%"),
    ("tensor_active_pct", "Tensor activity", "%"),
    ("pcie_tx_mbps", "PCIe TX", "MB/s"),
    ("pcie_rx_mbps", "PCIe RX", "MB/s"),
    ("nvlink_tx_mbps", "NVLink TX", "MB/s"),
    ("nvlink_rx_mbps", "NVLink RX", "MB/s"),
    ("sm_clock_mhz", "SM clock", "MHz"),
    ("sm_clock_pct", "SM clock / max", "%"),
    ("slowdown_pct", "Throttled", "% of samples"),
)
METRIC_LABELS = {key: label for key, label, _ in METRICS}

THROTTLE_LABELS = {
    "gpu_idle": "GPU idle",
    "applications_clocks": "application clocks",
    "power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "thermal (software)",
    "hw_thermal": "thermal (hardware)",
    "power_brake": "power brake",
    "display_clocks": "display clocks",
    "board_limit": "board limit",
    "reliability": "reliability",
}

UTILISATION_NOTE = (
    "NVML utilisation counts the time any kernel ran, however few SMs it used; SM activity (GPM, Hopper"
    " and newer) is the share of SMs busy, so it is the lower, truer figure of how much GPU the run used."
)

_COLUMN_KEYS = {
    "sm_active": "sm_active_pct",
    "sm_occupancy": "sm_occupancy_pct",
    "tensor_active": "tensor_active_pct",
    "pcie_tx": "pcie_tx_mbps",
    "pcie_rx": "pcie_rx_mbps",
    "nvlink_tx": "nvlink_tx_mbps",
    "nvlink_rx": "nvlink_rx_mbps",
    "sm_clock": "sm_clock_mhz",
}


def _counts(text: str | None) -> dict[str, int]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int)} if isinstance(value, dict) else {}


def run_gpu_metrics(db: Database, run_id: int) -> list[dict[str, Any]]:
    """One dict per GPU of the run (see the module docstring), ordered by node and index."""
    columns = ", ".join(f"{name}_sum, {name}_n" for name in METRIC_NAMES)
    out = []
    for row in db.execute(
        f"SELECT node, gpu_index, n, util_n, util_sum, {columns}, sm_clock_max_mhz, throttle_n, throttle_json"
        " FROM run_gpus WHERE run_id = ? ORDER BY node, gpu_index",
        [run_id],
    ).fetchall():
        node, index, n, util_n, util_sum = row[:5]
        gpu: dict[str, Any] = {"node": node, "index": index, "samples": n}
        gpu["util_pct"] = util_sum / util_n if util_n else None
        k = 5
        for name in METRIC_NAMES:
            total, count = row[k], row[k + 1]
            gpu[_COLUMN_KEYS[name]] = total / count if count else None
            k += 2
        clock_max, throttle_n, throttle_json = row[k], row[k + 1], row[k + 2]
        gpu["sm_clock_max_mhz"] = clock_max
        clock = gpu["sm_clock_mhz"]
        gpu["sm_clock_pct"] = 100.0 * clock / clock_max if clock is not None and clock_max else None
        counts = _counts(throttle_json)
        if throttle_n:
            slowdown = counts.pop(ANY_SLOWDOWN, 0)
            gpu["throttle_pct"] = {reason: 100.0 * c / throttle_n for reason, c in sorted(counts.items())}
            gpu["slowdown_pct"] = 100.0 * slowdown / throttle_n
        else:
            gpu["throttle_pct"] = None
            gpu["slowdown_pct"] = None
        gpu["missing"] = [key for key, _, _ in METRICS if gpu.get(key) is None]
        out.append(gpu)
    return out


def node_totals(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per node of a run, from :func:`run_gpu_metrics`: its GPUs, their samples and mean utilisation."""
    nodes: dict[str, dict[str, Any]] = {}
    for gpu in gpus:
        node = nodes.setdefault(gpu["node"], {"node": gpu["node"], "gpus": 0, "samples": 0, "_util": []})
        node["gpus"] += 1
        node["samples"] += gpu["samples"] or 0
        if gpu.get("util_pct") is not None:
            node["_util"].append((gpu["util_pct"], gpu["samples"] or 0))
    out = []
    for node in nodes.values():
        util = node.pop("_util")
        weight = sum(n for _, n in util)
        node["util_pct"] = sum(u * n for u, n in util) / weight if weight else None
        out.append(node)
    return out


def format_metric(key: str, value: Any) -> str:
    """A metric's value for people, or :data:`MISSING` when the GPU did not report it."""
    if value is None:
        return MISSING
    unit = next((u for k, _, u in METRICS if k == key), "")
    if unit == "MB/s":
        return f"{value / 1000:.2f} GB/s" if value >= 1000 else f"{value:.1f} MB/s"
    if unit == "MHz":
        return f"{value:.0f} MHz"
    return f"{value:.1f} {unit}"


def throttle_text(throttle_pct: dict[str, float] | None) -> str:
    """``power cap 40%, thermal (hardware) 5%``; 'none' when no reason occurred; :data:`MISSING` when unknown."""
    if throttle_pct is None:
        return MISSING
    shown = [(p, r) for r, p in throttle_pct.items() if r != "gpu_idle" and p > 0]
    if not shown:
        return "none"
    return ", ".join(f"{THROTTLE_LABELS.get(r, r)} {p:.0f}%" for p, r in sorted(shown, key=lambda pr: (-pr[0], pr[1])))


def live_throttle_text(names: list[str] | None) -> str:
    """The reasons of one sample, for the live view."""
    if names is None:
        return MISSING
    shown = [THROTTLE_LABELS.get(n, n) for n in names if n != "gpu_idle"]
    return ", ".join(shown) if shown else "none"
