"""A scripted stand-in for ``pynvml`` (the test double of :class:`trainer.nvml_sampler.NvmlSource`).

It answers the calls the sampler makes with fixed figures, per GPU where it matters. Scenarios:
``missing`` functions are absent (an old pynvml or driver), ``unsupported`` ones raise NotSupported,
``no_driver`` fails ``nvmlInit``, ``mig`` puts the GPUs in MIG mode. Each GPU is a :class:`FakeGpu`:
``hopper()`` (GPM, 18 NVLink links, power-capped), ``ampere_pcie()`` (no GPM, no NVLink) and
``ampere_nvlink()`` (no GPM, 12 NVLink links, thermally throttled). Counters and time advance by one
second per sample, so rates are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    util: int = 87
    gpm: bool = False
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    nvlink_links: int = 0
    nvlink_tx_kib_per_s: int = 0
    nvlink_rx_kib_per_s: int = 0
    pcie_tx_kb_per_s: int = 1_500
    pcie_rx_kb_per_s: int = 12_000
    sm_clock: int = 1980
    sm_clock_max: int = 1980
    clock_events: int = 4

    @classmethod
    def hopper(cls) -> FakeGpu:
        """An H100 SXM: GPM, NVLink, held to 1755 of 1980 MHz by its power cap."""
        return cls(
            util=96,
            gpm=True,
            sm_active=61.5,
            sm_occupancy=38.0,
            tensor_active=42.25,
            nvlink_links=18,
            nvlink_tx_kib_per_s=2_000_000,
            nvlink_rx_kib_per_s=1_000_000,
            pcie_tx_kb_per_s=900,
            pcie_rx_kb_per_s=25_000,
            sm_clock=1755,
            sm_clock_max=1980,
            clock_events=0x4,
        )

    @classmethod
    def ampere_pcie(cls) -> FakeGpu:
        """An A10-like card: no GPM and no NVLink."""
        return cls(util=80, pcie_tx_kb_per_s=2_000, pcie_rx_kb_per_s=150_000, sm_clock=1695, sm_clock_max=1695)

    @classmethod
    def ampere_nvlink(cls) -> FakeGpu:
        """An A100 SXM: NVLink but no GPM, slowed by hardware thermal limits."""
        return cls(
            util=90,
            nvlink_links=12,
            nvlink_tx_kib_per_s=500_000,
            nvlink_rx_kib_per_s=500_000,
            sm_clock=1200,
            sm_clock_max=1410,
            clock_events=0x40 | 0x20,
        )


class FakeNvml:
    """Scripted pynvml; see the module docstring."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRICS_GET_VERSION = 1
    nvmlMemory_v2 = 0x02000028

    def __init__(
        self,
        count: int = 1,
        missing: tuple[str, ...] = (),
        unsupported: tuple[str, ...] = (),
        no_driver: bool = False,
        mig: bool = False,
        gpus: list[FakeGpu] | None = None,
    ) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu() for _ in range(count)]
        self.count, self.missing, self.unsupported, self.no_driver, self.mig = (
            len(self.gpus),
            missing,
            unsupported,
            no_driver,
            mig,
        )
        self.calls: dict[str, int] = {}
        self.ticks = [0] * len(self.gpus)  # samples taken per GPU: the NVLink counters' clock (1 s each)
        self.gpm_live: set[int] = set()  # GPM samples allocated and not freed

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def _gpu(self, h: str) -> FakeGpu:
        return self.gpus[int(h[1:])]

    def nvmlInit(self) -> None:
        if self.no_driver:
            raise FakeNVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetMigMode(self, h: str) -> tuple[int, int]:
        self._hit("mig")
        return (1, 1) if self.mig else (0, 0)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        self._hit("util")
        if self.mig:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)  # as on real MIG-enabled GPUs
        return SimpleNamespace(gpu=self._gpu(h).util, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: str, version: Any = None) -> Any:
        if version:
            self._hit("mem_v2")
            if "v2" in self.missing:
                raise FakeNVMLError(self.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(used=10 << 30, total=80 << 30, reserved=1 << 30)
        self._hit("mem")
        return SimpleNamespace(used=11 << 30, total=80 << 30)  # v1 counts reserved memory as used

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        self._hit("power")
        return 350_500

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        self._hit("energy")
        return 5_000_000

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        self._hit("temp")
        return 61

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        self._hit("sm_clock")
        return self._gpu(h).sm_clock

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        self._hit("sm_clock_max")
        return self._gpu(h).sm_clock_max

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        self._hit("clock_events")
        return self._gpu(h).clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: str) -> int:
        self._hit("throttle")
        return 8

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:
        self._hit("pcie")
        gpu = self._gpu(h)
        return gpu.pcie_tx_kb_per_s if counter == self.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kb_per_s

    # -- NVLink: link states and cumulative KiB counters, one second per sample ---------------------
    def nvmlDeviceGetNvLinkState(self, h: str, link: int) -> int:
        self._hit("nvlink_state")
        gpu = self._gpu(h)
        if gpu.nvlink_links == 0:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.nvlink_links:
            raise FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def nvmlDeviceGetFieldValues(self, h: str, field_ids: list[tuple[int, int]]) -> list[Any]:
        self._hit("nvlink")
        i = int(h[1:])
        gpu = self.gpus[i]
        self.ticks[i] += 1
        tick = self.ticks[i]
        out = []
        for field_id, link in field_ids:
            assert 0 <= link < gpu.nvlink_links
            per_link = (
                gpu.nvlink_tx_kib_per_s
                if field_id == self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                else gpu.nvlink_rx_kib_per_s
            ) // gpu.nvlink_links
            out.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=link,
                    nvmlReturn=0,
                    timestamp=1_000_000 * tick,
                    value=SimpleNamespace(ullVal=per_link * tick),
                )
            )
        return out

    # -- GPM (Hopper and newer) ---------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        self._hit("gpm")
        return SimpleNamespace(isSupportedDevice=int(self._gpu(h).gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        sample = SimpleNamespace(handle=None)
        self.gpm_live.add(id(sample))
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.gpm_live.discard(id(sample))

    def nvmlGpmSampleGet(self, h: str, sample: Any) -> Any:
        self._hit("gpm_sample")
        sample.handle = h
        return sample

    class c_nvmlGpmMetricsGet_t:  # noqa: N801 (pynvml's name)
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(98)]

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        self._hit("gpm_metrics")
        gpu = self._gpu(req.sample2.handle)
        values = {
            self.NVML_GPM_METRIC_SM_UTIL: gpu.sm_active,
            self.NVML_GPM_METRIC_SM_OCCUPANCY: gpu.sm_occupancy,
            self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: gpu.tensor_active,
        }
        for k in range(req.numMetrics):
            req.metrics[k].value = values[req.metrics[k].metricId]
        return req
