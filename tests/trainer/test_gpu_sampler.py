"""NVML path against a scripted fake pynvml (driver scenarios), and the simulated source."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from trainer.nvml_sampler import Activity, GpuSampler, NvmlSource, NvmlUnavailable, SimulatedSource, open_source


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """Scripted pynvml: ``missing`` functions are absent (old pynvml/driver); ``unsupported`` raise NotSupported."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlMemory_v2 = 0x02000028

    def __init__(
        self,
        count: int = 1,
        missing: tuple[str, ...] = (),
        unsupported: tuple[str, ...] = (),
        no_driver: bool = False,
        mig: bool = False,
    ) -> None:
        self.count, self.missing, self.unsupported, self.no_driver, self.mig = (
            count,
            missing,
            unsupported,
            no_driver,
            mig,
        )
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)

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
        return SimpleNamespace(gpu=87, memory=40)

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
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        self._hit("clock_events")
        return 4

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: str) -> int:
        self._hit("throttle")
        return 8

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        self._hit("gpm")
        return SimpleNamespace(isSupportedDevice=0)


def test_modern_driver_reads_every_field_with_memory_v2() -> None:
    nv = FakeNvml(count=2)
    recs = NvmlSource(nvml=nv, node="n1").sample()
    assert [r["index"] for r in recs] == [0, 1]
    r = recs[0]
    assert r["simulated"] is False and r["node"] == "n1"
    assert r["util_pct"] == 87.0 and r["mem_used_bytes"] == 10 << 30 and r["mem_total_bytes"] == 80 << 30
    assert r["power_w"] == 350.5 and r["energy_j"] == 5000.0 and r["temp_c"] == 61 and r["sm_clock_mhz"] == 1980
    assert r["throttle_reasons"] == 4 and r["mig"] is False
    assert r["sm_active_pct"] is None  # no GPM before Hopper
    assert "mem" not in nv.calls


def test_old_driver_without_v2_calls_falls_back_once() -> None:
    nv = FakeNvml(
        missing=(
            "v2",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlGpmQueryDeviceSupport",
        )
    )
    src = NvmlSource(nvml=nv)
    for _ in range(3):
        r = src.sample()[0]
        assert r["mem_used_bytes"] == 11 << 30  # v1 figures
        assert r["throttle_reasons"] == 8  # older name of the same counter
        assert r["energy_j"] is None
    assert nv.calls["mem_v2"] == 1  # not retried every sample
    assert nv.calls["mem"] == 3
    assert {"mem_v2", "clock_events", "energy", "gpm"} <= src.disabled


def test_not_supported_fields_become_null_once(capsys: pytest.CaptureFixture[str]) -> None:
    nv = FakeNvml(unsupported=("power", "temp"))
    src = NvmlSource(nvml=nv)
    for _ in range(4):
        r = src.sample()[0]
        assert r["power_w"] is None and r["temp_c"] is None and r["util_pct"] == 87.0
    assert nv.calls["power"] == 1 and nv.calls["temp"] == 1
    err = capsys.readouterr().err
    assert err.count("power unavailable") == 1 and err.count("temp unavailable") == 1


def test_mig_gpu_reports_mig_and_null_utilisation() -> None:
    nv = FakeNvml(mig=True)
    src = NvmlSource(nvml=nv)
    recs = [src.sample()[0] for _ in range(3)]
    assert all(r["mig"] is True and r["util_pct"] is None for r in recs)
    assert recs[0]["mem_used_bytes"] == 10 << 30
    assert nv.calls["util"] == 1


def test_no_driver_falls_back_to_a_labelled_simulated_source() -> None:
    with pytest.raises(NvmlUnavailable):
        NvmlSource(nvml=FakeNvml(no_driver=True))
    with pytest.raises(NvmlUnavailable):
        NvmlSource(nvml=FakeNvml(count=0))
    src = open_source(None, Activity(), nvml=FakeNvml(no_driver=True))
    assert isinstance(src, SimulatedSource)
    assert src.sample()[0]["simulated"] is True


def test_simulated_source_follows_training_activity() -> None:
    activity = Activity()
    src = SimulatedSource(activity)
    time.sleep(0.05)
    idle = src.sample()[0]
    assert idle["util_pct"] == 0.0 and idle["sm_clock_mhz"] == 210
    t0 = time.monotonic()
    time.sleep(0.1)
    activity.add_busy(0.75 * (time.monotonic() - t0), mem_bytes=123)
    busy = src.sample()[0]
    assert 50.0 <= busy["util_pct"] <= 80.0
    assert busy["power_w"] > idle["power_w"] and busy["temp_c"] > idle["temp_c"]
    assert busy["mem_used_bytes"] > 0 and busy["mem_total_bytes"] > busy["mem_used_bytes"]


def test_sampler_thread_emits_records_and_survives_errors() -> None:
    got: list[dict[str, Any]] = []

    class Broken(SimulatedSource):
        n = 0

        def sample(self) -> list[dict[str, Any]]:
            self.n += 1
            if self.n == 1:
                raise RuntimeError("boom")
            return super().sample()

    sampler = GpuSampler(Broken(), lambda kind, **rec: got.append({"kind": kind, **rec}), 0.02).start()
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert len(got) >= 2 and all(g["kind"] == "gpu" and g["simulated"] for g in got)
