"""What a run costs beyond GPU-hours: storage (checkpoints kept, the dataset during the run) and transfer
(moving the dataset to the GPUs), priced from ``resources/catalog/storage_prices.csv``. The one home of
this computation: the plan, the comparison (ranked by the total), their JSON documents, the CLI and the
window all read it from here.

- **Checkpoint size** from the plan: for full training the weights (fp32 masters; bf16 in pure bf16) plus
  the optimizer states; for LoRA/QLoRA the adapters (fp32) plus their optimizer states. The optimizer
  state bytes are the memory model's own (``memory._optimizer_state_bytes``).
- **Storage**: ``checkpoints_kept`` checkpoints for ``retention_days``, plus the dataset for the run's
  wall time, at the training provider's storage price ($/GB-month, a month being 365.25/12 days).
- **Transfer**: the dataset is copied once to the training region. ``same-region``: free.
  ``other-region``: the training provider's inter-region rate. ``other-provider``: the internet egress rate
  of the provider that holds the data (``data_provider``). ``on-prem``: free (cloud ingress is free; the
  user's own uplink is not priced). Checkpoint uploads are ingress (free).

Sizes are decimal GB (10^9 bytes). Pure: no network, no database.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplanner.export.human import human_cost, human_hours, human_money, human_number
from gpuplanner.plan.activation_ledger import FP32, HALF
from gpuplanner.plan.memory import _optimizer_state_bytes, trainable_params
from gpuplanner.plan.setup import PlanInputError

if TYPE_CHECKING:
    from gpuplanner.plan.model_shape import ModelSpec
    from gpuplanner.plan.plan_request import Plan
    from gpuplanner.plan.setup import TrainSetup

LOCATIONS = ("same-region", "other-region", "other-provider", "on-prem")
# Providers that may hold the dataset for ``other-provider`` (rows of the shipped table; a test checks it).
DATA_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod")
DEFAULT_CHECKPOINTS_KEPT = 3  # the trainer's --keep-checkpoints default
DEFAULT_RETENTION_DAYS = 30.0
DAYS_PER_MONTH = 365.25 / 12
GB = 1e9
_COLUMNS = (
    "provider",
    "product",
    "storage_usd_per_gb_month",
    "internet_egress_usd_per_gb",
    "inter_region_usd_per_gb",
    "as_of",
    "source",
)


@dataclass(frozen=True)
class StoragePrice:
    """One provider's storage and egress list prices, with where and when they were read."""

    provider: str
    product: str
    storage_usd_per_gb_month: float
    internet_egress_usd_per_gb: float
    inter_region_usd_per_gb: float
    as_of: str
    source: str


@dataclass(frozen=True)
class StorageRequest:
    """The storage inputs of a plan (given only with a dataset size)."""

    dataset_gb: float
    data_location: str = "same-region"
    data_provider: str = "aws"
    checkpoints_kept: int = DEFAULT_CHECKPOINTS_KEPT
    retention_days: float = DEFAULT_RETENTION_DAYS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.dataset_gb) and self.dataset_gb > 0):
            raise PlanInputError("dataset-gb", f"must be a positive number of GB, got {self.dataset_gb!r}")
        if self.data_location not in LOCATIONS:
            raise PlanInputError("data-location", f"{self.data_location!r} is not one of {', '.join(LOCATIONS)}")
        if self.data_provider not in DATA_PROVIDERS:
            raise PlanInputError("data-provider", f"{self.data_provider!r} is not one of {', '.join(DATA_PROVIDERS)}")
        if isinstance(self.checkpoints_kept, bool) or not isinstance(self.checkpoints_kept, int):
            raise PlanInputError("checkpoints-kept", f"must be a whole number, got {self.checkpoints_kept!r}")
        if self.checkpoints_kept < 1:
            raise PlanInputError("checkpoints-kept", f"must be at least 1, got {self.checkpoints_kept!r}")
        if not (math.isfinite(self.retention_days) and self.retention_days >= 0):
            raise PlanInputError("retention-days", f"must be zero or more days, got {self.retention_days!r}")


@dataclass(frozen=True)
class StorageBill:
    """Storage and transfer of one plan option at one provider's prices."""

    provider: str
    price: StoragePrice
    checkpoint_gb: float
    checkpoints_kept: int
    retention_days: float
    checkpoint_storage_usd: float
    dataset_gb: float
    run_hours: float
    dataset_storage_usd: float
    data_location: str
    transfer_from: str  # whose rate prices the transfer ("" when free)
    transfer_usd_per_gb: float
    transfer_usd: float

    @property
    def storage_usd(self) -> float:
        return self.checkpoint_storage_usd + self.dataset_storage_usd


