"""tools/refresh_shipped_catalog.py: the shipped snapshot's rows take SkyPilot's prices, dated by the file's
last commit and citing it; rows the catalog lacks and other providers keep their own dates."""

from __future__ import annotations

import csv
import io
import os
import subprocess
from pathlib import Path

from tools.refresh_shipped_catalog import SHIPPED, refresh

H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': %s, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}\""  # noqa: E501
# rows in the layout of skypilot-org/skypilot-catalog catalogs/v7/lambda/vms.csv (the sxm5 rows as published
# there; the pcie price is made up, to differ from the shipped 2.49)
LAMBDA = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    f"gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,3.29,us-east-1,{H100_INFO % '1.0'},\n"
    f"gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,23.92,us-east-1,{H100_INFO % '8.0'},\n"
    f"gpu_1x_h100_pcie,H100,1.0,26.0,200.0,2.86,us-west-1,{H100_INFO % '1.0'},\n"
)


def git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2026-11-20T06:00:00+00:00",
        "GIT_COMMITTER_DATE": "2026-11-20T06:00:00+00:00",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def test_refresh_dates_rows_by_the_commit_and_keeps_the_rest(tmp_path: Path) -> None:
    repo = tmp_path / "skypilot-catalog"
    (repo / "catalogs" / "v7" / "lambda").mkdir(parents=True)
    (repo / "catalogs" / "v7" / "lambda" / "vms.csv").write_text(LAMBDA)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lambda")

    shipped = SHIPPED.read_text(encoding="utf-8")
    text, changes = refresh(repo, shipped)
    before = {(r["provider"], r["region"], r["instance_type"]): r for r in csv.DictReader(io.StringIO(shipped))}
    after = {(r["provider"], r["region"], r["instance_type"]): r for r in csv.DictReader(io.StringIO(text))}
    assert set(after) == set(before)

    h100x8 = after[("lambda", "us-east-1", "gpu_8x_h100_sxm5")]
    assert h100x8["on_demand_usd_per_gpu_hour"] == "2.99" and h100x8["as_of"] == "2026-11-20"
    assert h100x8["source"].startswith("SkyPilot catalog v7 lambda/vms.csv (https://github.com/skypilot-org/")
    assert h100x8["source"].endswith("committed 2026-11-20)")
    pcie = after[("lambda", "us-west-1", "gpu_1x_h100_pcie")]
    assert (pcie["gpu"], pcie["on_demand_usd_per_gpu_hour"]) == ("H100 PCIe", "2.86")
    # not in this catalog file: keeps its own price and date
    a10 = ("lambda", "us-west-1", "gpu_1x_a10")
    assert after[a10] == before[a10]
    # providers without a file here (and those SkyPilot does not cover) are untouched
    assert all(after[k] == before[k] for k in before if k[0] != "lambda")
    assert any("aws: no catalogs/v7/aws/vms.csv" in line for line in changes)
    assert any("gpu_1x_h100_pcie" in line and "2.86" in line for line in changes)
    # repeatable: refreshing the refreshed text changes nothing more
    assert refresh(repo, text)[0] == text
