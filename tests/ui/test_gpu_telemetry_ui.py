"""The deeper GPU telemetry in the window: the Runs pane's GPU table and the History summary, with every
metric a GPU does not report labelled as such (fake NVML: a Hopper GPU, a PCIe card, an A100)."""

from __future__ import annotations

from typing import Any

from gpuplanner.history.db import open_db
from gpuplanner.history.gpu_metrics import MISSING, UTILISATION_NOTE
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.history.history_summary import summary_html
from gpuplanner.ui.runs.run_telemetry import GPU_TABLE_COLUMNS, MISSING_SHORT, RunTelemetry
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.history.test_gpu_metrics import ingest, nvml_stream
from tests.ui.helpers import wait_for_history
from trainer.nvml_sampler import NvmlSource
from trainer.protocol import make_record

COL = {key: k for k, (key, _) in enumerate(GPU_TABLE_COLUMNS)}


def fake_records(samples: int) -> list[dict[str, Any]]:
    src = NvmlSource(nvml=FakeNvml(gpus=[FakeGpu.hopper(), FakeGpu.ampere_pcie(), FakeGpu.ampere_nvlink()]), node="n0")
    records = [make_record("run_start", 0, 1000.0, config={})]
    for k in range(samples):
        for rec in src.sample():
            records.append(make_record("gpu", len(records), 1001.0 + k, **rec))
    return records


def test_runs_pane_gpu_table_shows_new_metrics_and_missing_labels(qtbot: Any, runs_pane: Any) -> None:
    entry = runs_pane._add_entry(7, "fake", "box")
    entry.telemetry.add_records(fake_records(1))
    runs_pane._update_text()
    table = runs_pane.gpu_table
    assert table.isVisible() and table.table.rowCount() == 3
    # first sample: GPM and NVLink rates need two samples; the Hopper GPU says they are coming
    assert table.cell_text(0, COL["sm_active_pct"]) == "…" and table.cell_text(0, COL["nvlink_tx_mbps"]) == "…"
    assert table.cell_text(1, COL["sm_active_pct"]) == MISSING_SHORT  # the PCIe card never will
    assert table.cell_text(2, COL["nvlink_tx_mbps"]) == "…" and table.cell_text(2, COL["tensor_active_pct"]) == (
        MISSING_SHORT
    )
    assert table.cell_text(0, COL["pcie_tx_mbps"]) == "0.9 MB/s"
    entry.telemetry.add_records(fake_records(2)[4:])  # the second sample of each GPU (seq 4..6)
    runs_pane._update_text()
    assert table.cell_text(0, COL["sm_active_pct"]) == "61.5 %"
    assert table.cell_text(0, COL["tensor_active_pct"]) == "42.2 %"
    assert table.cell_text(0, COL["nvlink_tx_mbps"]) == "2.05 GB/s"
    assert table.cell_text(0, COL["sm_clock"]) == "1755 MHz (89%)"
    assert table.table.item(0, COL["sm_clock"]).toolTip() == "1755 MHz of a maximum 1980 MHz"
    assert table.cell_text(0, COL["throttle"]) == "power cap"
    # the PCIe card has no GPM and no NVLink: labelled, never 0
    for key in ("sm_active_pct", "tensor_active_pct", "nvlink_tx_mbps", "nvlink_rx_mbps"):
        assert table.cell_text(1, COL[key]) == MISSING_SHORT
        assert table.table.item(1, COL[key]).toolTip() == MISSING
    assert table.cell_text(1, COL["pcie_rx_mbps"]) == "150.0 MB/s"
    assert table.cell_text(2, COL["throttle"]) == "thermal (software), thermal (hardware)"
    assert table.cell_text(2, COL["temp_c"]) == "61 °C"
    assert MISSING in table.caption.text()
    assert UTILISATION_NOTE in table.table.horizontalHeaderItem(COL["util_pct"]).toolTip()
    qtbot.waitUntil(lambda: table.table.viewport().width() > 0)
    assert table.table.horizontalHeader().length() <= table.table.viewport().width() + 1  # no sideways scroll


def test_backfill_after_a_restart_keeps_the_new_metrics(tmp_path: Any) -> None:
    db = open_db(tmp_path / "h.sqlite")
    data, _ = nvml_stream(samples=3)
    run_id = ingest(db, data)
    tel = RunTelemetry(run_id)
    tel.backfill_from_history(db, run_id)
    db.close()
    rows = dict(tel.gpu_table())
    assert rows["n0:0"][COL["sm_active_pct"]].text == "61.5 %"
    assert rows["n0:1"][COL["sm_active_pct"]].state == "missing"
    assert rows["n0:2"][COL["sm_clock"]].text == "1200 MHz (85%)"


def test_history_summary_shows_both_effective_figures_and_missing_metrics(qtbot: Any, services: Any) -> None:
    db = open_db(services.db_path)
    data, _ = nvml_stream()
    run_id = ingest(db, data)
    plain = create_run(db, name="no-gpm", gpu_count=1, price_usd_per_gpu_hour=1.0)
    db.close()
    pane = HistoryPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    wait_for_history(qtbot, pane)
    with qtbot.waitSignal(pane.seriesShown, timeout=10_000):
        pane.select_runs([run_id])
    text = pane.summary_view.toPlainText()
    assert "Effective GPU-hours (NVML utilisation)" in text and "Effective GPU-hours (SM activity)" in text
    assert UTILISATION_NOTE in text
    assert "61.5 %" in text and "2.05 GB/s" in text and "1755 / 1980 MHz" in text
    assert "power cap 100%" in text and "thermal (hardware) 100%" in text
    gpu1 = text[text.index("n0:1") : text.index("n0:2")]  # the PCIe card's row (one cell per line)
    assert gpu1.count(MISSING) == 4  # SM activity, tensor activity, NVLink TX and RX
    assert text.count(MISSING) == 6  # and the A100's SM and tensor activity; none on the Hopper GPU
    assert summary_html(next(s for s in pane.summaries() if s.run_id == plain)).count("not reported by this run") == 1
    pane.shutdown()