@dataclass(frozen=True)
class Bill:
    """Compute, storage and transfer of one plan option under one pricing mode. ``storage`` None: the
    training provider has no storage prices (storage, transfer and the total unknown, never $0)."""

    pricing: str
    provider: str | None
    compute_usd: float | None
    storage: StorageBill | None
    note: str = ""

    @property
    def storage_usd(self) -> float | None:
        return self.storage.storage_usd if self.storage else None

    @property
    def transfer_usd(self) -> float | None:
        return self.storage.transfer_usd if self.storage else None

    @property
    def total_usd(self) -> float | None:
        """Compute plus storage plus transfer; None when a part is unknown (no compute price, or no storage
        prices for the provider), so such an option ranks after every fully priced one, never as cheaper."""
        if self.compute_usd is None or self.storage is None:
            return None
        return self.compute_usd + self.storage.storage_usd + self.storage.transfer_usd


def _path() -> Path:
    from gpuplanner.resources import resource_path

    return resource_path("catalog", "storage_prices.csv")


@lru_cache(maxsize=4)
def load_storage_prices(path: Path | None = None) -> dict[str, StoragePrice]:
    """The storage price table by provider; a row with a bad number names the file, row and column."""
    path = path or _path()
    prices: dict[str, StoragePrice] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            numbers = []
            for column in _COLUMNS[2:5]:
                try:
                    value = float(row[column])
                except (TypeError, ValueError):
                    raise ValueError(f"{path} line {line}: {column} is not a number: {row[column]!r}") from None
                if not (math.isfinite(value) and value >= 0):
                    raise ValueError(f"{path} line {line}: {column} must be zero or more, got {row[column]!r}")
                numbers.append(value)
            provider = row["provider"].strip()
            prices[provider] = StoragePrice(
                provider=provider,
                product=row["product"],
                storage_usd_per_gb_month=numbers[0],
                internet_egress_usd_per_gb=numbers[1],
                inter_region_usd_per_gb=numbers[2],
                as_of=row["as_of"],
                source=row["source"],
            )
    return prices


def checkpoint_bytes(spec: ModelSpec, setup: TrainSetup) -> int:
    """One checkpoint's size: the trained weights plus their optimizer states (the trainer saves both)."""
    trainable = trainable_params(spec, setup)
    if setup.method == "full":
        param_b = HALF if setup.precision == "bf16" else FP32
        weights = param_b * spec.n_params
    else:
        param_b = FP32  # peft keeps adapters in fp32; only they are saved
        weights = FP32 * trainable
    optimizer, _transient = _optimizer_state_bytes(spec, setup, trainable, param_b)
    return weights + optimizer


def storage_bill(request: StorageRequest, provider: str, checkpoint_gb: float, run_hours: float) -> StorageBill | None:
    """Storage and transfer at ``provider``'s prices; None when the table has no row for it."""
    prices = load_storage_prices()
    price = prices.get(provider)
    if price is None:
        return None
    rate = price.storage_usd_per_gb_month
    checkpoints = checkpoint_gb * request.checkpoints_kept * rate * request.retention_days / DAYS_PER_MONTH
    dataset = request.dataset_gb * rate * run_hours / 24.0 / DAYS_PER_MONTH
    transfer_from, per_gb = "", 0.0
    if request.data_location == "other-region":
        transfer_from, per_gb = provider, price.inter_region_usd_per_gb
    elif request.data_location == "other-provider":
        source = prices[request.data_provider]
        transfer_from, per_gb = request.data_provider, source.internet_egress_usd_per_gb
    return StorageBill(
        provider=provider,
        price=price,
        checkpoint_gb=checkpoint_gb,
        checkpoints_kept=request.checkpoints_kept,
        retention_days=request.retention_days,
        checkpoint_storage_usd=checkpoints,
        dataset_gb=request.dataset_gb,
        run_hours=run_hours,
        dataset_storage_usd=dataset,
        data_location=request.data_location,
        transfer_from=transfer_from,
        transfer_usd_per_gb=per_gb,
        transfer_usd=request.dataset_gb * per_gb,
    )


def plan_bill(plan: Plan, pricing: str | None = None) -> Bill | None:
    """The bill of ``plan`` under ``pricing`` (default: the request's mode); None without storage inputs."""
    request = plan.request.storage
    if request is None:
        return None
    mode = pricing or plan.request.pricing_mode
    if mode == "spot":
        choice = plan.spot.price if plan.spot else None
        compute = plan.spot.cost_usd if plan.spot else None
        hours = plan.spot.estimate.hours if plan.spot else plan.runtime.hours
    else:
        choice, compute, hours = plan.on_demand, plan.on_demand_cost_usd, plan.runtime.hours
    provider = choice.provider if choice else None
    if provider is None or not math.isfinite(hours):
        return Bill(mode, provider, compute, None, "no price for this option")
    checkpoint_gb = checkpoint_bytes(plan.request.model, plan.setup) / GB
    bill = storage_bill(request, provider, checkpoint_gb, hours)
    note = "" if bill else f"no storage prices for {provider}: storage and transfer not priced"
    return Bill(mode, provider, compute, bill, note)


