"""The GPU and price catalog: shipped data sanity, lookups, user overrides, own machines, CLI."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import tomllib
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import (
    PRICE_COLUMNS,
    Catalog,
    CatalogError,
    PriceOffer,
    builtin_catalog,
    load_catalog,
    normalize_name,
    parse_prices,
)
from gpuplanner.plan.setup import PRECISIONS, PlanInputError
from gpuplanner.resources import resource_path

REQUIRED_GPUS = (
    "H200",
    "H100 SXM",
    "H100 PCIe",
    "A100 80GB",
    "A100 40GB",
    "L40S",
    "L4",
    "A10G",
    "A10",
    "T4",
    "V100 16GB",
    "V100 32GB",
    "RTX 4090",
    "RTX 3090",
    "RTX A6000",
)
# GPUs users rent today, added with issue 15 (B200 and GH200 have shipped prices; the rest come from
# `gpuplanner catalog update` or the user's prices.csv).
CURRENT_GPUS = ("B200", "H200 NVL", "GH200", "MI300X", "RTX 5090", "RTX 6000 Ada", "L40")
REQUIRED_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod")
HEADER = ",".join(PRICE_COLUMNS) + "\n"


@pytest.fixture
def user_dir() -> Path:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_cli(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    # Only the catalog command: the other command modules are built and tested on their own.
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------- GPUs


def test_every_required_gpu_is_present() -> None:
    names = {g.name for g in builtin_catalog().gpus}
    assert set(REQUIRED_GPUS) <= names


def test_shipped_names_and_aliases_are_unique() -> None:
    raw = tomllib.loads(resource_path("catalog", "gpus.toml").read_text())["gpu"]
    owner: dict[str, str] = {}
    for table in raw:
        for key in {normalize_name(n) for n in [table["name"], *table["aliases"]]}:
            assert key not in owner, f"{key!r} claimed by {owner.get(key)} and {table['name']}"
            owner[key] = table["name"]


@pytest.mark.parametrize("name", REQUIRED_GPUS + ("A100 80GB PCIe", "A100 40GB PCIe") + CURRENT_GPUS)
def test_specs_are_consistent(name: str) -> None:
    g = builtin_catalog().gpu(name)
    # NVIDIA's HBM/GDDR sizes are binary-ish: the usable GiB sit just under the marketing number.
    assert 0.9 * g.marketing_memory_gb < g.memory_gib <= g.marketing_memory_gb
    t = g.tflops
    assert t["fp32"] > 0
    assert t["fp16"] >= t["fp32"]
    assert ("bf16" in t) == g.bf16
    if g.bf16:
        assert t["bf16"] >= t["fp32"]
        assert t["bf16"] == pytest.approx(t["fp16"])
    if "tf32" in t:
        assert t["fp32"] <= t["tf32"] <= t["fp16"]
    if "fp8" in t:
        assert t["fp8"] == pytest.approx(2 * t["bf16"], rel=0.01)
    assert g.bandwidth_gbs > 0
    assert g.interconnect in ("nvlink", "pcie", "infinity-fabric")
    if g.interconnect == "pcie":
        assert g.interconnect_gbs == {3: 12, 4: 25, 5: 50}[g.pcie_gen]
    else:
        assert g.interconnect_gbs >= 150
    assert 0.2 <= g.default_mfu <= 0.45
    assert g.tdp_w > 0
    assert re.fullmatch(r"\d+\.\d", g.compute_capability)
    assert g.source and g.architecture


def test_known_datasheet_figures() -> None:
    c = builtin_catalog()
    a100 = c.gpu("A100 80GB")
    assert (a100.tflops["fp32"], a100.tflops["tf32"], a100.tflops["bf16"]) == (19.5, 156.0, 312.0)
    assert "fp8" not in a100.tflops
    assert c.gpu("H100 SXM").tflops["bf16"] == pytest.approx(989.5)
    assert c.gpu("H100 SXM").memory_gib == pytest.approx(79.1)
    for name in ("T4", "V100 16GB", "V100 32GB"):
        spec = c.gpu(name)
        assert not spec.bf16 and "bf16" not in spec.tflops and "tf32" not in spec.tflops
    assert c.gpu("H200").memory_gib > 2 * c.gpu("A100 80GB").memory_gib * 0.85


def test_current_gpus_datasheet_figures_and_names() -> None:
    c = builtin_catalog()
    b200 = c.gpu("NVIDIA B200")
    assert (b200.name, b200.tflops["bf16"], b200.bandwidth_gbs, b200.interconnect_gbs) == ("B200", 2250.0, 8000, 900)
    assert c.gpu("H200-NVL").name == "H200 NVL" and c.gpu("H200").name == "H200"
    assert c.gpu("NVIDIA GH200 480GB").memory_gib == pytest.approx(95.0)
    mi300x = c.gpu("AMD Instinct MI300X")
    assert (mi300x.memory_gib, mi300x.tflops["bf16"], mi300x.interconnect) == (191.5, 1307.4, "infinity-fabric")
    assert c.gpu("NVIDIA GeForce RTX 5090").tflops["bf16"] == 209.5
    assert c.gpu("RTX6000-Ada").name == "RTX 6000 Ada" and c.gpu("L40").name == "L40" and c.gpu("L40S").name == "L40S"
    # SkyPilot's accelerator names resolve (catalog update imports them).
    for sky, ours in (("B200", "B200"), ("GH200", "GH200"), ("MI300X", "MI300X"), ("RTX6000-Ada", "RTX 6000 Ada")):
        assert c.gpu(sky).name == ours
    # Every added GPU's source is cited; B200 and GH200 ship with a dated, sourced price.
    assert all(c.gpu(name).source for name in CURRENT_GPUS)
    for name in ("B200", "GH200"):
        offers = c.offers_for(name)
        assert offers and all(o.source and o.as_of >= "2026-01-01" for o in offers)


def test_peak_tflops_by_planner_precision() -> None:
    c = builtin_catalog()
    h100 = c.gpu("h100")
    assert h100.peak_tflops("fp32") == 67.0
    assert h100.peak_tflops("tf32") == pytest.approx(494.7)
    assert h100.peak_tflops("bf16-mixed") == h100.peak_tflops("bf16") == pytest.approx(989.5)
    assert h100.peak_tflops("fp16-mixed") == pytest.approx(989.5)
    assert h100.peak_tflops("fp8") == pytest.approx(1979.0)
    for precision in PRECISIONS:
        assert c.gpu("A100 40GB").peak_tflops(precision) > 0
    t4 = c.gpu("T4")
    assert t4.peak_tflops("fp16-mixed") == 65.0
    for precision in ("bf16", "bf16-mixed"):
        with pytest.raises(PlanInputError) as info:
            t4.peak_tflops(precision)
        assert info.value.field == "precision" and "T4" in str(info.value)
    with pytest.raises(PlanInputError, match="fp8"):
        c.gpu("A100 80GB").peak_tflops("fp8")
    with pytest.raises(PlanInputError, match="int4"):
        h100.peak_tflops("int4")


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("H100-80GB-HBM3", "H100 SXM"),
        ("h100", "H100 SXM"),
        ("h100_sxm", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("A100-80GB", "A100 80GB"),
        ("a100 80gb", "A100 80GB"),
        ("A100", "A100 40GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 16GB"),
        ("V100", "V100 16GB"),
        ("V100-32GB", "V100 32GB"),
        ("Tesla V100-SXM2-32GB", "V100 32GB"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("GeForce RTX 3090", "RTX 3090"),
        ("RTX4090", "RTX 4090"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("A6000", "RTX A6000"),
    ],
)
def test_alias_lookup(alias: str, expected: str) -> None:
    assert builtin_catalog().gpu(alias).name == expected


def test_unknown_gpu_names_the_known_ones() -> None:
    with pytest.raises(PlanInputError) as info:
        builtin_catalog().gpu("B300 Ultra")
    assert info.value.field == "gpu"
    assert str(info.value).startswith("--gpu: unknown GPU 'B300 Ultra'; known: H200, H100 SXM")
    assert builtin_catalog().find_gpu("B300 Ultra") is None


def test_specs_and_catalog_are_hashable_values() -> None:
    c = builtin_catalog()
    assert len({c.gpu("h100"), c.gpu("H100 SXM")}) == 1
    hash(c)
    with pytest.raises(AttributeError):
        c.gpu("t4").memory_gib = 99  # type: ignore[misc]


# -------------------------------------------------------------------------------------- prices


def shipped_rows() -> list[dict[str, str]]:
    with resource_path("catalog", "prices.csv").open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == PRICE_COLUMNS
        return list(reader)


def test_every_shipped_price_row_is_valid() -> None:
    canonical = {g.name for g in builtin_catalog().gpus}
    notice = {"aws": "120", "gcp": "30", "azure": "30", "runpod": "5"}
    keys = set()
    for number, row in enumerate(shipped_rows(), start=2):
        where = f"prices.csv line {number}"
        assert row["gpu"] in canonical, where
        assert int(row["gpu_count"]) >= 1, where
        on_demand = float(row["on_demand_usd_per_gpu_hour"])
        assert 0.05 < on_demand < 20, where
        if row["spot_usd_per_gpu_hour"]:
            assert 0 < float(row["spot_usd_per_gpu_hour"]) < on_demand, where
            assert row["preemption_notice_s"] == notice[row["provider"]], where
            assert 0 < float(row["interruptions_per_hour"]) < 1, where
        else:
            assert not row["interruptions_per_hour"], where
        assert dt.date.fromisoformat(row["as_of"]) <= dt.date.today(), where
        assert row["source"], where
        key = (row["provider"], row["region"], row["gpu"], row["instance_type"])
        assert key not in keys, f"duplicate offer {key}"
        keys.add(key)
    assert len(parse_prices(resource_path("catalog", "prices.csv"), builtin_catalog())) == len(keys)


def test_every_provider_and_every_gpu_has_offers() -> None:
    c = builtin_catalog()
    assert set(REQUIRED_PROVIDERS) <= set(c.providers())
    for name in REQUIRED_GPUS:
        assert c.offers_for(name), name
    for provider in REQUIRED_PROVIDERS:
        gpus = {o.gpu for o in c.offers if o.provider == provider}
        assert len(gpus) >= 3, provider
    assert not [o for o in c.offers if o.provider == "lambda" and o.spot_usd is not None]


def test_best_offer() -> None:
    c = builtin_catalog()
    offers = c.offers_for("NVIDIA H100 80GB HBM3")
    best = c.best_offer("h100", spot=False)
    assert best is not None and best.on_demand_usd == min(o.on_demand_usd for o in offers)
    best_spot = c.best_offer("h100", spot=True)
    assert best_spot is not None
    assert best_spot.spot_usd == min(o.spot_usd for o in offers if o.spot_usd is not None)
    eight = c.best_offer("h100", spot=False, gpus=8)
    assert eight is not None and eight.gpu_count >= 8
    assert c.best_offer("A100 40GB PCIe", spot=True) is None  # Lambda only: no spot
    with pytest.raises(PlanInputError):
        c.offers_for("nope")


# ------------------------------------------------------------------------------ user overrides


def test_without_user_files_the_catalog_is_the_shipped_one() -> None:
    assert load_catalog() == builtin_catalog()


def test_user_prices_replace_and_add(user_dir: Path) -> None:
    (user_dir / "prices.csv").write_text(
        HEADER
        + "AWS,us-east-1,h100,8,p5.48xlarge,5.00,2.00,0.2,120,2025-07-01,my negotiated rate\n"
        + "acme,eu-1,NVIDIA A10G,2,acme.a10g.2,0.50,,,,2025-07-01,acme quote\n",
        encoding="utf-8",
    )
    c = load_catalog()
    assert len(c.offers) == len(builtin_catalog().offers) + 1
    p5 = [o for o in c.offers if o.instance_type == "p5.48xlarge"]
    assert len(p5) == 1 and p5[0].on_demand_usd == 5.0 and p5[0].source == "my negotiated rate"
    acme = c.best_offer("A10G", spot=False)
    assert acme is not None and acme.provider == "acme" and acme.gpu == "A10G" and acme.spot_usd is None


def test_user_prices_with_reordered_and_optional_columns(user_dir: Path) -> None:
    (user_dir / "prices.csv").write_text(
        "gpu,provider,region,instance_type,gpu_count,as_of,on_demand_usd_per_gpu_hour\n"
        "L4,colo,home,rack-1,4,2025-07-01,0.10\n",
        encoding="utf-8",
    )
    best = load_catalog().best_offer("l4", spot=False)
    assert best is not None and (best.provider, best.on_demand_usd, best.spot_usd) == ("colo", 0.10, None)


def test_user_gpus_override_fields_and_add_gpus(user_dir: Path) -> None:
    (user_dir / "gpus.toml").write_text(
        """
