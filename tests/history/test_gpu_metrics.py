"""Deeper GPU telemetry: fake NVML -> records -> stored rows, rollups, 1-minute rows and run figures."""

from __future__ import annotations

import json

import pytest
from sqlite_utils import Database

from gpuplanner.commands import runs_view
from gpuplanner.history import Ingestor
from gpuplanner.history.analytics import summarize
from gpuplanner.history.gpu_metrics import MISSING, format_metric, throttle_text
from gpuplanner.history.maintenance import downsample
from gpuplanner.history.runs import create_run
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.history.streams import T0, StreamBuilder
from trainer.nvml_sampler import NvmlSource
from trainer.protocol import encode, make_record

SAMPLES = 61  # one a second: the first sample of a GPU has no GPM or NVLink rate yet


def nvml_stream(samples: int = SAMPLES) -> tuple[bytes, int]:
    """A run on a Hopper GPU, an older PCIe card and an A100 (fake NVML), sampled once a second."""
    src = NvmlSource(nvml=FakeNvml(gpus=[FakeGpu.hopper(), FakeGpu.ampere_pcie(), FakeGpu.ampere_nvlink()]), node="n0")
    records = [make_record("run_start", 0, T0, config={"model_name": "m"}, gpus=3)]
    for k in range(samples):
        for rec in src.sample():
            records.append(make_record("gpu", len(records), T0 + 1 + k, **rec))
    records.append(make_record("run_end", len(records), T0 + 1 + samples, status="finished"))
    return "".join(encode(r) for r in records).encode(), len(records)


def ingest(db: Database, data: bytes, gpus: int = 3) -> int:
    run_id = create_run(db, gpu_count=gpus, price_usd_per_gpu_hour=3.0)
    ingestor = Ingestor(db, run_id, "s", batch_size=50)
    ingestor.feed_bytes(data)
    ingestor.flush()
    return run_id


def test_new_metrics_are_stored_per_sample_and_missing_ones_stay_null(db: Database) -> None:
    data, _ = nvml_stream()
    run_id = ingest(db, data)
    rows = db.execute(
        "SELECT gpu_index, sm_active_pct, tensor_active_pct, pcie_tx_mbps, pcie_rx_mbps, nvlink_tx_mbps,"
        " sm_clock_mhz, sm_clock_max_mhz, throttle_reasons FROM gpu_samples WHERE run_id = ? ORDER BY seq",
        [run_id],
    ).fetchall()
    assert len(rows) == 3 * SAMPLES
    by_gpu = {g: [r for r in rows if r[0] == g] for g in range(3)}
    hopper, pcie_card, a100 = by_gpu[0], by_gpu[1], by_gpu[2]
    assert hopper[0][1] is None and hopper[0][5] is None  # first sample: no GPM or NVLink rate yet
    assert {r[1:6] for r in hopper[1:]} == {(61.5, 42.25, 0.9, 25.0, 2047.998)}
    assert all(r[1] is None and r[2] is None and r[5] is None for r in pcie_card)  # no GPM, no NVLink: NULL
    assert all(r[3] == 2.0 and r[4] == 150.0 for r in pcie_card)
    assert all(r[6:] == (1200.0, 1410.0, 0x60) for r in a100)


def test_run_figures_per_gpu_with_missing_metrics_named(db: Database) -> None:
    data, _ = nvml_stream()
    summary = summarize(db, ingest(db, data))
    hopper, pcie_card, a100 = summary.gpus
    assert (hopper["index"], hopper["samples"]) == (0, SAMPLES)
    assert hopper["sm_active_pct"] == pytest.approx(61.5) and hopper["tensor_active_pct"] == pytest.approx(42.25)
    assert hopper["nvlink_tx_mbps"] == pytest.approx(111_111 * 18 * 1024 / 1e6, abs=1e-3)
    assert hopper["sm_clock_pct"] == pytest.approx(100 * 1755 / 1980)
    assert hopper["throttle_pct"] == {"power_cap": 100.0} and hopper["slowdown_pct"] == 100.0
    assert hopper["missing"] == []
    assert pcie_card["missing"] == [
        "sm_active_pct",
        "sm_occupancy_pct",
        "tensor_active_pct",
        "nvlink_tx_mbps",
        "nvlink_rx_mbps",
    ]
    assert pcie_card["pcie_rx_mbps"] == pytest.approx(150.0) and pcie_card["sm_clock_pct"] == pytest.approx(100.0)
    assert pcie_card["throttle_pct"] == {"power_cap": 100.0}  # the fake's default mask is 0x4
    assert a100["throttle_pct"] == {"hw_thermal": 100.0, "sw_thermal": 100.0}
    assert a100["sm_clock_pct"] == pytest.approx(100 * 1200 / 1410)
    assert "sm_active_pct" in a100["missing"] and a100["nvlink_rx_mbps"] == pytest.approx(41_666 * 12 * 1024 / 1e6)
    assert format_metric("sm_active_pct", a100["sm_active_pct"]) == MISSING
    assert format_metric("nvlink_tx_mbps", hopper["nvlink_tx_mbps"]) == "2.05 GB/s"
    assert throttle_text(a100["throttle_pct"]) == "thermal (hardware) 100%, thermal (software) 100%"


