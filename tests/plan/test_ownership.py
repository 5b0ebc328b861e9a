"""Own hardware: the amortised price per GPU-hour (function, machines.toml and `gpuplanner catalog tco`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import CatalogError, load_catalog
from gpuplanner.plan.ownership import HOURS_PER_YEAR, OwnHardware, amortised_price, estimated_power_w
from gpuplanner.plan.setup import PlanInputError

# 4 x RTX 4090 bought for $12,000, used half the time for 3 years, 2,050 W at $0.30/kWh, 100 W idle.
BOX = OwnHardware(
    purchase_usd=12_000,
    lifetime_years=3,
    power_w=2050,
    electricity_usd_per_kwh=0.30,
    utilisation=0.5,
    gpus=4,
    idle_power_w=100,
)


def run_cli(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_amortised_price_by_hand() -> None:
    price = amortised_price(BOX)
    training_hours = 3 * 365.25 * 24 * 0.5
    assert price.training_hours == pytest.approx(training_hours) == pytest.approx(13_149)
    assert price.capital_usd_per_hour == pytest.approx(12_000 / 13_149)
    assert price.energy_usd_per_hour == pytest.approx(2.05 * 0.30)
    # Idle draw over the idle half of the hours, charged to the training half: 0.1 kW x $0.30 x 1.
    assert price.idle_energy_usd_per_hour == pytest.approx(0.03)
    assert price.usd_per_machine_hour == pytest.approx(0.91261 + 0.615 + 0.03, abs=1e-4)
    assert price.usd_per_gpu_hour == pytest.approx(price.usd_per_machine_hour / 4)
    assert price.usd_per_gpu_hour == pytest.approx(0.3894, abs=1e-4)


def test_upkeep_resale_and_full_use() -> None:
    full = amortised_price(
        OwnHardware(10_000, 2, 1000, 0.2, 1.0, gpus=2, upkeep_usd_per_year=876.6, residual_usd=1234.56)
    )
    hours = 2 * HOURS_PER_YEAR
    assert full.idle_energy_usd_per_hour == 0
    assert full.capital_usd_per_hour == pytest.approx((10_000 - 1234.56) / hours)
    assert full.upkeep_usd_per_hour == pytest.approx(876.6 * 2 / hours) == pytest.approx(0.1)
    # Less use, dearer hours: halving utilisation doubles the capital share.
    half = amortised_price(OwnHardware(10_000, 2, 1000, 0.2, 0.5, gpus=2))
    assert half.capital_usd_per_hour == pytest.approx(2 * 10_000 / hours)
    assert estimated_power_w(4, 450) == 2050


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"utilisation": 0.0}, "utilisation"),
        ({"utilisation": 1.5}, "utilisation"),
        ({"lifetime_years": 0}, "lifetime-years"),
        ({"purchase_usd": -1}, "purchase-usd"),
        ({"electricity_usd_per_kwh": float("nan")}, "electricity-usd-per-kwh"),
        ({"residual_usd": 20_000}, "residual-usd"),
        ({"gpus": 0}, "gpus"),
    ],
)
def test_bad_inputs_name_the_field(changes: dict[str, float], field: str) -> None:
    values = {**BOX.__dict__, **changes}
    with pytest.raises(PlanInputError) as info:
        OwnHardware(**values)
    assert info.value.field == field


def test_machines_toml_takes_the_inputs_of_an_amortised_price() -> None:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machines.toml").write_text(
        '[[machine]]\nname = "lab-box"\ngpu = "RTX 4090"\ngpu_count = 4\npurchase_usd = 12000\n'
        "lifetime_years = 3\nelectricity_usd_per_kwh = 0.30\nutilisation = 0.5\nidle_power_w = 100\n",
        encoding="utf-8",
    )
    offer = next(o for o in load_catalog().offers if o.own)
    # No power_w: the catalog's board power (4 x 450 W) plus 250 W for the host, as in BOX.
    assert offer.on_demand_usd == pytest.approx(amortised_price(BOX).usd_per_gpu_hour)
    assert offer.gpu_count == 4 and offer.instance_type == "lab-box"
    assert offer.source.startswith("own hardware: $12,000 over 3 years at 50% use, 2,050 W at $0.3/kWh")

    (folder / "machines.toml").write_text(
        '[[machine]]\nname = "lab-box"\ngpu = "RTX 4090"\ngpu_count = 4\npurchase_usd = 12000\n'
        "lifetime_years = 3\nelectricity_usd_per_kwh = 0.30\nutilisation = 2\n",
        encoding="utf-8",
    )
    with pytest.raises(CatalogError) as info:
        load_catalog()
    assert info.value.field == "utilisation" and info.value.line == 8 and "machines.toml" in str(info.value)


def test_cli_tco_json_and_save(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "catalog", "tco", "--gpu", "rtx4090", "--gpus", "4", "--purchase-usd", "12000", "--lifetime-years", "3",
        "--electricity-usd-per-kwh", "0.30", "--utilisation", "0.5", "--idle-power-w", "100",
    ]  # fmt: skip
    code, out, err = run_cli([*argv, "--json"], monkeypatch, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["usd_per_gpu_hour"] == pytest.approx(0.389403, abs=1e-5) and doc["power_estimated"] is True
    assert doc["inputs"]["power_w"] == 2050 and doc["gpu"] == "RTX 4090"
    assert doc["cheapest_cloud_on_demand"]["provider"] == "runpod" and doc["saved_to"] is None

    code, out, _ = run_cli([*argv, "--save", "lab-box"], monkeypatch, capsys)
    assert code == 0
    assert "total           $1.558 per machine-hour = $0.389 per GPU-hour" in out
    assert "estimated: 4 x 450 W board power + 250 W host" in out and "saved as machine 'lab-box'" in out
    saved = Path(config_dir() / "machines.toml").read_text()
    assert "power_w" not in saved.replace("idle_power_w", "")  # estimated again when read
    own = [o for o in load_catalog().offers if o.own]
    assert [(o.instance_type, round(o.on_demand_usd, 4)) for o in own] == [("lab-box", 0.3894)]

    # The saved machine is a plan option beside cloud offers.
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.plan",))
    code = cli.main(["plan", "--model", "gpt2", "--samples", "1000", "--gpu", "RTX 4090", "--gpus", "4", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["on_demand"]["provider"] == "own" and plan["on_demand"]["instance_type"] == "lab-box"

    code, _, err = run_cli([*argv, "--save", "lab-box"], monkeypatch, capsys)
    assert code == 2 and "--save: a machine named 'lab-box' is already in" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--utilisation", "0"], "--utilisation: must be a share above 0"),
        (["--gpu", "Z9"], "--gpu: unknown GPU 'Z9'"),
        (["--residual-usd", "99999"], "--residual-usd: must be between 0 and the purchase price"),
    ],
)
def test_cli_tco_bad_input_one_line(
    extra: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "catalog", "tco", "--gpu", "T4", "--purchase-usd", "3000", "--lifetime-years", "4",
        "--electricity-usd-per-kwh", "0.2", "--utilisation", "0.4", *extra,
    ]  # fmt: skip
    code, out, err = run_cli(argv, monkeypatch, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