[[gpu]]
name = "NVIDIA H100 80GB HBM3"   # an alias finds the shipped entry
default_mfu = 0.5
aliases = ["my-h100"]

[[gpu]]
name = "RTX 5090 Lab"
aliases = ["NVIDIA GeForce RTX 5090 Lab"]
memory_gib = 31.4
marketing_memory_gb = 32
tflops_fp32 = 104.8
tflops_bf16 = 209.5
tflops_fp16 = 209.5
bandwidth_gbs = 1792
interconnect = "pcie"
interconnect_gbs = 50
pcie_gen = 5
bf16 = true
default_mfu = 0.3
""",
        encoding="utf-8",
    )
    c = load_catalog()
    h100 = c.gpu("my-h100")
    assert h100.name == "H100 SXM" and h100.default_mfu == 0.5 and h100.memory_gib == pytest.approx(79.1)
    assert c.gpu("NVIDIA GeForce RTX 5090 Lab").peak_tflops("bf16-mixed") == 209.5
    assert len(c.gpus) == len(builtin_catalog().gpus) + 1
    assert c.offers == builtin_catalog().offers


def test_own_machines(user_dir: Path) -> None:
    (user_dir / "machines.toml").write_text(
        """
[[machine]]
name = "workstation"
gpu = "NVIDIA GeForce RTX 4090"
gpu_count = 2
usd_per_gpu_hour = 0.12

