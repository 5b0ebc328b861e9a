"""Issue 31 item 1: board variants by instance type, one offer per instance, and GCP accelerators priced with
their host machine. Rows are SkyPilot catalog v7 rows as published (skypilot-org/skypilot-catalog,
catalogs/v7/lambda/vms.csv and catalogs/v7/gcp/vms.csv), in their own column orders."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.plan.catalog import builtin_catalog, load_catalog
from gpuplanner.plan.skypilot import import_vms_csv, instance_board, parse_vms_text

H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': %s, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}\""  # noqa: E501
A100_INFO = "\"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': %s, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 40960}\""  # noqa: E501
LAMBDA = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    "cpu_4x_general,,,4.0,16.0,0.2,us-east-1,,\n"
    f"gpu_1x_h100_pcie,H100,1.0,26.0,200.0,2.49,us-west-1,{H100_INFO % '1.0'},\n"
    f"gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,3.29,us-east-1,{H100_INFO % '1.0'},\n"
    f"gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,3.29,us-west-1,{H100_INFO % '1.0'},\n"
    f"gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,23.92,us-east-1,{H100_INFO % '8.0'},\n"
    f"gpu_1x_a100,A100,1.0,30.0,200.0,1.29,us-west-1,{A100_INFO % '1.0'},\n"
    f"gpu_1x_a100_sxm4,A100,1.0,30.0,200.0,1.29,us-east-1,{A100_INFO % '1.0'},\n"
    f"gpu_8x_a100,A100,8.0,124.0,1800.0,10.32,us-east-1,{A100_INFO % '8.0'},\n"
)
GCP = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
    "a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.17547\n"
    "a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-b,9.46006,2.17547\n"
    "a3-highgpu-1g,26.0,234.0,,,,us-central1,us-central1-a,1.18251,0.27193\n"
    # the accelerators alone: an H100 is not rented without its a3 machine
    ",,,H100,8,H100,us-central1,us-central1-a,88.2,20.0\n"
    ",,,H100,8,H100,us-central1,us-central1-b,88.2,19.6\n"
    ",,,H100,1,H100,us-central1,us-central1-a,11.0,2.5\n"
    # no a3-highgpu-4g row in this catalog: GPU only, not rentable
    ",,,H100,4,H100,us-central1,us-central1-a,44.1,10.0\n"
    # a T4 attaches to any n1 VM: kept as an accelerator-only price, as before
    ",,,T4,1,T4,us-central1,us-central1-a,0.35,0.07\n"
)


def offers_of(text: str, provider: str):  # type: ignore[no-untyped-def]
    return parse_vms_text(text, f"{provider}/vms.csv", provider, builtin_catalog(), as_of="2026-11-20")


def test_lambda_boards_come_from_the_instance_type_one_offer_per_instance() -> None:
    result = offers_of(LAMBDA, "lambda")
    boards = {(o.region, o.instance_type): o.gpu for o in result.offers}
    assert boards == {
        ("us-west-1", "gpu_1x_h100_pcie"): "H100 PCIe",
        ("us-east-1", "gpu_1x_h100_sxm5"): "H100 SXM",
        ("us-west-1", "gpu_1x_h100_sxm5"): "H100 SXM",
        ("us-east-1", "gpu_8x_h100_sxm5"): "H100 SXM",
        ("us-west-1", "gpu_1x_a100"): "A100 40GB PCIe",  # Lambda: "1x A100 (40 GB PCIe)"
        ("us-east-1", "gpu_1x_a100_sxm4"): "A100 40GB",
        ("us-east-1", "gpu_8x_a100"): "A100 40GB",  # Lambda: "8x A100 (40 GB SXM4)"
    }
    # one offer per instance and region: the shipped key (provider, region, GPU, instance) of each matches
    # (so an import replaces the shipped row instead of adding a second board for the same instance)
    shipped = {o.key for o in builtin_catalog().offers if o.provider == "lambda"}
    offers = {(o.region, o.instance_type): o for o in result.offers}
    for region, instance in [
        ("us-west-1", "gpu_1x_h100_pcie"),
        ("us-west-1", "gpu_1x_a100"),
        ("us-east-1", "gpu_1x_h100_sxm5"),
        ("us-east-1", "gpu_1x_a100_sxm4"),
    ]:
        assert offers[(region, instance)].key in shipped, instance
    assert len({(o.region, o.instance_type) for o in result.offers}) == len(result.offers)
    h100x8 = next(o for o in result.offers if o.instance_type == "gpu_8x_h100_sxm5")
    assert h100x8.on_demand_usd == pytest.approx(23.92 / 8)


@pytest.mark.parametrize(
    ("provider", "instance", "board"),
    [
        ("lambda", "gpu_1x_h100_pcie", "pcie"),
        ("lambda", "gpu_8x_a100_80gb_sxm4", "sxm"),
        ("lambda", "gpu_1x_a100", "pcie"),
        ("lambda", "gpu_1x_a10", None),
        ("aws", "p5.48xlarge", None),
        ("azure", "Standard_NC40ads_H100_v5", None),
    ],
)
def test_instance_board(provider: str, instance: str, board: str | None) -> None:
    assert instance_board(provider, instance) == board


def test_gcp_accelerators_are_priced_with_their_host_machine() -> None:
    result = offers_of(GCP, "gcp")
    offers = {(o.region, o.instance_type): o for o in result.offers}
    a3 = offers[("us-central1", "a3-highgpu-8g")]
    # GPUs plus machine, per GPU; the cheapest zone (b: spot 19.6 + 2.17547)
    assert a3.gpu == "H100 SXM" and a3.gpu_count == 8
    assert a3.on_demand_usd == pytest.approx((88.2 + 9.46006) / 8)
    assert a3.spot_usd == pytest.approx((19.6 + 2.17547) / 8)
    one = offers[("us-central1", "a3-highgpu-1g")]
    assert one.on_demand_usd == pytest.approx(11.0 + 1.18251) and one.spot_usd == pytest.approx(2.5 + 0.27193)
    # nothing priced as the accelerator alone for the a3 family
    assert not any("H100" in o.instance_type for o in result.offers)
    assert ("us-central1", "1x T4 (accelerator only)") in offers
    report = result.report
    assert report.gpu_only == 1 and report.to_dict()["gpu_only"] == 1
    assert any("line 8:" in p and "a3-highgpu-4g" in p and "GPU only" in p for p in report.problems)
    assert len(result.offers) == 3


def test_cli_import_reports_gpu_only_rows_and_its_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vms.csv"
    path.write_text(GCP)
    result = import_vms_csv(path, "gcp", builtin_catalog(), as_of="2026-11-20")
    assert result.report.gpu_only == 1 and result.report.imported == 3

    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    assert cli.main(["catalog", "import-skypilot", str(path), "--provider", "gcp"]) == 0
    out = capsys.readouterr().out
    assert "the file's modification day (a SkyPilot vms.csv carries no date of its own)" in out
    assert "skipped 0 malformed rows and 1 GPU-only rows" in out
    assert cli.main(["catalog", "import-skypilot", str(path), "--provider", "gcp", "--as-of", "2026-11-20"]) == 0
    out = capsys.readouterr().out
    assert "modification day" not in out
    a3 = next(o for o in load_catalog().offers if o.instance_type == "a3-highgpu-8g" and o.region == "us-central1")
    assert a3.as_of == "2026-11-20" and a3.on_demand_usd == pytest.approx((88.2 + 9.46006) / 8)


def test_the_memory_size_in_the_instance_type_picks_the_variant() -> None:
    # the accelerator column says only "A100" and GpuInfo is empty: the instance type says 80 GB, SXM4
    text = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
        "gpu_8x_a100_80gb_sxm4,A100,8.0,240.0,1800.0,14.32,us-east-1,,\n"
        "gpu_1x_a100,A100,1.0,30.0,200.0,1.29,us-west-1,,\n"
    )
    offers = {o.instance_type: o for o in offers_of(text, "lambda").offers}
    assert offers["gpu_8x_a100_80gb_sxm4"].gpu == "A100 80GB"
    assert offers["gpu_1x_a100"].gpu == "A100 40GB PCIe"
