"""One plan for one GPU option, and the ranked comparison of every catalog option.

This module ties the engine together: memory (does it fit), throughput (how fast), runtime (how
long), price (on-demand and spot) and the deadline and budget checks. The results are plain
dataclasses; :func:`plan_document` turns one into the stable JSON document that `gpuplanner plan
--json` prints and other tools read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from gpuplanner.plan import example
from gpuplanner.plan.catalog import Catalog, GpuSpec, PriceOffer
from gpuplanner.plan.memory import MemoryBreakdown, estimate_memory, fit_suggestions, max_micro_batch, trainable_params
from gpuplanner.plan.model_spec import ModelSpec
from gpuplanner.plan.runtime import Runtime, Workload, estimate_runtime
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.spot import SpotEstimate, SpotTerms, estimate_spot
from gpuplanner.plan.throughput import Throughput, estimate_throughput, measured_throughput
from gpuplanner.plan.trace import TraceUnavailable, trace_memory

GIB = 1024**3
DEFAULT_HEADROOM = 0.95
DEFAULT_GPU = example.GPU
GPU_COUNTS = (1, 2, 4, 8)
PRICINGS = ("on-demand", "spot")
MEMORY_SOURCES = ("formula", "trace")
# Assumed rate for spot offers whose provider publishes none (about one interruption a day).
FALLBACK_INTERRUPTIONS_PER_HOUR = 0.05
# Sustained write speed of a checkpoint to local NVMe through torch.save / safetensors.
CHECKPOINT_WRITE_GB_PER_S = 1.0
# Below this multi-GPU scaling efficiency a plan warns that communication dominates.
LOW_SCALING_EFFICIENCY = 0.5


@dataclass(frozen=True)
class MeasuredSpeed:
    """Throughput measured on one GPU type for this model (from the run history or `trainer bench`)."""

    gpu: str
    tokens_per_s_per_gpu: float
    source: str
    peak_memory_gib: float | None = None


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
                raise PlanInputError(name.replace("_", "-"), f"must be a positive price in $ per GPU-hour, got {value!r}")
        if self.spot_discount is not None and not (0.0 <= self.spot_discount < 1.0):
            raise PlanInputError("spot-discount", f"must be a share between 0 and 1 (0.6 = 60% cheaper), got {self.spot_discount!r}")
        if self.spot_price is not None and self.spot_discount is not None:
            raise PlanInputError("spot-discount", "give either --spot-price or --spot-discount, not both")
        if self.interruptions_per_hour is not None and not (math.isfinite(self.interruptions_per_hour) and self.interruptions_per_hour >= 0):
            raise PlanInputError("interruptions-per-hour", f"must be zero or a positive rate, got {self.interruptions_per_hour!r}")
        if not (math.isfinite(self.restart_minutes) and self.restart_minutes >= 0):
            raise PlanInputError("restart-minutes", f"must be zero or more minutes, got {self.restart_minutes!r}")
        if not (math.isfinite(self.checkpoint_minutes) and self.checkpoint_minutes > 0):
            raise PlanInputError("checkpoint-minutes", f"must be a positive number of minutes, got {self.checkpoint_minutes!r}")
        if self.checkpoint_write_s is not None and not (math.isfinite(self.checkpoint_write_s) and self.checkpoint_write_s >= 0):
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
    mfu: float | None = None
    tokens_per_s: float | None = None
    samples_per_min: float | None = None
    headroom: float = DEFAULT_HEADROOM
    measured: Mapping[str, MeasuredSpeed] = field(default_factory=dict)
    memory_source: str = "formula"

    def __post_init__(self) -> None:
        if self.memory_source not in MEMORY_SOURCES:
            raise PlanInputError("memory", f"{self.memory_source!r} is not one of {', '.join(MEMORY_SOURCES)}")
        if self.pricing_mode not in PRICINGS:
            raise PlanInputError("pricing", f"{self.pricing_mode!r} is not one of {', '.join(PRICINGS)}")
        if self.deadline_hours is not None and not (math.isfinite(self.deadline_hours) and self.deadline_hours > 0):
            raise PlanInputError("deadline-hours", f"must be a positive number of hours, got {self.deadline_hours!r}")
        if self.budget_usd is not None and not (math.isfinite(self.budget_usd) and self.budget_usd > 0):
            raise PlanInputError("budget-usd", f"must be a positive amount of dollars, got {self.budget_usd!r}")
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


@dataclass(frozen=True)
class SpotResult:
    estimate: SpotEstimate
    price: PriceChoice
    cost_usd: float
    p50_cost_usd: float
    p90_cost_usd: float
    savings_pct: float | None


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


# ----------------------------------------------------------------------------------- prices


def _offer_choice(offer: PriceOffer, gpus: int, spot: bool) -> PriceChoice | None:
    """Price of running ``gpus`` GPUs on one instance of an offer (billed for all its GPUs)."""
    if offer.gpu_count < gpus:
        return None
    price = offer.spot_usd if spot else offer.on_demand_usd
    if price is None:
        return None
    return PriceChoice(price, offer.gpu_count, offer.provider, offer.region, offer.instance_type,
                       offer.interruptions_per_hour if spot else None, offer.notice_s if spot else None)


def cheapest_offer(offers: Sequence[PriceOffer], gpus: int, spot: bool) -> PriceChoice | None:
    """The offer that runs ``gpus`` GPUs for the least money per hour (whole instances are billed)."""
    best: PriceChoice | None = None
    for offer in offers:
        choice = _offer_choice(offer, gpus, spot)
        if choice and (best is None or choice.usd_per_gpu_hour * choice.billed_gpus < best.usd_per_gpu_hour * best.billed_gpus):
            best = choice
    return best


def _given_price(request: PlanRequest, gpus: int, spot_like: PriceChoice | None) -> tuple[PriceChoice, PriceChoice | None]:
    """On-demand and spot prices from the user's own figures (``--price`` and friends)."""
    pricing = request.pricing
    assert pricing.price is not None
    on_demand = PriceChoice(pricing.price, gpus, "given", "", "")
    spot_price = pricing.spot_price
    if spot_price is None and pricing.spot_discount is not None:
        spot_price = pricing.price * (1.0 - pricing.spot_discount)
    if spot_price is None:
        return on_demand, None
    rate = spot_like.interruptions_per_hour if spot_like else None
    notice = spot_like.notice_s if spot_like else None
    return on_demand, PriceChoice(spot_price, gpus, "given", "", "", rate, notice)


