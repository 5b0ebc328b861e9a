"""GPU telemetry: NVML through nvidia-ml-py, or a labelled simulated source where there is no GPU.

Every NVML call may be missing from the installed driver (FunctionNotFound, or absent from an old
``pynvml``) or unsupported on the GPU (NotSupported, e.g. utilisation under MIG): such a field
becomes null, is reported once, and is never called again. Memory uses the v2 call (so reserved
memory is not counted as used) and falls back to v1 on drivers without it.

Besides NVML's utilisation (the share of time any kernel ran), each record carries, per GPU:

- ``sm_active_pct``, ``sm_occupancy_pct``, ``tensor_active_pct``: GPM metrics (Hopper and newer; each GPU
  is asked once whether it supports GPM). Absent (null), never zero, on a GPU without GPM, and on the first
  sample of a GPU with it (GPM needs two samples).
- ``pcie_tx_mbps``, ``pcie_rx_mbps``: PCIe throughput in MB/s (NVML counts KB/s over a 20 ms window).
- ``nvlink_tx_mbps``, ``nvlink_rx_mbps``: NVLink data throughput in MB/s over all active links, from
  NVML's cumulative per-link KiB counters between two samples; null on a GPU without active NVLink links
  (and on the first sample).
- ``sm_clock_mhz`` and ``sm_clock_max_mhz`` (the SM clock's maximum, read once per GPU).
- ``throttle_reasons``: NVML's clock-event bit mask; :func:`trainer.protocol.throttle_reason_names`
  decodes it to names (``power_cap``, ``hw_thermal``, ...).

The simulated source follows the training loop's activity (:class:`Activity`): utilisation is the
share of wall time the loop spent computing since the last sample, memory is the process's resident
memory, power and temperature follow utilisation. Its records carry ``"simulated": true``.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .reports import GpuUtilisation
from .telemetry import warn


class Activity:
    """Filled by the training loop: time spent busy (computing) and the latest peak memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy_s = 0.0
        self.mem_bytes = 0

    def add_busy(self, seconds: float, mem_bytes: int = 0) -> None:
        with self._lock:
            self.busy_s += seconds
            if mem_bytes:
                self.mem_bytes = mem_bytes

    def snapshot(self) -> tuple[float, int]:
        with self._lock:
            return self.busy_s, self.mem_bytes


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


