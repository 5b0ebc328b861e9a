"""The "Own hardware" dialog: what an hour of training on a machine you own costs, on the same axis as a
cloud price (total cost of ownership), and two ways to use it.

The figures come from :func:`gpuplanner.plan.ownership.amortised_price`, the model behind
``gpuplanner catalog tco``: purchase price less resale over the training hours of the machine's lifetime,
plus electricity while training (power draw x price of a kWh), idle electricity and upkeep. They update as
you type. Then:

- **Add to the comparison** writes the machine to ``machines.toml`` in the settings folder (as
  ``catalog tco --save`` does), so the Plan pane ranks it beside the cloud offers as provider ``own``;
- **Set as host price** stores the price per GPU-hour on one of your hosts (runs' spend uses it).

Both writes run on the dialog's own worker thread, never on the GUI thread.

Signals:
    machineSaved(str): a machine was added to machines.toml (its name): the catalog changed.
    hostPriceSet(str, float): a host's price per GPU-hour was set (host name, price).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.export.human import human_gpus
from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.ownership import HOST_OVERHEAD_W, AmortisedPrice, OwnHardware, amortised_price, estimated_power_w
from gpuplanner.plan.price_dates import describe_age
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.human import human_money
from gpuplanner.ui.palette import BAD
from gpuplanner.ui.services import AppServices

# The model's field names (PlanInputError.field) and the dialog's words for them.
LABELS = {
    "purchase-usd": "Purchase price",
    "lifetime-years": "Lifetime",
    "power-w": "Power draw",
    "electricity-usd-per-kwh": "Electricity",
    "utilisation": "Utilisation",
    "gpus": "GPUs in the machine",
    "idle-power-w": "Idle power",
    "upkeep-usd-per-year": "Upkeep",
    "residual-usd": "Resale value",
}


def _spin(maximum: float, decimals: int, value: float, prefix: str = "", suffix: str = "") -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setRange(0.0, maximum)
    spin.setDecimals(decimals)
    spin.setValue(value)
    spin.setPrefix(prefix)
    spin.setSuffix(suffix)
    spin.setGroupSeparatorShown(True)
    spin.setKeyboardTracking(True)
    return spin


class OwnHardwareDialog(QDialog):
    machineSaved = Signal(str)
    hostPriceSet = Signal(str, float)

    def __init__(self, services: AppServices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Own hardware: price per GPU-hour")
        self.services = services
        self.catalog: Catalog = services.catalog
        self.price: AmortisedPrice | None = None
        self.power_estimated = True
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_job_done)
        self._signals.failed.connect(self._on_job_failed)
        self._busy = 0
        self._build()
        self.recompute()
        self._submit("hosts", self._read_hosts)

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        intro = QLabel(
            "What an hour of training on a machine you own costs: the purchase price (less resale) over the "
            "hours it trains in its lifetime, plus the electricity it draws, idle power and upkeep."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.gpu_combo = QComboBox()
        self.gpu_combo.addItems([g.name for g in self.catalog.gpus])
        self.gpu_combo.setCurrentText("RTX 4090" if self.catalog.find_gpu("RTX 4090") else self.gpu_combo.itemText(0))
        self.gpu_combo.setToolTip("The GPU model of the machine")
        self.gpus_spin = QSpinBox()
        self.gpus_spin.setRange(1, 64)
        self.gpus_spin.setValue(1)
        self.purchase_spin = _spin(10_000_000, 0, 3000, prefix="$ ")
        self.purchase_spin.setToolTip("What the whole machine cost")
        self.lifetime_spin = _spin(30, 1, 4, suffix=" years")
        self.lifetime_spin.setMinimum(0.1)
        self.lifetime_spin.setToolTip("Years until you replace it")
        self.power_spin = _spin(100_000, 0, 0, suffix=" W")
        self.power_spin.setSpecialValueText("estimate")
        self.power_spin.setToolTip(
            f"Average draw while training; 'estimate' (0): the GPUs' board power + {HOST_OVERHEAD_W:,.0f} W for the host"
        )
        self.electricity_spin = _spin(10, 3, 0.15, prefix="$ ", suffix=" per kWh")
        self.utilisation_spin = QSpinBox()
        self.utilisation_spin.setRange(1, 100)
        self.utilisation_spin.setValue(50)
        self.utilisation_spin.setSuffix(" %")
        self.utilisation_spin.setToolTip("Share of the lifetime's hours the machine spends training")
        self.idle_spin = _spin(100_000, 0, 0, suffix=" W")
        self.idle_spin.setToolTip("Draw while not training (0: switched off)")
        self.upkeep_spin = _spin(1_000_000, 0, 0, prefix="$ ", suffix=" a year")
        self.upkeep_spin.setToolTip("Hosting, support, repairs")
        self.residual_spin = _spin(10_000_000, 0, 0, prefix="$ ")
        self.residual_spin.setToolTip("What it sells for at the end of its lifetime")
        rows = (
            ("GPU:", self.gpu_combo),
            ("GPUs in the machine:", self.gpus_spin),
            ("Purchase price:", self.purchase_spin),
            ("Lifetime:", self.lifetime_spin),
            ("Power draw:", self.power_spin),
            ("Electricity:", self.electricity_spin),
            ("Utilisation:", self.utilisation_spin),
            ("Idle power:", self.idle_spin),
            ("Upkeep:", self.upkeep_spin),
            ("Resale value:", self.residual_spin),
        )
        for label, widget in rows:
            form.addRow(label, widget)
        layout.addLayout(form)
        self.gpu_combo.currentIndexChanged.connect(self.recompute)
        for widget in (self.gpus_spin, self.utilisation_spin):
            widget.valueChanged.connect(self.recompute)
        for spin in (
            self.purchase_spin,
            self.lifetime_spin,
            self.power_spin,
            self.electricity_spin,
            self.idle_spin,
            self.upkeep_spin,
            self.residual_spin,
        ):
            spin.valueChanged.connect(self.recompute)

        self.result_label = QLabel()
        self.result_label.setObjectName("tco-result")
        self.result_label.setWordWrap(True)
        self.result_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.result_label)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(f"color: {BAD};")
        self.error_label.hide()
        layout.addWidget(self.error_label)

        use = QGroupBox("Use this price")
        uv = QVBoxLayout(use)
        machine_row = QHBoxLayout()
        self.name_edit = QLineEdit("workstation")
        self.name_edit.setToolTip("The machine's name in the comparison (provider 'own')")
        self.add_button = QPushButton("Add to the comparison")
        self.add_button.setToolTip("Save it in machines.toml: the Plan pane ranks it beside the cloud offers")
        self.add_button.clicked.connect(self._on_add_clicked)
        machine_row.addWidget(QLabel("Machine name:"))
        machine_row.addWidget(self.name_edit, 1)
        machine_row.addWidget(self.add_button)
        uv.addLayout(machine_row)
        host_row = QHBoxLayout()
        self.host_combo = QComboBox()
        self.host_combo.setToolTip("The host whose price per GPU-hour to set (runs' spend uses it)")
        self.host_button = QPushButton("Set as host price")
        self.host_button.clicked.connect(self._on_host_clicked)
        self.host_button.setEnabled(False)
        host_row.addWidget(QLabel("Host:"))
        host_row.addWidget(self.host_combo, 1)
        host_row.addWidget(self.host_button)
        uv.addLayout(host_row)
        self.message_label = QLabel()
        self.message_label.setWordWrap(True)
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        uv.addWidget(self.message_label)
        layout.addWidget(use)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(620, self.sizeHint().height())

    # ------------------------------------------------------------------ the price

    def inputs(self) -> tuple[OwnHardware, bool]:
        """The model's inputs from the fields, and whether the power draw is the estimate."""
        spec = self.catalog.gpu(self.gpu_combo.currentText())
        gpus = self.gpus_spin.value()
        estimated = self.power_spin.value() == 0
        power = estimated_power_w(gpus, spec.tdp_w) if estimated else self.power_spin.value()
        hardware = OwnHardware(
            purchase_usd=self.purchase_spin.value(),
            lifetime_years=self.lifetime_spin.value(),
            power_w=power,
            electricity_usd_per_kwh=self.electricity_spin.value(),
            utilisation=self.utilisation_spin.value() / 100.0,
            gpus=gpus,
            idle_power_w=self.idle_spin.value(),
            upkeep_usd_per_year=self.upkeep_spin.value(),
            residual_usd=self.residual_spin.value(),
        )
        return hardware, estimated

    @Slot()
    def recompute(self) -> None:
        try:
            hardware, estimated = self.inputs()
            price = amortised_price(hardware)
        except PlanInputError as exc:
            self.price = None
            self.error_label.setText(f"{LABELS.get(exc.field, exc.field)}: {exc.message}.")
            self.error_label.show()
            self._update_buttons()
            return
        self.price, self.power_estimated = price, estimated
        self.error_label.hide()
        self.result_label.setText(self.describe(price, estimated))
        self._update_buttons()

    def describe(self, price: AmortisedPrice, estimated: bool) -> str:
        """The breakdown, as ``gpuplanner catalog tco`` prints it, and the cheapest cloud price beside it."""
        hw = price.hardware
        gpu = self.gpu_combo.currentText()
        how = f"estimated: {hw.gpus} x board power + {HOST_OVERHEAD_W:,.0f} W host" if estimated else "given"
        lines = [
            f"Capital {human_money(price.capital_usd_per_hour, 3)}/h ({human_money(hw.purchase_usd, 0)} less {human_money(hw.residual_usd, 0)} "
            f"resale over {price.training_hours:,.0f} training hours: {hw.lifetime_years:g} years at "
            f"{hw.utilisation:.0%})",
            f"Energy {human_money(price.energy_usd_per_hour, 3)}/h ({hw.power_w:,.0f} W, {how}, at "
            f"{human_money(hw.electricity_usd_per_kwh, None)}/kWh)",
        ]
        if hw.idle_power_w:
            lines.append(
                f"Idle energy {human_money(price.idle_energy_usd_per_hour, 3)}/h ({hw.idle_power_w:,.0f} W when idle)"
            )
        if hw.upkeep_usd_per_year:
            lines.append(
                f"Upkeep {human_money(price.upkeep_usd_per_hour, 3)}/h ({human_money(hw.upkeep_usd_per_year, 0)} a year)"
            )
        lines.append(
            f"<b>{human_money(price.usd_per_machine_hour, 3)} per machine-hour = {human_money(price.usd_per_gpu_hour, 3)} per GPU-hour</b>"
        )
        rented = [o for o in self.catalog.offers_for(gpu) if not o.own]
        cloud = min(rented, key=lambda o: (o.on_demand_usd, o.provider, o.instance_type), default=None)
        if cloud is not None:
            lines.append(
                f"Cheapest cloud on demand for {gpu}: {human_money(cloud.on_demand_usd, 3)}/GPU-h ({cloud.provider} "
                f"{cloud.instance_type}, {human_gpus(cloud.gpu_count)}, {describe_age(cloud.as_of)})"
            )
        else:
            lines.append(f"No cloud offer for {gpu} in the catalog.")
        return "<br>".join(lines)

    # ------------------------------------------------------------------ using it

    def _update_buttons(self) -> None:
        idle = self._busy == 0
        self.add_button.setEnabled(idle and self.price is not None)
        self.host_button.setEnabled(idle and self.price is not None and self.host_combo.count() > 0)

    def is_busy(self) -> bool:
        return self._busy > 0

    def _submit(self, kind: str, work: Callable[[], Any]) -> None:
        self._busy += 1
        self._update_buttons()
        self._pool.start(BackgroundJob(work, self._signals, kind))

    def _read_hosts(self) -> list[str]:
        from gpuplanner.launch.hosts import list_hosts

        return [host.name for host in list_hosts(self.services.db_path)]

    @Slot()
    def _on_add_clicked(self) -> None:
        self.add_to_comparison()

    def add_to_comparison(self) -> bool:
        """Save the machine in machines.toml (on the worker); False when there is nothing valid to save."""
        from gpuplanner.app.machines import machine_fields, save_machine

        name = self.name_edit.text().strip()
        if not name:
            self.message_label.setText("Machine name: needs a value, e.g. workstation.")
            return False
        if self.price is None:
            return False
        fields = machine_fields(name, self.gpu_combo.currentText(), self.price, self.power_estimated)
        catalog, config = self.catalog, self.services.config_dir
        self.message_label.setText(f"Saving {name}…")
        per_gpu = self.price.usd_per_gpu_hour
        self._submit("machine", lambda: (name, save_machine(name, fields, catalog, config), per_gpu))
        return True

    @Slot()
    def _on_host_clicked(self) -> None:
        self.set_host_price()

    def set_host_price(self) -> bool:
        """Store the price per GPU-hour on the chosen host (on the worker)."""
        from gpuplanner.launch.hosts import set_price

        name = self.host_combo.currentText()
        if self.price is None or not name:
            return False
        price = round(self.price.usd_per_gpu_hour, 4)
        db_path = self.services.db_path
        self.message_label.setText(f"Setting the price of {name}…")
        self._submit("host", lambda: (name, set_price(db_path, name, price).price_usd_per_gpu_hour))
        return True

    @Slot(str, int, object)
    def _on_job_done(self, kind: str, _generation: int, result: Any) -> None:
        self._busy -= 1
        if kind == "hosts":
            current = self.host_combo.currentText()
            self.host_combo.clear()
            self.host_combo.addItems(result)
            if current in result:
                self.host_combo.setCurrentText(current)
        elif kind == "machine":
            name, path, per_gpu = result
            self.message_label.setText(
                f"Added {name} to {path}: the Plan pane now compares it as provider 'own' ({human_money(per_gpu, 3)}/GPU-h)."
            )
            self.machineSaved.emit(name)
        elif kind == "host":
            name, price = result
            self.message_label.setText(f"{name} now costs {human_money(price, 3)} per GPU-hour.")
            self.hostPriceSet.emit(name, float(price))
        self._update_buttons()

    @Slot(str, int, str)
    def _on_job_failed(self, kind: str, _generation: int, message: str) -> None:
        self._busy -= 1
        what = {"hosts": "Cannot read the hosts", "machine": "Cannot add the machine", "host": "Cannot set the price"}
        self.message_label.setText(f"{what.get(kind, 'Failed')}: {message}")
        self._update_buttons()

    def shutdown(self) -> None:
        """Wait for a write in flight (call before the window goes away)."""
        self._pool.waitForDone(10_000)