def choose_prices(request: PlanRequest, offers: Sequence[PriceOffer], gpus: int) -> tuple[PriceChoice | None, PriceChoice | None]:
    """On-demand and spot prices for ``gpus`` GPUs: the user's figures first, else the cheapest offers."""
    pricing = request.pricing
    catalog_spot = cheapest_offer(offers, gpus, spot=True)
    if pricing.price is not None:
        return _given_price(request, gpus, catalog_spot)
    on_demand = cheapest_offer(offers, gpus, spot=False)
    spot = catalog_spot
    if pricing.spot_price is not None or pricing.spot_discount is not None:
        if on_demand is not None:
            price = pricing.spot_price if pricing.spot_price is not None else on_demand.usd_per_gpu_hour * (1.0 - (pricing.spot_discount or 0.0))
            spot = replace(on_demand, usd_per_gpu_hour=price,
                           interruptions_per_hour=catalog_spot.interruptions_per_hour if catalog_spot else None,
                           notice_s=catalog_spot.notice_s if catalog_spot else None)
    return on_demand, spot


# ----------------------------------------------------------------------------------- spot


def checkpoint_write_seconds(memory: MemoryBreakdown, setup: TrainSetup, trainable: int) -> float:
    """Time one GPU takes to write its part of a checkpoint (trained weights + optimizer states)."""
    weight_bytes = memory.weights if setup.method == "full" else trainable * 4.0
    return (weight_bytes + memory.optimizer) / (CHECKPOINT_WRITE_GB_PER_S * 1e9)


def spot_terms(request: PlanRequest, spot: PriceChoice, write_s: float, warnings: list[str]) -> SpotTerms:
    pricing = request.pricing
    rate = pricing.interruptions_per_hour
    if rate is None:
        rate = spot.interruptions_per_hour
    if rate is None and pricing.spot_overhead_pct is None:
        rate = FALLBACK_INTERRUPTIONS_PER_HOUR
        warnings.append(
            f"no interruption rate known for {spot.provider} spot: assumed {rate:g} per hour "
            "(set --interruptions-per-hour or --mean-hours-between-interruptions)")
    return SpotTerms(
        interruptions_per_hour=rate or 0.0,
        restart_hours=pricing.restart_minutes / 60.0,
        checkpoint_interval_hours=pricing.checkpoint_minutes / 60.0,
        checkpoint_write_hours=(pricing.checkpoint_write_s if pricing.checkpoint_write_s is not None else write_s) / 3600.0,
        notice_s=spot.notice_s,
        overhead_pct=pricing.spot_overhead_pct,
    )


