"""What a plan is asked and what it answers: :class:`PlanRequest` (with its pricing and measured-speed
inputs) and :class:`Plan` (with the price and spot results it carries). Computed by
:func:`gpuplanner.plan.planner.make_plan`, which re-exports these types. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplanner.plan import example
from gpuplanner.plan.catalog import GpuSpec
from gpuplanner.plan.memory import MemoryBreakdown
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.ranges import hours_range, spot_hours_range
from gpuplanner.plan.runtime import Runtime, Workload
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.spot import SpotEstimate, SpotTerms
from gpuplanner.plan.storage_cost import StorageRequest
from gpuplanner.plan.throughput import Throughput
from trainer.spend import instance_hour_usd

GIB = 1024**3
DEFAULT_HEADROOM = 0.95
DEFAULT_GPU = example.GPU
PRICINGS = ("on-demand", "spot")
MEMORY_SOURCES = ("formula", "trace")


@dataclass(frozen=True)
class MeasuredSpeed:
    """Throughput measured on one GPU type for this model (from the run history or `trainer bench`)."""

    gpu: str
    tokens_per_s_per_gpu: float
    source: str
    peak_memory_gib: float | None = None
    # the settings it was measured at, when known: a speed at another sequence length or micro-batch
    # corrects the step model's efficiency instead of being used as is
    seq_len: int | None = None
    micro_batch: int | None = None

    def matches(self, setup: TrainSetup) -> bool:
        """Whether this speed was measured at ``setup``'s sequence length and micro-batch (or they are unknown)."""
        return self.seq_len in (None, setup.seq_len) and self.micro_batch in (None, setup.micro_batch)


