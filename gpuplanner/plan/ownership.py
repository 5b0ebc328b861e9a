"""What an hour of training on your own hardware costs: the amortised price (total cost of ownership).

An owned machine costs its purchase price (less what it sells for at the end) spread over the hours it
trains in its lifetime, plus the electricity it draws while training, plus the electricity it draws while
idle and any yearly upkeep (hosting, repairs), both also spread over the training hours. Divided by its
GPUs this is a price per GPU-hour on the same axis as a cloud offer, so the planner and ``compare`` rank
owned and rented hardware together. ``machines.toml`` accepts these inputs instead of a fixed
``usd_per_gpu_hour`` (see :mod:`gpuplanner.plan.catalog`).

Pure: standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuplanner.export.human import human_money
from gpuplanner.plan.setup import PlanInputError

HOURS_PER_YEAR = 365.25 * 24
# Besides its GPUs a training machine draws power for CPUs, memory, disks, fans and power-supply losses.
HOST_OVERHEAD_W = 250.0


def estimated_power_w(gpus: int, gpu_tdp_w: float) -> float:
    """Average draw of a machine training flat out: its GPUs at board power plus :data:`HOST_OVERHEAD_W`."""
    return gpus * gpu_tdp_w + HOST_OVERHEAD_W


@dataclass(frozen=True)
class OwnHardware:
    """The inputs of the amortised price. Money in US dollars, power in watts."""

    purchase_usd: float
    lifetime_years: float
    power_w: float  # average draw while training
    electricity_usd_per_kwh: float
    utilisation: float  # share of the lifetime's hours spent training, 0 < u <= 1
    gpus: int = 1
    idle_power_w: float = 0.0  # draw while not training
    upkeep_usd_per_year: float = 0.0  # hosting, support, repairs
    residual_usd: float = 0.0  # resale value at the end of the lifetime

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise PlanInputError(name.replace("_", "-"), f"must be {what}, got {getattr(self, name)!r}")

        def finite(name: str) -> bool:
            value = getattr(self, name)
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        check("purchase_usd", finite("purchase_usd") and self.purchase_usd >= 0, "zero or more dollars")
        check("lifetime_years", finite("lifetime_years") and self.lifetime_years > 0, "a positive number of years")
        check("power_w", finite("power_w") and self.power_w >= 0, "zero or more watts")
        check(
            "electricity_usd_per_kwh",
            finite("electricity_usd_per_kwh") and self.electricity_usd_per_kwh >= 0,
            "zero or more dollars per kWh",
        )
        check(
            "utilisation",
            finite("utilisation") and 0 < self.utilisation <= 1,
            "a share above 0 and at most 1 (0.5 = trains half the time)",
        )
        check("gpus", isinstance(self.gpus, int) and not isinstance(self.gpus, bool) and self.gpus >= 1, "1 or more")
        check("idle_power_w", finite("idle_power_w") and self.idle_power_w >= 0, "zero or more watts")
        check("upkeep_usd_per_year", finite("upkeep_usd_per_year") and self.upkeep_usd_per_year >= 0, "zero or more")
        check(
            "residual_usd",
            finite("residual_usd") and 0 <= self.residual_usd <= self.purchase_usd,
            "between 0 and the purchase price",
        )


@dataclass(frozen=True)
class AmortisedPrice:
    """Cost per hour of training, split into its parts (each per machine-hour of training)."""

    hardware: OwnHardware
    training_hours: float
    capital_usd_per_hour: float
    energy_usd_per_hour: float
    idle_energy_usd_per_hour: float
    upkeep_usd_per_hour: float

    @property
    def usd_per_machine_hour(self) -> float:
        return (
            self.capital_usd_per_hour
            + self.energy_usd_per_hour
            + self.idle_energy_usd_per_hour
            + self.upkeep_usd_per_hour
        )

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_machine_hour / self.hardware.gpus

    def describe(self) -> str:
        """One line on what the price rests on (the source of an own-machine offer)."""
        h = self.hardware
        return (
            f"own hardware: {human_money(h.purchase_usd, 0)} over {h.lifetime_years:g} years at {h.utilisation:.0%} use, "
            f"{h.power_w:,.0f} W at {human_money(h.electricity_usd_per_kwh, None)}/kWh"
        )

    def to_dict(self) -> dict[str, Any]:
        h = self.hardware
        return {
            "inputs": {
                "purchase_usd": h.purchase_usd,
                "lifetime_years": h.lifetime_years,
                "power_w": h.power_w,
                "electricity_usd_per_kwh": h.electricity_usd_per_kwh,
                "utilisation": h.utilisation,
                "gpus": h.gpus,
                "idle_power_w": h.idle_power_w,
                "upkeep_usd_per_year": h.upkeep_usd_per_year,
                "residual_usd": h.residual_usd,
            },
            "training_hours": round(self.training_hours, 1),
            "capital_usd_per_hour": round(self.capital_usd_per_hour, 6),
            "energy_usd_per_hour": round(self.energy_usd_per_hour, 6),
            "idle_energy_usd_per_hour": round(self.idle_energy_usd_per_hour, 6),
            "upkeep_usd_per_hour": round(self.upkeep_usd_per_hour, 6),
            "usd_per_machine_hour": round(self.usd_per_machine_hour, 6),
            "usd_per_gpu_hour": round(self.usd_per_gpu_hour, 6),
            "source": self.describe(),
        }


def amortised_price(hardware: OwnHardware) -> AmortisedPrice:
    """The price of one hour of training on ``hardware`` (per machine and per GPU)."""
    lifetime_hours = hardware.lifetime_years * HOURS_PER_YEAR
    training_hours = lifetime_hours * hardware.utilisation
    idle_hours = lifetime_hours - training_hours
    kwh_price = hardware.electricity_usd_per_kwh
    return AmortisedPrice(
        hardware=hardware,
        training_hours=training_hours,
        capital_usd_per_hour=(hardware.purchase_usd - hardware.residual_usd) / training_hours,
        energy_usd_per_hour=hardware.power_w / 1000.0 * kwh_price,
        idle_energy_usd_per_hour=hardware.idle_power_w / 1000.0 * kwh_price * idle_hours / training_hours,
        upkeep_usd_per_hour=hardware.upkeep_usd_per_year * hardware.lifetime_years / training_hours,
    )