def _spot_result(request: PlanRequest, spot: PriceChoice, runtime: Runtime, write_s: float,
                 on_demand_cost: float | None, warnings: list[str]) -> SpotResult:
    terms = spot_terms(request, spot, write_s, warnings)
    estimate = estimate_spot(runtime.hours, terms, request.deadline_hours)
    rate = spot.usd_per_gpu_hour * spot.billed_gpus
    cost = estimate.hours * rate
    savings = None
    if on_demand_cost and math.isfinite(cost):
        savings = (1.0 - cost / on_demand_cost) * 100.0
    if not estimate.finishes:
        warnings.append("spot: interruptions come faster than checkpoints; the run would never finish "
                        "(checkpoint more often with --checkpoint-minutes)")
    return SpotResult(estimate, spot, cost, estimate.p50_hours * rate, estimate.p90_hours * rate, savings)


# ----------------------------------------------------------------------------------- plan


def _throughput(request: PlanRequest, setup: TrainSetup, gpu: GpuSpec | None, trainable: int,
                allow_measured: bool) -> Throughput:
    if allow_measured and (request.tokens_per_s is not None or request.samples_per_min is not None):
        return measured_throughput(setup, request.tokens_per_s, request.samples_per_min)
    if gpu is None:
        raise PlanInputError("gpu", "without a GPU the speed must be given: add --tokens-per-s or --samples-per-min")
    estimate = estimate_throughput(request.model, setup, gpu, trainable, request.mfu)
    measured = request.measured.get(gpu.name)
    if measured is None:
        return estimate
    tokens_s = measured.tokens_per_s_per_gpu * setup.gpus * estimate.scaling_efficiency
    source = f"calibrated: {measured.source}"
    if setup.gpus > 1:
        source += f", scaling efficiency {estimate.scaling_efficiency:.0%} over {setup.gpus} GPUs"
    return Throughput(tokens_s, tokens_s / setup.seq_len * 60.0, source, None, estimate.flops_per_token,
                      estimate.scaling_efficiency)


def _deadline_budget(request: PlanRequest, runtime: Runtime, on_demand_cost: float | None,
                     spot: SpotResult | None) -> tuple[bool | None, bool | None]:
    deadline, budget = request.deadline_hours, request.budget_usd
    if request.pricing_mode == "spot":
        if spot is None:
            return (None if deadline is None else False), (None if budget is None else False)
        deadline_ok = None if deadline is None else spot.estimate.p90_hours <= deadline
        budget_ok = None if budget is None else spot.p90_cost_usd <= budget
        return deadline_ok, budget_ok
    deadline_ok = None if deadline is None else runtime.hours <= deadline
    budget_ok = None if budget is None else (on_demand_cost is not None and on_demand_cost <= budget)
    return deadline_ok, budget_ok


def _memory_warnings(memory: MemoryBreakdown, capacity: float | None, headroom: float, setup: TrainSetup) -> list[str]:
    warnings = []
    if capacity is not None and memory.total / GIB > capacity * headroom:
        warnings.append(f"does not fit: needs {memory.total / GIB:.1f} GiB per GPU, "
                        f"{capacity:.1f} GiB x {headroom:.0%} headroom = {capacity * headroom:.1f} GiB usable")
    if setup.precision == "fp16-mixed":
        warnings.append("fp16 mixed precision needs loss scaling and can overflow; prefer bf16 where the GPU has it")
    return warnings


def _larger_gpus(catalog: Catalog | None, capacity: float | None) -> list[tuple[str, float]]:
    if catalog is None or capacity is None:
        return []
    return sorted(((g.name, g.memory_gib) for g in catalog.gpus if g.memory_gib > capacity), key=lambda item: item[1])


def _plan_memory(request: PlanRequest, setup: TrainSetup, warnings: list[str]) -> MemoryBreakdown:
    """The formula estimate, or in trace mode one traced training step (falling back, with a warning)."""
    if request.memory_source == "trace":
        try:
            return trace_memory(request.model, setup)
        except TraceUnavailable as exc:
            warnings.append(f"trace mode unavailable ({exc}): the formulas answered")
    return estimate_memory(request.model, setup)