def test_effective_gpu_hours_from_utilisation_and_from_sm_activity(db: Database) -> None:
    """Two GPUs for one hour: GPU 0 at 90% utilisation and 40% SM activity, GPU 1 (no GPM) at 70%."""
    s = StreamBuilder()
    s.add("run_start", 0, config={}, gpus=2)
    for k in range(61):
        at = 60.0 * k
        s.add("gpu", at, node="n0", index=0, util_pct=90.0, mem_used_bytes=1, mem_total_bytes=2, sm_active_pct=40.0)
        s.add("gpu", at, node="n0", index=1, util_pct=70.0, mem_used_bytes=1, mem_total_bytes=2)
    summary = summarize(db, ingest(db, s.data(), gpus=2))
    assert summary.hours == pytest.approx(1.0) and summary.gpu_hours == pytest.approx(2.0)
    assert summary.effective_gpu_hours == pytest.approx(2.0 * 0.80)  # mean NVML utilisation 80%
    assert summary.avg_sm_active_pct == pytest.approx(40.0)
    assert summary.sm_active_coverage_pct == pytest.approx(50.0)  # only GPU 0 reports it
    assert summary.effective_gpu_hours_sm == pytest.approx(2.0 * 0.40)
    assert summary.cost_usd == pytest.approx(6.0)
    assert summary.cost_per_effective_gpu_hour_sm_usd == pytest.approx(6.0 / 0.8)
    assert summary.avg_tensor_active_pct is None


def test_no_gpm_anywhere_gives_no_sm_figure_rather_than_zero(db: Database) -> None:
    s = StreamBuilder()
    s.add("run_start", 0, config={}, gpus=1)
    for k in range(10):
        s.gpu(60.0 * k, 0, 50.0)
    summary = summarize(db, ingest(db, s.data(), gpus=1))
    assert summary.effective_gpu_hours == pytest.approx(summary.gpu_hours * 0.5)
    assert summary.effective_gpu_hours_sm is None and summary.sm_active_coverage_pct is None


def test_downsampled_minutes_keep_means_counts_and_nulls(db: Database) -> None:
    data, _ = nvml_stream(samples=150)
    run_id = ingest(db, data)
    before = summarize(db, run_id)
    # two passes, like a nightly job on a run still going
    downsample(db, older_than_s=0.0, now=T0 + 90)
    downsample(db, older_than_s=0.0, now=T0 + 1000)
    assert db.execute("SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?", [run_id]).fetchone()[0] == 0
    rows = db.execute(
        "SELECT gpu_index, SUM(n), SUM(sm_active_n), SUM(sm_active_mean * sm_active_n) / SUM(sm_active_n),"
        " MAX(sm_active_mean), SUM(nvlink_tx_n), MAX(sm_clock_max_mhz), MIN(sm_clock_mean), MAX(throttle_any),"
        " SUM(pcie_rx_n) FROM gpu_samples_1m WHERE run_id = ? GROUP BY gpu_index ORDER BY gpu_index",
        [run_id],
    ).fetchall()
    assert rows[0][:5] == (0, 150, 149, pytest.approx(61.5), pytest.approx(61.5))
    assert rows[0][5:] == (149, 1980.0, pytest.approx(1755.0), 0x4, 150)
    assert rows[1][2:6] == (0, None, None, 0)  # the PCIe card: no GPM, no NVLink in any minute
    assert rows[2][6:9] == (1410.0, pytest.approx(1200.0), 0x60)
    assert summarize(db, run_id).gpus == before.gpus  # the rollups, counted on arrival, do not change


def test_runs_show_prints_both_effective_figures_and_missing_labels(
    db: Database, db_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = nvml_stream()
    run_id = ingest(db, data)
    runs_view._print_summary(summarize(db, run_id), None)
    out = capsys.readouterr().out
    assert "effective GPU-hours (NVML utilisation)" in out and "effective GPU-hours (SM activity)" in out
    assert "SM activity counts the share of SMs busy" in out or "share of SMs busy" in out
    gpu1 = next(line for line in out.splitlines() if line.startswith("  GPU n0:1"))
    assert f"SM activity {MISSING}" in gpu1 and f"NVLink TX {MISSING}" in gpu1
    runs_view._print_summary(summarize(db, run_id), "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["effective_gpu_hours_sm"] == pytest.approx(doc["gpu_hours"] * doc["avg_sm_active_pct"] / 100)
    assert doc["gpus"][1]["sm_active_pct"] is None and "sm_active_pct" in doc["gpus"][1]["missing"]


def test_export_carries_the_new_columns(db: Database) -> None:
    import io

    from gpuplanner.history.export import export_run

    data, _ = nvml_stream(samples=3)
    run_id = ingest(db, data)
    out = io.StringIO()
    export_run(db, run_id, "json", out)
    doc = json.loads(out.getvalue())
    hopper_last = [row for row in doc["gpu_samples"] if row["gpu_index"] == 0][-1]
    assert hopper_last["sm_active_pct"] == 61.5 and hopper_last["sm_clock_max_mhz"] == 1980.0
    card_last = [row for row in doc["gpu_samples"] if row["gpu_index"] == 1][-1]
    assert card_last["sm_active_pct"] is None and card_last["nvlink_tx_mbps"] is None
    assert doc["summary"]["gpus"][1]["missing"][0] == "sm_active_pct"