def with_bill_budget(plan: Plan) -> Plan:
    """``plan`` with its budget check counting storage and transfer too: what the compute check compared
    (on-demand: the cost; spot: its P90 cost) plus storage plus transfer must stay within the budget. Only
    a plan with a dataset size, a budget and known storage prices can change (from within to over)."""
    budget = plan.request.budget_usd
    if budget is None or plan.budget_ok is not True:
        return plan
    bill = plan_bill(plan)
    if bill is None or bill.storage is None:
        return plan
    if plan.request.pricing_mode == "spot":
        checked = plan.spot.p90_cost_usd if plan.spot else None
    else:
        checked = plan.on_demand_cost_usd
    if checked is None or checked + bill.storage.storage_usd + bill.storage.transfer_usd <= budget:
        return plan
    return replace(plan, budget_ok=False)


def bill_document(bill: Bill) -> dict[str, object]:
    """The ``bill`` object of the plan and comparison JSON documents (docs/json.md)."""

    def money(value: float | None) -> float | None:
        return round(value, 2) if value is not None and math.isfinite(value) else None

    document: dict[str, object] = {
        "pricing": bill.pricing,
        "provider": bill.provider,
        "compute_usd": money(bill.compute_usd),
        "storage_usd": money(bill.storage_usd),
        "transfer_usd": money(bill.transfer_usd),
        "total_usd": money(bill.total_usd),
        "note": bill.note or None,
        "storage": None,
        "transfer": None,
    }
    s = bill.storage
    if s is not None:
        document["storage"] = {
            "usd": money(s.storage_usd),
            "checkpoint_gb": round(s.checkpoint_gb, 3),
            "checkpoints_kept": s.checkpoints_kept,
            "retention_days": s.retention_days,
            "checkpoints_usd": money(s.checkpoint_storage_usd),
            "dataset_gb": s.dataset_gb,
            "dataset_hours": round(s.run_hours, 4),
            "dataset_usd": money(s.dataset_storage_usd),
            "usd_per_gb_month": s.price.storage_usd_per_gb_month,
            "product": s.price.product,
            "as_of": s.price.as_of,
            "source": s.price.source,
        }
        document["transfer"] = {
            "usd": money(s.transfer_usd),
            "gb": s.dataset_gb if s.transfer_usd_per_gb else 0.0,
            "data_location": s.data_location,
            "from_provider": s.transfer_from or None,
            "usd_per_gb": s.transfer_usd_per_gb,
        }
    return document


_WHERE = {
    "same-region": "the dataset is in the training region: no transfer charge",
    "on-prem": "the dataset comes from on-premises: cloud ingress is free (your own uplink is not priced)",
}


def describe_bill(bill: Bill) -> list[str]:
    """The bill in words, one line per part (the CLI's plan report and the window's result)."""
    where = f" at {bill.provider}" if bill.provider else ""
    if bill.storage is None:
        return [f"Bill     compute {human_cost(bill.compute_usd)} ({bill.pricing}{where}); {bill.note}"]
    s = bill.storage
    lines = [
        f"Bill     {human_cost(bill.total_usd)} total ({bill.pricing}{where}): compute {human_cost(bill.compute_usd)}"
        f" + storage {human_money(s.storage_usd)} + transfer {human_money(s.transfer_usd)}",
        f"  storage  {human_money(s.storage_usd)}: {s.checkpoints_kept} checkpoint(s) x "
        f"{human_number(s.checkpoint_gb)} GB for {s.retention_days:g} days + the {human_number(s.dataset_gb)} GB "
        f"dataset for {human_hours(s.run_hours)} at {human_money(s.price.storage_usd_per_gb_month, None)}/GB-month "
        f"({s.price.product}, {s.price.as_of})",
    ]
    what = "another region" if s.data_location == "other-region" else f"{s.transfer_from} (another provider)"
    if s.transfer_from and not s.transfer_usd_per_gb:
        lines.append(f"  transfer {human_money(0.0)}: {s.transfer_from} charges no egress (the dataset from {what})")
    elif s.transfer_from:
        lines.append(
            f"  transfer {human_money(s.transfer_usd)}: egress of the {human_number(s.dataset_gb)} GB dataset from "
            f"{what} at {human_money(s.transfer_usd_per_gb, None)}/GB ({s.transfer_from}'s list price)"
        )
    else:
        lines.append(f"  transfer {human_money(0.0)}: {_WHERE[s.data_location]}")
    return lines