def make_plan(request: PlanRequest, catalog: Catalog | None, *, suggest: bool = True) -> Plan:
    """Plan one workload on one GPU option (``request.gpu`` x ``request.setup.gpus``)."""
    setup = request.setup
    gpu = catalog.gpu(request.gpu) if (catalog is not None and request.gpu is not None) else None
    if request.gpu is not None and gpu is None:
        raise PlanInputError("gpu", "no catalog loaded to look the GPU up in")
    if request.gpu is None and request.pricing.price is None:
        raise PlanInputError("gpu", "name a GPU (--gpu) or give your own --price per GPU-hour")
    warnings: list[str] = []
    memory = _plan_memory(request, setup, warnings)
    trainable = trainable_params(request.model, setup)
    capacity = gpu.memory_gib if gpu else None
    fits = None if capacity is None else memory.total / GIB <= capacity * request.headroom
    warnings += _memory_warnings(memory, capacity, request.headroom, setup)
    throughput = _throughput(request, setup, gpu, trainable, allow_measured=True)
    if throughput.scaling_efficiency < LOW_SCALING_EFFICIENCY:
        warnings.append(f"communication dominates: {setup.gpus} GPUs reach only {throughput.scaling_efficiency:.0%} "
                        "scaling efficiency; raise --grad-accum or the micro-batch, or use fewer GPUs")
    runtime = estimate_runtime(request.workload, throughput, setup)
    offers = catalog.offers_for(gpu.name) if (catalog is not None and gpu is not None) else ()
    on_demand, spot_price = choose_prices(request, offers, setup.gpus)
    if on_demand is None:
        warnings.append(f"no catalog offer has {setup.gpus} x {gpu.name if gpu else 'this GPU'}: give --price")
    on_demand_cost = on_demand.usd_per_gpu_hour * on_demand.billed_gpus * runtime.hours if on_demand else None
    if on_demand and on_demand.billed_gpus > setup.gpus:
        warnings.append(f"the cheapest instance ({on_demand.provider} {on_demand.instance_type}) has "
                        f"{on_demand.billed_gpus} GPUs: you pay for all of them")
    spot = None
    if spot_price is not None or request.pricing.spot_overhead_pct is not None:
        spot_choice = spot_price or on_demand
        if spot_choice is not None:
            write_s = checkpoint_write_seconds(memory, setup, trainable)
            spot = _spot_result(request, spot_choice, runtime, write_s, on_demand_cost, warnings)
    else:
        warnings.append("no spot price known: give --spot-price or --spot-discount to see spot")
    deadline_ok, budget_ok = _deadline_budget(request, runtime, on_demand_cost, spot)
    suggestions: tuple[str, ...] = ()
    largest_batch = None
    if capacity is not None:
        largest_batch = max_micro_batch(request.model, setup, capacity, request.headroom)
        if suggest and not fits:
            suggestions = tuple(fit_suggestions(request.model, setup, capacity, request.headroom,
                                                _larger_gpus(catalog, capacity)))
    return Plan(request, gpu, setup, memory, capacity, fits, throughput, runtime, on_demand, on_demand_cost,
                spot, deadline_ok, budget_ok, tuple(warnings), suggestions, largest_batch)


# ----------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class CompareRow:
    plan: Plan
    gpu: str
    gpus: int
    pricing: str
    provider: str | None
    usable: bool
    reason: str
    rank: int | None = None

    @property
    def cost_usd(self) -> float | None:
        if self.pricing == "spot":
            return self.plan.spot.cost_usd if self.plan.spot else None
        return self.plan.on_demand_cost_usd

    @property
    def p90_cost_usd(self) -> float | None:
        if self.pricing == "spot":
            return self.plan.spot.p90_cost_usd if self.plan.spot else None
        return self.plan.on_demand_cost_usd

    @property
    def hours(self) -> float:
        return self.plan.hours


def _row_reason(plan: Plan, priced: bool) -> str:
    reasons = []
    if plan.fits is False:
        reasons.append(f"needs {plan.memory.total / GIB:.1f} GiB, has {plan.capacity_gib * plan.request.headroom:.1f} GiB usable"
                       if plan.capacity_gib else "does not fit")
    if not priced:
        reasons.append("no offer in the catalog")
    if plan.deadline_ok is False:
        reasons.append("misses the deadline")
    if plan.budget_ok is False:
        reasons.append("over budget")
    return "; ".join(reasons)


