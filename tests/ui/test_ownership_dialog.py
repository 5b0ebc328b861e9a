"""The Own hardware dialog (File > Own hardware price): the CLI's amortised price, then used as an own machine
in the Plan pane's comparison and as a host's price, both written off the GUI thread."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gpuplanner.launch import hosts as launch_hosts
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.ownership import HOST_OVERHEAD_W, HOURS_PER_YEAR
from gpuplanner.ui.main_window import MainWindow
from tests.ui.helpers import wait_for_result


@pytest.fixture
def window(qtbot: Any, services: Any) -> Any:
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    wait_for_result(qtbot, win.plan_pane)
    yield win
    if not win._closing_done:
        win.shutdown(stop_runs=True)
        win._closing_done = True


def cli_tco(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    from gpuplanner.cli import main

    capsys.readouterr()
    assert main(["catalog", "tco", *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fill(dialog: Any) -> None:
    dialog.gpu_combo.setCurrentText("RTX 4090")
    dialog.gpus_spin.setValue(2)
    dialog.purchase_spin.setValue(6500)
    dialog.lifetime_spin.setValue(3)
    dialog.electricity_spin.setValue(0.3)
    dialog.utilisation_spin.setValue(60)
    dialog.upkeep_spin.setValue(200)


FLAGS = (
    "--gpu",
    "RTX 4090",
    "--gpus",
    "2",
    "--purchase-usd",
    "6500",
    "--lifetime-years",
    "3",
    "--electricity-usd-per-kwh",
    "0.3",
    "--utilisation",
    "0.6",
    "--upkeep-usd-per-year",
    "200",
)


def test_the_dialog_gives_the_clis_amortised_price(
    qtbot: Any, window: MainWindow, services: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    window.own_hardware_action.trigger()
    dialog = window.own_hardware_dialog
    assert dialog.isVisible()
    fill(dialog)
    cli = cli_tco(capsys, *FLAGS)
    price = dialog.price
    assert price is not None
    for key in ("capital_usd_per_hour", "energy_usd_per_hour", "upkeep_usd_per_hour", "usd_per_gpu_hour"):
        assert getattr(price, key) == pytest.approx(cli[key], rel=1e-5), key
    # and by hand: purchase over the training hours, board power + host at the kWh price, upkeep
    tdp = services.catalog.gpu("RTX 4090").tdp_w
    training_hours = 3 * HOURS_PER_YEAR * 0.6
    per_machine = 6500 / training_hours + (2 * tdp + HOST_OVERHEAD_W) / 1000 * 0.3 + 200 * 3 / training_hours
    assert price.usd_per_gpu_hour == pytest.approx(per_machine / 2)
    text = dialog.result_label.text()
    assert f"${cli['usd_per_gpu_hour']:,.3f} per GPU-hour" in text
    assert f"Energy ${cli['energy_usd_per_hour']:,.3f}/h ({2 * tdp + HOST_OVERHEAD_W:,.0f} W, estimated" in text
    assert "Cheapest cloud on demand for RTX 4090" in text
    # a given power draw replaces the estimate
    dialog.power_spin.setValue(900)
    cli = cli_tco(capsys, *FLAGS, "--power-w", "900")
    assert dialog.price.energy_usd_per_hour == pytest.approx(cli["energy_usd_per_hour"])
    # bad input is named in the dialog's words and nothing can be applied
    dialog.residual_spin.setValue(7000)
    assert dialog.error_label.isVisible()
    assert dialog.error_label.text().startswith("Resale value: must be between 0 and the purchase price")
    assert not dialog.add_button.isEnabled() and not dialog.host_button.isEnabled()
    dialog.residual_spin.setValue(0)
    qtbot.waitUntil(lambda: not dialog.is_busy(), timeout=10_000)  # the hosts are read on the worker
    assert dialog.add_button.isEnabled() and dialog.host_button.isEnabled()


def test_the_price_joins_the_comparison_and_sets_a_host_off_the_gui_thread(
    qtbot: Any, window: MainWindow, services: Any, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    writers: list[str] = []
    real_set_price = launch_hosts.set_price

    def set_price(*args: Any, **kwargs: Any) -> Any:
        writers.append(threading.current_thread().name)
        return real_set_price(*args, **kwargs)

    monkeypatch.setattr(launch_hosts, "set_price", set_price)
    dialog = window.open_own_hardware()
    qtbot.waitUntil(lambda: not dialog.is_busy() and dialog.host_combo.count() > 0, timeout=10_000)
    fill(dialog)
    cli = cli_tco(capsys, *FLAGS)
    pane = window.plan_pane
    dialog.name_edit.setText("lab-box")
    with qtbot.waitSignal(dialog.machineSaved, timeout=10_000):
        dialog.add_button.click()
    qtbot.waitUntil(lambda: not pane.is_busy() and any(r.provider == "own" for r in pane.result.rows), timeout=20_000)
    own = [r for r in pane.result.rows if r.provider == "own"]
    assert {r.gpu for r in own} == {"RTX 4090"}
    assert own[0].plan.on_demand.instance_type == "lab-box"
    assert own[0].plan.on_demand.usd_per_gpu_hour == pytest.approx(cli["usd_per_gpu_hour"], abs=1e-6)
    # the file reads back to the same price (power estimated again from the catalog)
    offers = [o for o in load_catalog(services.config_dir).offers if o.own]
    assert [(o.instance_type, o.gpu_count) for o in offers] == [("lab-box", 2)]
    assert offers[0].on_demand_usd == pytest.approx(cli["usd_per_gpu_hour"], abs=1e-6)
    assert "lab-box" in dialog.message_label.text() and "own" in dialog.message_label.text()
    # the same name again is refused, naming the file; the file keeps one machine
    dialog.add_button.click()
    qtbot.waitUntil(lambda: not dialog.is_busy(), timeout=10_000)
    assert "Cannot add the machine" in dialog.message_label.text() and "machines.toml" in dialog.message_label.text()
    assert len([o for o in load_catalog(services.config_dir).offers if o.own]) == 1
    # a host's price
    dialog.host_combo.setCurrentText(launch_hosts.LOCAL_HOST_NAME)
    with qtbot.waitSignal(dialog.hostPriceSet, timeout=10_000) as got:
        dialog.host_button.click()
    assert got.args[0] == launch_hosts.LOCAL_HOST_NAME
    stored = launch_hosts.get_host(services.db_path, launch_hosts.LOCAL_HOST_NAME).price_usd_per_gpu_hour
    assert stored == pytest.approx(cli["usd_per_gpu_hour"], abs=1e-4)
    assert writers and threading.main_thread().name not in writers
