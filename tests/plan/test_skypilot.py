"""Importing SkyPilot catalog vms.csv files (two clouds' column orders) into the user's prices."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import PRICE_COLUMNS, CatalogError, PriceOffer, builtin_catalog, load_catalog
from gpuplanner.plan.skypilot import import_vms_csv, merge_into_user_prices, parse_gpu_info

DATA = Path(__file__).resolve().parents[1] / "data" / "skypilot"
AWS = DATA / "aws_vms.csv"
GCP = DATA / "gcp_vms.csv"


def by_instance(offers: tuple[PriceOffer, ...]) -> dict[tuple[str, str], PriceOffer]:
    return {(o.region, o.instance_type): o for o in offers}


def run_cli(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_aws_layout() -> None:
    result = import_vms_csv(AWS, "AWS", builtin_catalog(), as_of="2025-07-01")
    offers = by_instance(result.offers)
    assert set(offers) == {
        ("us-east-1", "g5.xlarge"),
        ("us-west-2", "g5.12xlarge"),
        ("us-east-1", "p4de.24xlarge"),
        ("us-east-1", "p5.48xlarge"),
        ("us-east-1", "g4dn.xlarge"),
        ("us-east-1", "g6.xlarge"),
    }
    g5 = offers[("us-east-1", "g5.xlarge")]
    # Cheapest zone: two zones, the spot price of us-east-1b wins.
    assert (g5.gpu, g5.gpu_count, g5.on_demand_usd, g5.spot_usd) == ("A10G", 1, 1.006, 0.3981)
    g5_12 = offers[("us-west-2", "g5.12xlarge")]
    # Per instance-hour / 4 GPUs.
    assert g5_12.on_demand_usd == pytest.approx(5.672 / 4) and g5_12.spot_usd == pytest.approx(0.6)
    p4de = offers[("us-east-1", "p4de.24xlarge")]
    assert p4de.gpu == "A100 80GB" and p4de.on_demand_usd == pytest.approx(27.447 / 8) and p4de.spot_usd is None
    assert p4de.notice_s is None
    p5 = offers[("us-east-1", "p5.48xlarge")]
    assert p5.gpu == "H100 SXM" and p5.spot_usd == pytest.approx(3.0) and p5.notice_s == 120
    assert offers[("us-east-1", "g6.xlarge")].gpu == "L4"
    assert all(o.provider == "aws" and o.as_of == "2025-07-01" and "aws_vms.csv" in o.source for o in result.offers)

    report = result.report
    assert report.rows == 10 and report.imported == 6
    assert report.skipped_no_accelerator == 1
    assert report.skipped_no_price == 1
    assert report.unknown_accelerators == {"Inferentia2": 1}
    # The truncated dict and the code-looking cell are reported, never evaluated; AcceleratorName is used.
    assert report.bad_gpu_info == 2
    assert any(p.startswith("line 7:") for p in report.problems)


def test_gcp_layout() -> None:
    result = import_vms_csv(GCP, "gcp", builtin_catalog(), as_of="2025-07-01")
    offers = by_instance(result.offers)
    t4 = offers[("us-central1", "1x T4 (accelerator only)")]
    assert (t4.gpu, t4.on_demand_usd, t4.spot_usd, t4.notice_s) == ("T4", 0.35, 0.10, 30)
    t4x4 = offers[("us-central1", "4x T4 (accelerator only)")]
    assert t4x4.gpu_count == 4 and t4x4.on_demand_usd == pytest.approx(0.35) and t4x4.spot_usd == pytest.approx(0.11)
    assert offers[("us-central1", "a2-highgpu-1g")].gpu == "A100 40GB"
    assert offers[("us-central1", "a2-ultragpu-1g")].gpu == "A100 80GB"
    assert offers[("europe-west4", "g2-standard-4")].on_demand_usd == 0.78
    a3 = offers[("us-central1", "a3-highgpu-8g")]
    assert a3.gpu == "H100 SXM" and a3.on_demand_usd == pytest.approx(88.49 / 8)
    weird = offers[("us-central1", "weird-spot")]
    assert weird.spot_usd is None and weird.notice_s is None  # spot above on-demand is dropped
    assert ("us-central1", "g2-standard-4") not in offers  # half a GPU

    report = result.report
    assert report.rows == 11 and report.imported == len(result.offers) == 7
    assert report.skipped_fractional == 1
    assert report.spot_dropped == 1
    assert report.bad_gpu_info == 1
    assert report.unknown_accelerators == {"tpu-v5-lite": 1}
    document = report.to_dict()
    assert json.loads(json.dumps(document))["skipped"]["unknown_accelerator"] == 1


def test_gpu_info_name_and_memory_disambiguate(tmp_path: Path) -> None:
    path = tmp_path / "vms.csv"
    path.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,GpuInfo,Price,SpotPrice,Region\n"
        "\"x.8\",,8,\"{'Gpus': [{'Name': 'A100', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 81920}}]}\",32,,r1\n"
        "\"x.1\",A100,1,\"{'Gpus': [{'Name': 'A100', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 40960}}]}\",3,,r1\n"
    )
    offers = by_instance(import_vms_csv(path, "lab", builtin_catalog()).offers)
    assert offers[("r1", "x.8")].gpu == "A100 80GB" and offers[("r1", "x.8")].on_demand_usd == 4.0
    assert offers[("r1", "x.1")].gpu == "A100 40GB"


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("{'Gpus': [{'Name': 'A10G', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 24576}}]}", ("A10G", 24576.0)),
        ("{'Gpus': [{'Name': 'L4'}]}", ("L4", None)),
        ("'T4'", ("T4", None)),
        ("T4", ("T4", None)),
        ("A100-80GB", ("A100-80GB", None)),
        ("", (None, None)),
    ],
)
def test_parse_gpu_info(cell: str, expected: tuple[str | None, float | None]) -> None:
    assert parse_gpu_info(cell) == expected


@pytest.mark.parametrize(
    "cell",
    [
        "{'Gpus': [{'Name': 'H100'",
        "__import__('os').system('true')",
        "[1, 2]",
        "{'NoGpus': 1}",
        "{'Gpus': []}",
        "[" * 5000,
    ],
)
def test_parse_gpu_info_rejects_malformed(cell: str) -> None:
    with pytest.raises(ValueError):
        parse_gpu_info(cell)


def test_not_a_vms_csv(tmp_path: Path) -> None:
    path = tmp_path / "vms.csv"
    path.write_text("InstanceType,Price,Region\nm5.large,0.1,us-east-1\n")
    with pytest.raises(CatalogError) as info:
        import_vms_csv(path, "aws", builtin_catalog())
    assert info.value.field == "AcceleratorName" and info.value.line == 1
    with pytest.raises(CatalogError, match="cannot read"):
        import_vms_csv(tmp_path / "missing.csv", "aws", builtin_catalog())


def test_merge_into_user_prices() -> None:
    folder = config_dir()
    aws = import_vms_csv(AWS, "aws", builtin_catalog(), as_of="2025-07-01")
    first = merge_into_user_prices(aws.offers)
    assert first.path == folder / "prices.csv"
    assert (first.added, first.replaced, first.total) == (6, 0, 6)
    assert first.path.read_text().splitlines()[0] == ",".join(PRICE_COLUMNS)
    assert [p.name for p in folder.iterdir()] == ["prices.csv"]  # no temp file left behind

    catalog = load_catalog()
    # The imported p5 row replaces the shipped one (same provider, region, GPU, instance type).
    p5 = [o for o in catalog.offers if o.instance_type == "p5.48xlarge"]
    assert len(p5) == 1 and p5[0].as_of == "2025-07-01" and p5[0].spot_usd == pytest.approx(3.0)
    assert any(o.region == "us-west-2" and o.gpu == "A10G" for o in catalog.offers)

    again = merge_into_user_prices(aws.offers)
    assert (again.added, again.replaced, again.total) == (0, 6, 6)
    gcp = import_vms_csv(GCP, "gcp", load_catalog(), as_of="2025-07-01")
    both = merge_into_user_prices(gcp.offers)
    assert (both.added, both.replaced, both.total) == (7, 0, 13)


def test_merge_refuses_to_overwrite_a_malformed_file() -> None:
    path = config_dir() / "prices.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    broken = ",".join(PRICE_COLUMNS) + "\naws,us-east-1,T4,1,g4,cheap,,,,2025-06-15,x\n"
    path.write_text(broken)
    aws = import_vms_csv(AWS, "aws", builtin_catalog())
    with pytest.raises(CatalogError, match="line 2"):
        merge_into_user_prices(aws.offers, catalog=builtin_catalog())
    assert path.read_text() == broken


def test_cli_import_skypilot_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["catalog", "import-skypilot", str(GCP), "--provider", "gcp", "--json"], monkeypatch, capsys
    )
    assert code == 0 and err == ""
    document = json.loads(out)
    assert document["imported"] == 7 and document["merge"]["added"] == 7
    assert document["unknown_accelerators"] == {"tpu-v5-lite": 1}
    assert len(document["offers"]) == 7

    code, out, _ = run_cli(["catalog", "prices", "--gpu", "L4", "--json"], monkeypatch, capsys)
    rows = json.loads(out)
    assert any(r["provider"] == "gcp" and r["region"] == "europe-west4" for r in rows)


def test_cli_import_skypilot_text(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["catalog", "import-skypilot", str(AWS), "--provider", "aws"], monkeypatch, capsys)
    assert code == 0
    assert "imported 6 offers" in out and "Inferentia2 (1)" in out and "unreadable GpuInfo" in out


@pytest.mark.parametrize("provider", ["own", "A B", ""])
def test_cli_import_skypilot_bad_provider(
    provider: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["catalog", "import-skypilot", str(AWS), "--provider", provider], monkeypatch, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--provider:" in err
    assert not (config_dir() / "prices.csv").exists()


def test_cli_import_skypilot_needs_provider(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["catalog", "import-skypilot", str(AWS)], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert "--provider" in err


def test_cli_import_skypilot_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        ["catalog", "import-skypilot", str(tmp_path / "nope.csv"), "--provider", "aws"], monkeypatch, capsys
    )
    assert code == 2 and out == "" and "VMS_CSV: no such file" in err and err.count("\n") == 1
    not_vms = tmp_path / "vms.csv"
    not_vms.write_text("a,b\n1,2\n")
    code, out, err = run_cli(["catalog", "import-skypilot", str(not_vms), "--provider", "aws"], monkeypatch, capsys)
    assert code == 2 and "SkyPilot vms.csv" in err and err.count("\n") == 1


def test_cli_import_keeps_the_catalog_date_and_shipped_interruption_rates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "vms.csv"
    shutil.copy(AWS, copy)
    stamp = 1_760_000_000  # 2025-10-09 (UTC)
    os.utime(copy, (stamp, stamp))
    code, out, err = run_cli(
        ["catalog", "import-skypilot", str(copy), "--provider", "aws", "--json"], monkeypatch, capsys
    )
    assert code == 0, err
    offers = json.loads(out)["offers"]
    day = dt.date.fromtimestamp(stamp).isoformat()
    assert offers and all(o["as_of"] == day for o in offers)
    # g5.xlarge in us-east-1 is in the shipped snapshot with an (assumed) interruption rate: it is kept.
    g5 = next(o for o in offers if o["instance_type"] == "g5.xlarge" and o["region"] == "us-east-1")
    assert g5["interruptions_per_hour"] == 0.03
    assert g5["interruptions_source"] == "assumed (shipped snapshot 2025-06-15)"

    code, out, _ = run_cli(
        ["catalog", "import-skypilot", str(copy), "--provider", "aws", "--as-of", "2026-11-01", "--json"],
        monkeypatch,
        capsys,
    )
    assert code == 0 and {o["as_of"] for o in json.loads(out)["offers"]} == {"2026-11-01"}
    code, _, err = run_cli(
        ["catalog", "import-skypilot", str(copy), "--provider", "aws", "--as-of", "soon"], monkeypatch, capsys
    )
    assert code == 2 and "--as-of: an ISO date" in err


def test_cli_list_shows_date_and_source(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["catalog", "list", "--gpu", "GH200"], monkeypatch, capsys)
    assert code == 0
    header, _, row, *rest = out.splitlines()
    assert "As of" in header and "Source" in header and "Int. source" in header
    assert "gpu_1x_gh200" in row and "2026-04-11" in row and "Lambda Cloud on-demand price" in row
    assert rest[0].startswith("Prices as of 2026-04-11 (")


def test_a_negative_price_stops_with_one_line_naming_file_and_row(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prices.csv"
    path.write_text(
        ",".join(PRICE_COLUMNS) + "\nacme,eu,T4,1,t4,0.5,,,,2026-01-01,x,\nacme,eu,T4,2,t4x2,-0.5,,,,2026-01-01,x,\n"
    )
    code, out, err = run_cli(["catalog", "prices"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}, line 3, field 'on_demand_usd_per_gpu_hour': must be more than 0, got '-0.5'" in err