def compare(request: PlanRequest, catalog: Catalog, counts: Sequence[int] = GPU_COUNTS,
            gpus: Sequence[str] | None = None) -> list[CompareRow]:
    """Every GPU x count x pricing for one workload, ranked cheapest first among usable options.

    An option is usable when it fits, has a price, meets the deadline and stays within the budget
    (spot options: in 90% of simulated runs). Unusable rows follow, cheapest first, with the reason.
    """
    if request.pricing.price is not None and request.gpu is None:
        raise PlanInputError("price", "compare ranks catalog offers; --price applies only with --gpu")
    names = list(gpus) if gpus is not None else ([catalog.gpu(request.gpu).name] if request.gpu else [g.name for g in catalog.gpus])
    mode_requests = {mode: replace(request, pricing_mode=mode) for mode in PRICINGS}
    rows: list[CompareRow] = []
    for count in counts:
        setup = replace(request.setup, gpus=count)
        memory = estimate_memory(request.model, setup)
        trainable = trainable_params(request.model, setup)
        for name in names:
            rows.extend(_compare_rows(mode_requests, catalog, catalog.gpu(name), setup, memory, trainable))
    return rank_rows(rows)


def _compare_rows(mode_requests: Mapping[str, PlanRequest], catalog: Catalog, gpu: GpuSpec, setup: TrainSetup,
                  memory: MemoryBreakdown, trainable: int) -> list[CompareRow]:
    request = mode_requests["on-demand"]
    warnings: list[str] = []
    capacity = gpu.memory_gib
    fits = memory.total / GIB <= capacity * request.headroom
    try:
        throughput = _throughput(request, setup, gpu, trainable, allow_measured=request.gpu is not None)
    except PlanInputError as exc:  # e.g. bf16 on a GPU without bf16
        return [_unusable_row(mode_requests[mode], gpu, setup, memory, fits, exc.message) for mode in PRICINGS]
    runtime = estimate_runtime(request.workload, throughput, setup)
    on_demand, spot_price = choose_prices(request, catalog.offers_for(gpu.name), setup.gpus)
    on_demand_cost = on_demand.usd_per_gpu_hour * on_demand.billed_gpus * runtime.hours if on_demand else None
    spot = None
    if spot_price is not None:
        write_s = checkpoint_write_seconds(memory, setup, trainable)
        spot = _spot_result(request, spot_price, runtime, write_s, on_demand_cost, warnings)
    rows = []
    for mode, mode_request in mode_requests.items():
        deadline_ok, budget_ok = _deadline_budget(mode_request, runtime, on_demand_cost, spot)
        plan = Plan(mode_request, gpu, setup, memory, capacity, fits, throughput, runtime, on_demand,
                    on_demand_cost, spot, deadline_ok, budget_ok, tuple(warnings))
        choice = on_demand if mode == "on-demand" else (spot.price if spot else None)
        priced = choice is not None
        usable = bool(fits and priced and deadline_ok is not False and budget_ok is not False)
        rows.append(CompareRow(plan, gpu.name, setup.gpus, mode, choice.provider if choice else None, usable,
                               _row_reason(plan, priced)))
    return rows


def _unusable_row(request: PlanRequest, gpu: GpuSpec, setup: TrainSetup, memory: MemoryBreakdown,
                  fits: bool, reason: str) -> CompareRow:
    zero = Throughput(0.0, 0.0, reason)
    runtime = Runtime(math.inf, math.inf, setup.effective_batch, 0, 0.0, 0.0)
    plan = Plan(request, gpu, setup, memory, gpu.memory_gib, fits, zero, runtime,
                None, None, None, None, None, (reason,))
    return CompareRow(plan, gpu.name, setup.gpus, request.pricing_mode, None, False, reason)


def _sort_key(row: CompareRow) -> tuple[bool, float, float]:
    cost = row.cost_usd
    return (not row.usable, cost if cost is not None and math.isfinite(cost) else math.inf, row.hours)


def rank_rows(rows: Sequence[CompareRow]) -> list[CompareRow]:
    """Usable rows first, cheapest (expected cost) first; ties go to the faster option."""
    ordered = sorted(rows, key=_sort_key)
    return [replace(row, rank=index + 1 if row.usable else None) for index, row in enumerate(ordered)]