[[machine]]
name = "lab-box"
gpu = "a100-80gb"
gpu_count = 8
usd_per_gpu_hour = 0.9
""",
        encoding="utf-8",
    )
    c = load_catalog()
    own = [o for o in c.offers if o.own]
    assert {(o.instance_type, o.gpu, o.gpu_count) for o in own} == {
        ("workstation", "RTX 4090", 2),
        ("lab-box", "A100 80GB", 8),
    }
    assert all(o.provider == "own" and o.spot_usd is None and o.notice_s is None for o in own)
    best = c.best_offer("RTX 4090", spot=False)
    assert best is not None and best.own and best.on_demand_usd == 0.12
    spot = c.best_offer("RTX 4090", spot=True)
    assert spot is not None and not spot.own


@pytest.mark.parametrize(
    ("filename", "text", "line", "field"),
    [
        (
            "prices.csv",
            HEADER + "aws,us-east-1,H100,8,p5,6.88,,,120,2025-06-15,x\naws,us-east-1,H100,8,p5x,lots,,,,2025-06-15,x\n",
            3,
            "on_demand_usd_per_gpu_hour",
        ),
        ("prices.csv", HEADER + "aws,us-east-1,Z9000,8,p5,6.88,,,,2025-06-15,x\n", 2, "gpu"),
        ("prices.csv", HEADER + "aws,us-east-1,T4,one,g4,0.5,,,,2025-06-15,x\n", 2, "gpu_count"),
        ("prices.csv", HEADER + "aws,us-east-1,T4,1,g4,0.5,-1,,,2025-06-15,x\n", 2, "spot_usd_per_gpu_hour"),
        ("prices.csv", HEADER + "aws,us-east-1,T4,1,g4,0.5,,,,15/06/2025,x\n", 2, "as_of"),
        ("prices.csv", HEADER + "aws,us-east-1,T4,1,g4,0.5,,,,2025-06-15,x,assumed,extra\n", 2, None),
        ("prices.csv", "provider,region,gpu\naws,x,T4\n", 1, "gpu_count"),
        ("prices.csv", HEADER + 'aws,us-east-1,T4,1,"g4\n', 2, None),
        ("gpus.toml", '[[gpu]]\nname = "H100"\ndefault_mfu = "high"\n', 3, "default_mfu"),
        ("gpus.toml", '[[gpu]]\nname = "X1"\nmemory_gib = 10\n', 1, "bandwidth_gbs"),
        ("gpus.toml", '[[gpu]]\nname = "H100"\nspeed = 3\n', 3, "speed"),
        ("gpus.toml", '[[gpu]]\nname = "H100"\n\ndefault_mfu = = 0.4\n', 4, None),
        (
            "machines.toml",
            '[[machine]]\nname = "a"\ngpu = "T4"\ngpu_count = 1\nusd_per_gpu_hour = 1\n\n[[machine]]\nname = "b"\ngpu = "T4"\ngpu_count = 0\nusd_per_gpu_hour = 1\n',
            10,
            "gpu_count",
        ),
        ("machines.toml", '[[machine]]\nname = "a"\ngpu = "T9"\ngpu_count = 1\nusd_per_gpu_hour = 1\n', 3, "gpu"),
        ("machines.toml", '[[machine]]\nname = "a"\ngpu = "T4"\ngpu_count = 1\n', 1, "usd_per_gpu_hour"),
        ("machines.toml", 'machine = "oops"\n', None, "machine"),
    ],
)
def test_malformed_user_files_name_file_line_and_field(
    user_dir: Path, filename: str, text: str, line: int | None, field: str | None
) -> None:
    path = user_dir / filename
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        load_catalog()
    error = info.value
    assert error.path == path and str(path) in str(error)
    assert error.line == line
    assert error.field == field
    if line is not None:
        assert f"line {line}" in str(error)
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_user_file_that_is_not_utf8(user_dir: Path) -> None:
    (user_dir / "prices.csv").write_bytes(HEADER.encode() + b"aws,\xff\xfe,T4,1,g4,0.5,,,,2025-06-15,x\n")
    with pytest.raises(CatalogError, match="UTF-8"):
        load_catalog()


def test_load_is_cached_until_a_user_file_changes(user_dir: Path) -> None:
    first = load_catalog()
    assert load_catalog() is first
    (user_dir / "machines.toml").write_text('[[machine]]\nname="m"\ngpu="T4"\ngpu_count=1\nusd_per_gpu_hour=0.01\n')
    second = load_catalog()
    assert second is not first and any(o.own for o in second.offers)
    assert load_catalog() is second
    assert load_catalog(user_dir) is second


def test_explicit_config_dir(tmp_path: Path) -> None:
    (tmp_path / "prices.csv").write_text(HEADER + "own,desk,T4,1,desk,0.02,,,,2025-06-15,mine\n")
    best = load_catalog(tmp_path).best_offer("T4", spot=False)
    assert best is not None and best.own and best.provider == "own"
    assert not any(o.own for o in load_catalog().offers)


def test_price_offer_is_frozen() -> None:
    offer = builtin_catalog().offers[0]
    assert isinstance(offer, PriceOffer) and isinstance(builtin_catalog(), Catalog)
    with pytest.raises(AttributeError):
        offer.on_demand_usd = 0  # type: ignore[misc]


# ------------------------------------------------------------------------------------------ CLI


def test_cli_gpus_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["catalog", "gpus", "--json"], monkeypatch, capsys)
    assert code == 0 and err == ""
    gpus = json.loads(out)
    by_name = {g["name"]: g for g in gpus}
    assert set(REQUIRED_GPUS) <= set(by_name)
    assert by_name["A100 80GB"]["tflops"] == {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
    assert by_name["T4"]["bf16"] is False


def test_cli_gpus_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["catalog", "gpus"], monkeypatch, capsys)
    assert code == 0 and "H100 SXM" in out and "RTX A6000" in out


def test_cli_prices(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["catalog", "prices", "--gpu", "NVIDIA H100 80GB HBM3", "--json"], monkeypatch, capsys)
    assert code == 0
    rows = json.loads(out)
    assert rows and {r["gpu"] for r in rows} == {"H100 SXM"}
    assert {"aws", "gcp", "azure", "lambda", "runpod"} <= {r["provider"] for r in rows}
    assert [r["on_demand_usd_per_gpu_hour"] for r in rows] == sorted(r["on_demand_usd_per_gpu_hour"] for r in rows)

    code, out, _ = run_cli(["catalog", "prices", "--csv"], monkeypatch, capsys)
    assert code == 0 and out.startswith(HEADER)
    tmp = config_dir()
    assert len(parse_prices(tmp / "x.csv", builtin_catalog(), text=out)) == len(builtin_catalog().offers)

    code, out, _ = run_cli(["catalog", "prices", "--gpu", "t4"], monkeypatch, capsys)
    assert code == 0 and "g4dn.xlarge" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["catalog", "prices", "--gpu", "Z9"], "--gpu: unknown GPU 'Z9'"),
        (["catalog", "prices", "--json", "--csv"], "--json, --csv"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(argv, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_cli_malformed_user_file_exits_2(
    user_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (user_dir / "prices.csv").write_text(HEADER + "aws,us-east-1,T4,1,g4,free,,,,2025-06-15,x\n")
    code, out, err = run_cli(["catalog", "gpus"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "prices.csv, line 2, field 'on_demand_usd_per_gpu_hour'" in err