def node_name() -> str:
    """This node's name in GPU samples: Slurm's name for it (``$SLURMD_NODENAME``), else the host name.

    Slurm's name tells apart nodes whose host names agree (several ``slurmd`` on one machine) and is the
    name ``squeue``/``sacct`` show.
    """
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class SimulatedSource:
    """No GPU here: a clearly labelled stand-in driven by the loop's real activity."""

    simulated = True
    IDLE_W, MAX_W = 60.0, 300.0

    def __init__(self, activity: Activity | None = None, node: str | None = None) -> None:
        self.activity = activity or Activity()
        self.node = node or node_name()
        self._last_t = time.monotonic()
        self._last_busy = self.activity.snapshot()[0]
        self.energy_j = 0.0

    def sample(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        busy, mem = self.activity.snapshot()
        dt = max(1e-6, now - self._last_t)
        util = max(0.0, min(100.0, 100.0 * (busy - self._last_busy) / dt))
        self._last_t, self._last_busy = now, busy
        power = self.IDLE_W + (self.MAX_W - self.IDLE_W) * util / 100.0
        self.energy_j += power * dt
        return [
            {
                "node": self.node,
                "index": 0,
                "name": "simulated (no GPU)",
                "simulated": True,
                "util_pct": round(util, 1),
                "mem_used_bytes": max(mem, _rss_bytes()),
                "mem_total_bytes": _ram_bytes(),
                "power_w": round(power, 1),
                "energy_j": round(self.energy_j, 1),
                "temp_c": round(35 + 0.45 * util, 1),
                "sm_clock_mhz": 1410 if util > 0 else 210,
                "sm_clock_max_mhz": 1410,
                "throttle_reasons": 0,
                # no GPU: the metrics only a GPU reports stay absent, never zero
                "sm_active_pct": None,
                "sm_occupancy_pct": None,
                "tensor_active_pct": None,
                "pcie_tx_mbps": None,
                "pcie_rx_mbps": None,
                "nvlink_tx_mbps": None,
                "nvlink_rx_mbps": None,
            }
        ]

    def close(self) -> None:
        pass


class NvmlUnavailable(RuntimeError):
    pass


class NvmlSource:
    """Samples NVML for the given device indices; degrades unsupported calls to null once."""

    simulated = False

    def __init__(self, indices: list[int] | None = None, nvml: Any = None, node: str | None = None) -> None:
        try:
            self.nv = nvml if nvml is not None else importlib.import_module("pynvml")
        except ImportError as exc:
            raise NvmlUnavailable(f"nvidia-ml-py not installed: {exc}") from exc
        try:
            self.nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NvmlUnavailable(f"NVML not available: {exc}") from exc
        self.node = node or node_name()
        count = self.nv.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML sees no GPU")
        self.indices = list(range(count)) if indices is None else [i for i in indices if i < count]
        self.handles = {i: self.nv.nvmlDeviceGetHandleByIndex(i) for i in self.indices}
        self.disabled: set[str] = set()
        self.reported: list[str] = []
        self._gpm_prev: dict[int, Any] = {}
        self._gpm_supported: dict[int, bool] = {}
        self._max_clock: dict[int, int | None] = {}
        self._nvlinks: dict[int, list[int]] = {}
        self._nvlink_prev: dict[int, tuple[float, int, int]] = {}

    # -- one guarded call -------------------------------------------------------------------------
    def _unsupported(self, exc: BaseException) -> bool:
        if isinstance(exc, AttributeError):
            return True  # function absent from this pynvml
        codes = {getattr(self.nv, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(self.nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)}
        return getattr(exc, "value", None) in codes

    def call(self, field: str, fn: Callable[..., Any]) -> Any:  # called with no arguments (lambdas bind h=h)
        if field in self.disabled:
            return None
        try:
            return fn()
        except Exception as exc:
            if self._unsupported(exc):
                self.disabled.add(field)
                self.reported.append(field)
                warn(f"GPU field {field} unavailable ({type(exc).__name__}); reported as null from now on")
            return None

    # -- fields -----------------------------------------------------------------------------------
    def _memory(self, h: Any) -> tuple[int | None, int | None]:
        v2 = getattr(self.nv, "nvmlMemory_v2", None)
        if v2 is not None and "mem_v2" not in self.disabled:
            mem = self.call("mem_v2", lambda: self.nv.nvmlDeviceGetMemoryInfo(h, version=v2))
            if mem is not None:
                return int(mem.used), int(mem.total)
        else:
            self.disabled.add("mem_v2")
        mem = self.call("mem", lambda: self.nv.nvmlDeviceGetMemoryInfo(h))
        return (int(mem.used), int(mem.total)) if mem is not None else (None, None)

    def _throttle(self, h: Any) -> Any:
        if "clock_events" not in self.disabled:
            value = self.call("clock_events", lambda: self.nv.nvmlDeviceGetCurrentClocksEventReasons(h))
            if value is not None:
                return int(value)
        return self.call("throttle", lambda: int(self.nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)))

    def _gpm_support(self, i: int, h: Any) -> bool:
        """Whether GPU ``i`` has GPM (asked once per GPU: a machine may mix Hopper and older GPUs)."""
        known = self._gpm_supported.get(i)
        if known is None:
            support = self.call(f"gpm:{i}", lambda: self.nv.nvmlGpmQueryDeviceSupport(h))
            known = self._gpm_supported[i] = bool(support is not None and getattr(support, "isSupportedDevice", 0))
        return known

    def _gpm(self, i: int, h: Any) -> dict[str, float | None]:
        out: dict[str, float | None] = {"sm_active_pct": None, "sm_occupancy_pct": None, "tensor_active_pct": None}
        if "gpm" in self.disabled or not self._gpm_support(i, h):
            return out
        sample = self.call("gpm", lambda: self.nv.nvmlGpmSampleGet(h, self.nv.nvmlGpmSampleAlloc()))
        prev = self._gpm_prev.get(i)
        if sample is not None:
            self._gpm_prev[i] = sample
        if sample is None or prev is None:
            return out
        ids = {
            "sm_active_pct": self.nv.NVML_GPM_METRIC_SM_UTIL,
            "sm_occupancy_pct": self.nv.NVML_GPM_METRIC_SM_OCCUPANCY,
            "tensor_active_pct": self.nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        }

        def get() -> Any:
            req = self.nv.c_nvmlGpmMetricsGet_t()
            req.version = self.nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(ids)
            req.sample1, req.sample2 = prev, sample
            for k, metric_id in enumerate(ids.values()):
                req.metrics[k].metricId = metric_id
            return self.nv.nvmlGpmMetricsGet(req)

        res = self.call("gpm", get)
        self._free_gpm(prev)
        if res is not None:
            for k, name in enumerate(ids):
                m = res.metrics[k]
                value = float(m.value)
                ok = getattr(m, "nvmlReturn", 0) == 0 and value == value and value >= 0.0
                out[name] = round(min(value, 100.0), 2) if ok else None
        return out

    def _free_gpm(self, sample: Any) -> None:
        free = getattr(self.nv, "nvmlGpmSampleFree", None)
        if free is not None:
            try:
                free(sample)
            except Exception:
                pass

    def _pcie(self, h: Any) -> tuple[float | None, float | None]:
        """PCIe TX and RX in MB/s (NVML reports KB/s)."""
        nv = self.nv
        tx = self.call("pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)))
        rx = self.call("pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)))
        return (
            round(tx / 1000.0, 3) if tx is not None else None,
            round(rx / 1000.0, 3) if rx is not None else None,
        )

    def _active_links(self, i: int, h: Any) -> list[int]:
        """The GPU's active NVLink links (found once): none on a GPU without NVLink."""
        links = self._nvlinks.get(i)
        if links is None:
            links = []
            state = getattr(self.nv, "nvmlDeviceGetNvLinkState", None)
            for link in range(int(getattr(self.nv, "NVML_NVLINK_MAX_LINKS", 18)) if state is not None else 0):
                try:
                    if state is not None and state(h, link):
                        links.append(link)
                except Exception:  # NotSupported (no NVLink), InvalidArgument (past the last link)
                    break
            self._nvlinks[i] = links
        return links

    def _nvlink(self, i: int, h: Any) -> tuple[float | None, float | None]:
        """NVLink TX and RX in MB/s over the active links, from the cumulative KiB counters."""
        links = self._active_links(i, h)
        if not links or "nvlink" in self.disabled:
            return None, None
        nv = self.nv
        tx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138)
        rx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139)
        fields = [(tx_id, link) for link in links] + [(rx_id, link) for link in links]
        values = self.call("nvlink", lambda: nv.nvmlDeviceGetFieldValues(h, fields))
        if values is None:
            return None, None
        tx = rx = stamp = 0
        for k, value in enumerate(values):
            if getattr(value, "nvmlReturn", 0) != 0:
                return None, None
            count = int(value.value.ullVal)
            stamp = max(stamp, int(getattr(value, "timestamp", 0) or 0))
            if k < len(links):
                tx += count
            else:
                rx += count
        now = stamp / 1e6 if stamp > 0 else time.monotonic()  # NVML stamps each value in microseconds
        prev = self._nvlink_prev.get(i)
        self._nvlink_prev[i] = (now, tx, rx)
        if prev is None or now <= prev[0] or tx < prev[1] or rx < prev[2]:
            return None, None  # first sample, or the counters were reset
        dt = now - prev[0]
        return round((tx - prev[1]) * 1024 / 1e6 / dt, 3), round((rx - prev[2]) * 1024 / 1e6 / dt, 3)

    def _clock_max(self, i: int, h: Any) -> int | None:
        if i not in self._max_clock:
            value = self.call("sm_clock_max", lambda: self.nv.nvmlDeviceGetMaxClockInfo(h, self.nv.NVML_CLOCK_SM))
            self._max_clock[i] = int(value) if value else None
        return self._max_clock[i]

    def sample(self) -> list[dict[str, Any]]:
        nv, records = self.nv, []
        for i, h in self.handles.items():
            mig = self.call("mig", lambda h=h: nv.nvmlDeviceGetMigMode(h))
            util = self.call("util", lambda h=h: nv.nvmlDeviceGetUtilizationRates(h))
            used, total = self._memory(h)
            power = self.call("power", lambda h=h: nv.nvmlDeviceGetPowerUsage(h))
            energy = self.call("energy", lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h))
            rec = {
                "node": self.node,
                "index": i,
                "simulated": False,
                "util_pct": float(util.gpu) if util is not None else None,
                "mem_used_bytes": used,
                "mem_total_bytes": total,
                "power_w": power / 1000.0 if power is not None else None,
                "energy_j": energy / 1000.0 if energy is not None else None,
                "temp_c": self.call("temp", lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                "sm_clock_mhz": self.call("sm_clock", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                "sm_clock_max_mhz": self._clock_max(i, h),
                "throttle_reasons": self._throttle(h),
                "mig": bool(mig[0]) if mig is not None else None,
            }
            rec.update(self._gpm(i, h))
            rec["pcie_tx_mbps"], rec["pcie_rx_mbps"] = self._pcie(h)
            rec["nvlink_tx_mbps"], rec["nvlink_rx_mbps"] = self._nvlink(i, h)
            # whether GPM and NVLink figures are coming (they need two samples): a reader can tell
            # "not yet" from "not reported by this GPU" on the first sample
            rec["gpm"] = self._gpm_supported.get(i, False) and "gpm" not in self.disabled
            rec["nvlink_links"] = len(self._nvlinks.get(i, []))
            records.append(rec)
        return records

    def close(self) -> None:
        for sample in self._gpm_prev.values():
            self._free_gpm(sample)
        self._gpm_prev.clear()
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


def open_source(
    device_indices: list[int] | None,
    activity: Activity | None,
    force_simulated: bool = False,
    nvml: Any = None,
    node: str | None = None,
) -> NvmlSource | SimulatedSource:
    if not force_simulated:
        try:
            return NvmlSource(device_indices, nvml=nvml, node=node)
        except NvmlUnavailable:
            pass
    return SimulatedSource(activity, node=node)


class GpuSampler:
    """Daemon thread: every ``interval_s`` emits one ``gpu`` record per device through ``emit``."""

    def __init__(self, source: NvmlSource | SimulatedSource, emit: Callable[..., Any], interval_s: float) -> None:
        self.source, self.emit, self.interval_s = source, emit, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)

    def start(self) -> GpuSampler:
        self._thread.start()
        return self

    def sample_once(self) -> None:
        try:
            for rec in self.source.sample():
                self.emit("gpu", **rec)
        except Exception as exc:  # telemetry must never take training down
            warn(f"GPU sampling failed: {exc}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.source.close()


def utilisation_once(interval_s: float = 1.0) -> GpuUtilisation:
    """This machine's GPUs' utilisation now, over ``interval_s`` (``python -m trainer.nvml_sampler``: the
    launcher's stop-when-idle check). Without NVML the simulated source answers, labelled ``simulated``:
    nothing runs in this process, so it reads idle."""
    source = open_source(None, None)
    try:
        source.sample()  # the simulated source's window starts here; NVML reports its own last period
        time.sleep(max(0.0, interval_s))
        samples = source.sample()
    finally:
        source.close()
    return {
        "node": source.node,
        "simulated": bool(source.simulated),
        "util_pct": [s.get("util_pct") for s in samples],
    }


if __name__ == "__main__":
    import json

    print(json.dumps(utilisation_once()))