def recommendation(rows: Sequence[CompareRow]) -> str:
    """The winner in one sentence, with what makes it win."""
    usable = [row for row in rows if row.usable]
    if not usable:
        if not any(row.plan.fits for row in rows):
            return "No option fits in memory: see the suggestions of `gpuplanner plan` for what would make it fit."
        return "No option meets every constraint: relax the deadline or the budget, or see the reasons per row."
    best = usable[0]
    cost = best.cost_usd or 0.0
    text = (f"{best.gpus} x {best.gpu} {best.pricing} at {best.provider}: ${cost:,.2f} in {best.hours:,.1f} h")
    if len(usable) > 1:
        runner = usable[1]
        other = runner.cost_usd or 0.0
        text += (f", ${other - cost:,.2f} cheaper than the next option ({runner.gpus} x {runner.gpu} "
                 f"{runner.pricing}, {runner.hours:,.1f} h)")
    constraints = [c for c, v in (("the deadline", best.plan.request.deadline_hours),
                                  ("the budget", best.plan.request.budget_usd)) if v is not None]
    if constraints:
        text += " while meeting " + " and ".join(constraints)
    return text + "."


# ----------------------------------------------------------------------------------- JSON


def _num(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def plan_document(plan: Plan, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The stable JSON document of one plan (names documented in the README)."""
    memory = {key: _num(value) for key, value in plan.memory.as_gib().items()}
    memory.update({
        "capacity_gib": _num(plan.capacity_gib),
        "fits": plan.fits,
        "headroom": plan.request.headroom,
        "peak_moment": plan.memory.peak_moment,
        "source": plan.memory.source,
        "max_micro_batch": plan.max_micro_batch,
        "suggestions": list(plan.suggestions),
    })
    on_demand = None
    if plan.on_demand is not None:
        on_demand = {"hours": _num(plan.runtime.hours), "cost_usd": _num(plan.on_demand_cost_usd, 2),
                     **_price_fields(plan.on_demand)}
    spot = None
    if plan.spot is not None:
        estimate = plan.spot.estimate
        spot = {
            "hours": _num(estimate.hours),
            "cost_usd": _num(plan.spot.cost_usd, 2),
            "expected_interruptions": _num(estimate.expected_interruptions),
            "overhead_hours": _num(estimate.overhead_hours),
            "checkpoint_hours": _num(estimate.checkpoint_hours),
            "restart_hours": _num(estimate.restart_hours),
            "lost_work_hours": _num(estimate.lost_work_hours),
            "savings_pct": _num(plan.spot.savings_pct, 2),
            "p50_hours": _num(estimate.p50_hours),
            "p90_hours": _num(estimate.p90_hours),
            "p50_cost_usd": _num(plan.spot.p50_cost_usd, 2),
            "p90_cost_usd": _num(plan.spot.p90_cost_usd, 2),
            "p_meet_deadline": _num(estimate.p_meet_deadline),
            "model": estimate.model,
            **_price_fields(plan.spot.price),
        }
    return {
        "inputs": dict(inputs),
        "memory": memory,
        "throughput": {
            "tokens_per_s": _num(plan.throughput.tokens_per_s, 2),
            "samples_per_min": _num(plan.throughput.samples_per_min, 3),
            "source": plan.throughput.source,
            "mfu": plan.throughput.mfu,
            "scaling_efficiency": _num(plan.throughput.scaling_efficiency),
        },
        "runtime": {
            "hours": _num(plan.runtime.hours),
            "gpu_hours": _num(plan.runtime.gpu_hours),
            "effective_batch": plan.runtime.effective_batch,
            "optimizer_steps": plan.runtime.optimizer_steps,
            "tokens": _num(plan.runtime.total_tokens, 0),
            "samples": _num(plan.runtime.total_samples, 1),
        },
        "on_demand": on_demand,
        "spot": spot,
        "deadline_ok": plan.deadline_ok,
        "budget_ok": plan.budget_ok,
        "warnings": list(plan.warnings),
    }


def _price_fields(choice: PriceChoice) -> dict[str, Any]:
    return {"price_per_gpu_hour": choice.usd_per_gpu_hour, "billed_gpus": choice.billed_gpus,
            "provider": choice.provider, "region": choice.region, "instance_type": choice.instance_type}


def compare_document(row: CompareRow, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """One row of `compare --json`: the plan document plus gpu, gpus, provider, pricing and the verdict."""
    document = plan_document(row.plan, inputs)
    document.update({
        "gpu": row.gpu,
        "gpus": row.gpus,
        "provider": row.provider,
        "pricing": row.pricing,
        "rank": row.rank,
        "usable": row.usable,
        "reason": row.reason,
        "hours": _num(row.hours),
        "cost_usd": _num(row.cost_usd, 2),
        "p90_cost_usd": _num(row.p90_cost_usd, 2),
        "meets_deadline": row.plan.deadline_ok,
        "within_budget": row.plan.budget_ok,
    })
    return document
