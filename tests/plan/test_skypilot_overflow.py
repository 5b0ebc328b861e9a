"""A SkyPilot vms.csv with numbers that overflow (``1e999`` reads as infinity) imports what is sane and
reports the rest per line; no traceback (issue 13, item 6)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplanner.plan.catalog import CatalogError, builtin_catalog
from gpuplanner.plan.skypilot import import_vms_csv

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\n"
CATALOG = builtin_catalog()
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


NUMBER_CELLS = st.sampled_from(
    ["", "1", "8", "0.5", "2.5", "-1", "0", "1e999", "-1e999", "nan", "inf", "1e300", "1" + "0" * 400, "x", "1,5"]
)
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters='\r\n"\0'), max_size=12)
INFO_CELLS = st.one_of(
    st.just(""),
    st.builds(lambda v: "{'Gpus': [{'Name': 'A100', 'MemoryInfo': {'SizeInMiB': " + v + "}}]}", NUMBER_CELLS),
    TEXT,
)
ROWS = st.tuples(
    TEXT,  # InstanceType
    st.one_of(st.sampled_from(["A100", "H100", "T4", "L4", ""]), TEXT),  # AcceleratorName
    NUMBER_CELLS,  # AcceleratorCount
    NUMBER_CELLS,  # vCPUs
    NUMBER_CELLS,  # MemoryGiB
    NUMBER_CELLS,  # Price
    NUMBER_CELLS,  # SpotPrice
    st.one_of(st.sampled_from(["us-east-1", ""]), TEXT),  # Region
    INFO_CELLS,
)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(ROWS, max_size=6))
def test_fuzz_vms_rows(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, ...]]) -> None:
    path = tmp_path_factory.mktemp("vms") / "vms.csv"
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    path.write_text(HEADER + buffer.getvalue(), encoding="utf-8")
    try:
        result = import_vms_csv(path, "aws", CATALOG, as_of="2026-01-01")
    except CatalogError as exc:
        assert "\n" not in str(exc)
        return
    for offer in result.offers:
        assert isinstance(offer.gpu_count, int) and 1 <= offer.gpu_count <= 1024
        assert math.isfinite(offer.on_demand_usd) and offer.on_demand_usd > 0
        assert offer.spot_usd is None or 0 < offer.spot_usd < offer.on_demand_usd