@dataclass(frozen=True)
class PricingInputs:
    """What the user said about prices and spot behaviour; unset fields come from the catalog."""

    price: float | None = None
    spot_price: float | None = None
    spot_discount: float | None = None
    interruptions_per_hour: float | None = None
    restart_minutes: float = 10.0
    checkpoint_minutes: float = 30.0
    checkpoint_write_s: float | None = None
    spot_overhead_pct: float | None = None

    def __post_init__(self) -> None:
        for name in ("price", "spot_price"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PlanInputError(
                    name.replace("_", "-"), f"must be a positive price in $ per GPU-hour, got {value!r}"
                )
        if self.spot_discount is not None and not (0.0 <= self.spot_discount < 1.0):
            raise PlanInputError(
                "spot-discount", f"must be a share between 0 and 1 (0.6 = 60% cheaper), got {self.spot_discount!r}"
            )
        if self.spot_price is not None and self.spot_discount is not None:
            raise PlanInputError("spot-discount", "give either --spot-price or --spot-discount, not both")
        if self.interruptions_per_hour is not None and not (
            math.isfinite(self.interruptions_per_hour) and self.interruptions_per_hour >= 0
        ):
            raise PlanInputError(
                "interruptions-per-hour", f"must be zero or a positive rate, got {self.interruptions_per_hour!r}"
            )
        if not (math.isfinite(self.restart_minutes) and self.restart_minutes >= 0):
            raise PlanInputError("restart-minutes", f"must be zero or more minutes, got {self.restart_minutes!r}")
        if not (math.isfinite(self.checkpoint_minutes) and self.checkpoint_minutes > 0):
            raise PlanInputError(
                "checkpoint-minutes", f"must be a positive number of minutes, got {self.checkpoint_minutes!r}"
            )
        if self.checkpoint_write_s is not None and not (
            math.isfinite(self.checkpoint_write_s) and self.checkpoint_write_s >= 0
        ):
            raise PlanInputError("checkpoint-write-s", f"must be zero or more seconds, got {self.checkpoint_write_s!r}")


@dataclass(frozen=True)
class PlanRequest:
    """Everything one plan needs. ``gpu`` None with a ``pricing.price`` plans without the catalog."""

    model: ModelSpec
    setup: TrainSetup
    workload: Workload
    gpu: str | None = DEFAULT_GPU
    pricing: PricingInputs = field(default_factory=PricingInputs)
    pricing_mode: str = "on-demand"
    deadline_hours: float | None = None
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    mfu: float | None = None
    tokens_per_s: float | None = None
    samples_per_min: float | None = None
    headroom: float = DEFAULT_HEADROOM
    measured: Mapping[str, MeasuredSpeed] = field(default_factory=dict)
    memory_source: str = "formula"
    # dataset size and place, checkpoints kept and retention: the storage and transfer parts of the bill
    # (plan/storage_cost.py); None: compute only
    storage: StorageRequest | None = None
    # what a whole run spends beyond steady-state training (restarts, evaluations, checkpoints,
    # stragglers), percent of the steady-state hours; None: the steady state only
    run_overhead_pct: float | None = None

    def __post_init__(self) -> None:
        if self.memory_source not in MEMORY_SOURCES:
            raise PlanInputError("memory", f"{self.memory_source!r} is not one of {', '.join(MEMORY_SOURCES)}")
        if self.pricing_mode not in PRICINGS:
            raise PlanInputError("pricing", f"{self.pricing_mode!r} is not one of {', '.join(PRICINGS)}")
        if self.deadline_hours is not None and not (math.isfinite(self.deadline_hours) and self.deadline_hours > 0):
            raise PlanInputError("deadline-hours", f"must be a positive number of hours, got {self.deadline_hours!r}")
        if self.budget_usd is not None and not (math.isfinite(self.budget_usd) and self.budget_usd > 0):
            raise PlanInputError("budget-usd", f"must be a positive amount of dollars, got {self.budget_usd!r}")
        if self.max_gpu_hours is not None and not (math.isfinite(self.max_gpu_hours) and self.max_gpu_hours > 0):
            raise PlanInputError("max-gpu-hours", f"must be a positive number of GPU-hours, got {self.max_gpu_hours!r}")
        if self.run_overhead_pct is not None and not (
            math.isfinite(self.run_overhead_pct) and 0.0 <= self.run_overhead_pct <= 1000.0
        ):
            raise PlanInputError("run-overhead-pct", f"must be 0-1000 percent, got {self.run_overhead_pct!r}")
        if not 0.0 < self.headroom <= 1.0:
            raise PlanInputError("headroom", f"must be a share between 0 and 1, got {self.headroom!r}")
        if self.tokens_per_s is not None and self.samples_per_min is not None:
            raise PlanInputError("tokens-per-s", "give either --tokens-per-s or --samples-per-min, not both")


@dataclass(frozen=True)
class PriceChoice:
    """The price a plan uses for one pricing mode, and where it came from."""

    usd_per_gpu_hour: float
    billed_gpus: int
    provider: str
    region: str
    instance_type: str
    interruptions_per_hour: float | None = None
    notice_s: float | None = None
    as_of: str = ""  # date of the catalog offer ("" for prices the user gave)
    source: str = ""  # where the offer's price comes from
    interruptions_source: str = ""  # what the interruption rate rests on ("assumed" where nothing does)

    @property
    def usd_per_instance_hour(self) -> float:
        """What the billed instance costs per hour (:func:`trainer.spend.instance_hour_usd`)."""
        return instance_hour_usd(self.usd_per_gpu_hour, self.billed_gpus)


@dataclass(frozen=True)
class SpotResult:
    estimate: SpotEstimate
    price: PriceChoice
    cost_usd: float
    p50_cost_usd: float
    p90_cost_usd: float
    savings_pct: float | None
    terms: SpotTerms | None = None


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    gpu: GpuSpec | None
    setup: TrainSetup
    memory: MemoryBreakdown
    capacity_gib: float | None
    fits: bool | None
    throughput: Throughput
    runtime: Runtime
    on_demand: PriceChoice | None
    on_demand_cost_usd: float | None
    spot: SpotResult | None
    deadline_ok: bool | None
    budget_ok: bool | None
    warnings: tuple[str, ...]
    suggestions: tuple[str, ...] = ()
    max_micro_batch: int | None = None
    gpu_hours_ok: bool | None = None  # against the request's max_gpu_hours (None without one)

    @property
    def cost_usd(self) -> float | None:
        """Cost under the request's pricing mode (spot: expected cost)."""
        if self.request.pricing_mode == "spot":
            return self.spot.cost_usd if self.spot else None
        return self.on_demand_cost_usd

    @property
    def hours(self) -> float:
        if self.request.pricing_mode == "spot" and self.spot:
            return self.spot.estimate.hours
        return self.runtime.hours

    # ---- likely ranges (P10-P90) from the speed's uncertainty and, on spot, the interruptions ----

    @property
    def on_demand_hours_range(self) -> tuple[float, float]:
        return hours_range(self.runtime.hours, self.throughput.uncertainty_pct)

    @property
    def spot_hours_range(self) -> tuple[float, float] | None:
        if self.spot is None:
            return None
        if self.spot.terms is None or not math.isfinite(self.spot.estimate.hours):
            return (self.spot.estimate.p50_hours, self.spot.estimate.p90_hours)
        return spot_hours_range(self.runtime.hours, self.spot.terms, self.throughput.uncertainty_pct)

    @property
    def on_demand_cost_range(self) -> tuple[float, float] | None:
        if self.on_demand is None:
            return None
        rate = self.on_demand.usd_per_instance_hour
        low, high = self.on_demand_hours_range
        return (low * rate, high * rate)

    @property
    def spot_cost_range(self) -> tuple[float, float] | None:
        hours = self.spot_hours_range
        if hours is None or self.spot is None:
            return None
        rate = self.spot.price.usd_per_instance_hour
        return (hours[0] * rate, hours[1] * rate)

    @property
    def hours_range(self) -> tuple[float, float]:
        """Likely (P10-P90) wall hours under the request's pricing mode."""
        if self.request.pricing_mode == "spot" and self.spot:
            spot = self.spot_hours_range
            assert spot is not None
            return spot
        return self.on_demand_hours_range

    @property
    def cost_range(self) -> tuple[float, float] | None:
        """Likely (P10-P90) cost under the request's pricing mode; None without a price."""
        if self.request.pricing_mode == "spot":
            return self.spot_cost_range
        return self.on_demand_cost_range


# ----------------------------------------------------------------------------------- prices
