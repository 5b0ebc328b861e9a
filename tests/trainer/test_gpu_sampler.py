"""NVML path against a scripted fake pynvml (driver scenarios), and the simulated source."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, FakeNvml
from trainer.nvml_sampler import Activity, GpuSampler, NvmlSource, NvmlUnavailable, SimulatedSource, open_source
from trainer.protocol import throttle_reason_names


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
    assert {"mem_v2", "clock_events", "energy", "gpm:0"} <= src.disabled


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


def test_hopper_reports_gpm_pcie_nvlink_clocks_and_power_cap() -> None:
    nv = FakeNvml(gpus=[FakeGpu.hopper()])
    src = NvmlSource(nvml=nv)
    first = src.sample()[0]
    # GPM and NVLink rates need two samples: absent on the first, never zero
    assert first["sm_active_pct"] is None and first["tensor_active_pct"] is None
    assert first["nvlink_tx_mbps"] is None and first["nvlink_rx_mbps"] is None
    assert first["gpm"] is True and first["nvlink_links"] == 18  # ... but they are coming
    second = src.sample()[0]
    assert second["sm_active_pct"] == 61.5 and second["sm_occupancy_pct"] == 38.0
    assert second["tensor_active_pct"] == 42.25
    assert second["pcie_tx_mbps"] == 0.9 and second["pcie_rx_mbps"] == 25.0  # 900 and 25,000 KB/s
    # 2,000,000 KiB/s over 18 links (111,111 KiB per link per second, rounded down by the fake)
    assert second["nvlink_tx_mbps"] == pytest.approx(111_111 * 18 * 1024 / 1e6, abs=1e-3)
    assert second["nvlink_rx_mbps"] == pytest.approx(55_555 * 18 * 1024 / 1e6, abs=1e-3)
    assert second["sm_clock_mhz"] == 1755 and second["sm_clock_max_mhz"] == 1980
    assert throttle_reason_names(second["throttle_reasons"]) == ["power_cap"]
    assert nv.calls["sm_clock_max"] == 1 and nv.calls["gpm"] == 1  # static answers asked once per GPU
    src.close()
    assert not nv.gpm_live  # every GPM sample freed


def test_older_gpus_without_gpm_or_nvlink_report_those_as_absent_not_zero() -> None:
    nv = FakeNvml(gpus=[FakeGpu.hopper(), FakeGpu.ampere_pcie(), FakeGpu.ampere_nvlink()])
    src = NvmlSource(nvml=nv)
    for _ in range(3):
        hopper, pcie_card, a100 = src.sample()
    assert hopper["sm_active_pct"] == 61.5  # GPM on one GPU does not depend on the others
    for rec in (pcie_card, a100):
        assert rec["sm_active_pct"] is None and rec["sm_occupancy_pct"] is None and rec["tensor_active_pct"] is None
    assert pcie_card["nvlink_tx_mbps"] is None and pcie_card["nvlink_rx_mbps"] is None
    assert (pcie_card["gpm"], pcie_card["nvlink_links"], a100["gpm"], a100["nvlink_links"]) == (False, 0, False, 12)
    assert pcie_card["pcie_rx_mbps"] == 150.0 and pcie_card["sm_clock_max_mhz"] == 1695
    assert a100["nvlink_tx_mbps"] == pytest.approx(41_666 * 12 * 1024 / 1e6, abs=1e-3)
    assert throttle_reason_names(a100["throttle_reasons"]) == ["sw_thermal", "hw_thermal"]
    assert nv.calls["gpm_metrics"] == 2  # only the Hopper GPU, from its second sample on
    assert nv.calls["nvlink"] == 6  # the two GPUs with links, every sample; none for the PCIe card


def test_driver_without_the_new_calls_leaves_them_null() -> None:
    nv = FakeNvml(
        gpus=[FakeGpu.hopper()],
        missing=("nvmlDeviceGetPcieThroughput", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetMaxClockInfo"),
    )
    src = NvmlSource(nvml=nv)
    recs = [src.sample()[0] for _ in range(3)]
    assert all(r["pcie_tx_mbps"] is None and r["nvlink_tx_mbps"] is None for r in recs)
    assert all(r["sm_clock_max_mhz"] is None and r["sm_clock_mhz"] == 1755 for r in recs)
    assert recs[-1]["sm_active_pct"] == 61.5


def test_throttle_names_decode_every_bit() -> None:
    assert throttle_reason_names(None) is None
    assert throttle_reason_names(0) == []
    assert throttle_reason_names(0x4 | 0x8 | 0x10 | 0x40) == ["power_cap", "hw_slowdown", "sync_boost", "hw_thermal"]
    assert throttle_reason_names(0x1 | 0x1000) == ["gpu_idle", "bit_0x1000"]  # unknown bits are kept, named
