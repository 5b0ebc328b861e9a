"""A SkyPilot vms.csv with numbers that overflow (``1e999`` reads as infinity) imports what is sane and
reports the rest per line; no traceback (issue 13, item 6)."""

from __future__ import annotations

from pathlib import Path

from gpuplanner.plan.catalog import builtin_catalog
from gpuplanner.plan.skypilot import import_vms_csv

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\n"
INFO = "\"{'Gpus': [{'Name': 'A100', 'Count': 8, 'MemoryInfo': {'SizeInMiB': %s}}]}\""


def test_overflowing_cells(tmp_path: Path) -> None:
    rows = [
        f"p4d.24xlarge,A100,1e999,96,1152,1e999,1e999,us-east-1,{INFO % '1e999'}",  # count inf
        f"p4d.24xlarge,A100,8,96,1152,32.77,9.8,us-east-1,{INFO % ('1' + '0' * 400)}",  # memory: GpuInfo ignored
        "p4x.huge,A100,1e300,96,1152,3,1,us-east-1,",  # count far beyond any instance
        "p4y.huge,A100,8,96,1152,1e999,1,us-east-1,",  # price inf
        f"p4z.24xlarge,A100,8,96,1152,16,-1e999,us-west-2,{INFO % '40960'}",  # spot -inf: dropped
    ]
    path = tmp_path / "vms.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    result = import_vms_csv(path, "aws", builtin_catalog(), as_of="2026-01-01")
    report = result.report
    assert report.rows == 5 and report.imported == 2 and report.bad_gpu_info == 2
    assert report.skipped_no_accelerator == 2 and report.skipped_no_price == 1
    assert any("line 4" in p and "more GPUs" in p for p in report.problems)
    offers = {o.instance_type: o for o in result.offers}
    assert offers["p4d.24xlarge"].on_demand_usd == round(32.77 / 8, 6)
    assert offers["p4z.24xlarge"].on_demand_usd == 2.0 and offers["p4z.24xlarge"].spot_usd is None
