"""One plan for one GPU option.

This module ties the engine together: memory (does it fit), throughput (how fast), runtime (how
long), price (on-demand and spot) and the deadline and budget checks. The results are plain
dataclasses; :mod:`gpuplanner.plan.compare` ranks every catalog option and
:mod:`gpuplanner.plan.documents` turns results into the stable JSON documents. The request and result
types live in :mod:`gpuplanner.plan.plan_request` and are re-exported here for their many callers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from gpuplanner.plan.catalog import Catalog, GpuSpec, PriceOffer, catalog_gpu, precision_for
from gpuplanner.plan.memory import MemoryBreakdown, estimate_memory, trainable_params
from gpuplanner.plan.memory_fit import fit_suggestions, max_micro_batch
from gpuplanner.plan.plan_request import (
    DEFAULT_GPU,
    DEFAULT_HEADROOM,
    GIB,
    MEMORY_SOURCES,
    PRICINGS,
    MeasuredSpeed,
    Plan,
    PlanRequest,
    PriceChoice,
    PricingInputs,
    SpotResult,
)
from gpuplanner.plan.price_dates import STALE_AFTER_DAYS, age_days, oldest, stale_warning
from gpuplanner.plan.runtime import Runtime, estimate_runtime
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.speed_fit import efficiency_scale
from gpuplanner.plan.speed_params import load_speed_model
from gpuplanner.plan.spot import SpotTerms, estimate_spot
from gpuplanner.plan.step_model import GPUS_PER_NODE
from gpuplanner.plan.storage_cost import with_bill_budget
from gpuplanner.plan.throughput import Throughput, estimate_throughput, measured_throughput
from gpuplanner.plan.trace import TraceUnavailable, trace_memory

# The request and result types are re-exported: most callers import them from here.
__all__ = [
    "CHECKPOINT_WRITE_GB_PER_S",
    "DEFAULT_GPU",
    "DEFAULT_HEADROOM",
    "FALLBACK_INTERRUPTIONS_PER_HOUR",
    "GIB",
    "LOW_SCALING_EFFICIENCY",
    "MEMORY_SOURCES",
    "MeasuredSpeed",
    "PRICINGS",
    "Plan",
    "PlanRequest",
    "PriceChoice",
    "PricingInputs",
    "SpotResult",
    "cheapest_offer",
    "checked_gpu_hours",
    "checkpoint_write_seconds",
    "choose_prices",
    "deadline_budget",
    "gpu_hours_verdict",
    "make_plan",
    "option_spot",
    "option_warnings",
    "plan_throughput",
    "spot_result",
    "spot_terms",
]

# Assumed rate for spot offers whose provider publishes none (about one interruption a day).
FALLBACK_INTERRUPTIONS_PER_HOUR = 0.05
# Sustained write speed of a checkpoint to local NVMe through torch.save / safetensors.
CHECKPOINT_WRITE_GB_PER_S = 1.0
# Below this multi-GPU scaling efficiency a plan warns that communication dominates.
LOW_SCALING_EFFICIENCY = 0.5


def _offer_choice(offer: PriceOffer, gpus: int, spot: bool) -> PriceChoice | None:
    """Price of running ``gpus`` GPUs on an offer: one instance (billed for all its GPUs), or, beyond
    one node, whole full-size nodes (``GPUS_PER_NODE`` GPUs each) joined by the network."""
    nodes = 1
    if offer.gpu_count < gpus:
        if offer.gpu_count != GPUS_PER_NODE or gpus % GPUS_PER_NODE:
            return None
        nodes = gpus // GPUS_PER_NODE
    price = offer.spot_usd if spot else offer.on_demand_usd
    if price is None:
        return None
    return PriceChoice(
        price,
        offer.gpu_count * nodes,
        offer.provider,
        offer.region,
        offer.instance_type if nodes == 1 else f"{nodes} x {offer.instance_type}",
        offer.interruptions_per_hour if spot else None,
        offer.notice_s if spot else None,
        offer.as_of,
        offer.source,
        offer.interruptions_basis if spot else "",
    )


def cheapest_offer(offers: Sequence[PriceOffer], gpus: int, spot: bool) -> PriceChoice | None:
    """The offer that runs ``gpus`` GPUs for the least money per hour (whole instances are billed)."""
    best: PriceChoice | None = None
    for offer in offers:
        choice = _offer_choice(offer, gpus, spot)
        if choice and (best is None or choice.usd_per_instance_hour < best.usd_per_instance_hour):
            best = choice
    return best


def _given_price(
    request: PlanRequest, gpus: int, spot_like: PriceChoice | None
) -> tuple[PriceChoice, PriceChoice | None]:
    """On-demand and spot prices from the user's own figures (``--price`` and friends)."""
    pricing = request.pricing
    assert pricing.price is not None
    on_demand = PriceChoice(pricing.price, gpus, "given", "", "", source="given (--price)")
    spot_price = pricing.spot_price
    if spot_price is None and pricing.spot_discount is not None:
        spot_price = pricing.price * (1.0 - pricing.spot_discount)
    if spot_price is None:
        return on_demand, None
    rate = spot_like.interruptions_per_hour if spot_like else None
    notice = spot_like.notice_s if spot_like else None
    basis = spot_like.interruptions_source if spot_like else ""
    return on_demand, PriceChoice(spot_price, gpus, "given", "", "", rate, notice, "", "given", basis)


def choose_prices(
    request: PlanRequest, offers: Sequence[PriceOffer], gpus: int
) -> tuple[PriceChoice | None, PriceChoice | None]:
    """On-demand and spot prices for ``gpus`` GPUs: the user's figures first, else the cheapest offers."""
    pricing = request.pricing
    catalog_spot = cheapest_offer(offers, gpus, spot=True)
    if pricing.price is not None:
        return _given_price(request, gpus, catalog_spot)
    on_demand = cheapest_offer(offers, gpus, spot=False)
    spot = catalog_spot
    if pricing.spot_price is not None or pricing.spot_discount is not None:
        if on_demand is not None:
            price = (
                pricing.spot_price
                if pricing.spot_price is not None
                else on_demand.usd_per_gpu_hour * (1.0 - (pricing.spot_discount or 0.0))
            )
            spot = replace(
                on_demand,
                usd_per_gpu_hour=price,
                interruptions_per_hour=catalog_spot.interruptions_per_hour if catalog_spot else None,
                notice_s=catalog_spot.notice_s if catalog_spot else None,
                source=f"given ({'--spot-price' if pricing.spot_price is not None else '--spot-discount'})",
                interruptions_source=catalog_spot.interruptions_source if catalog_spot else "",
            )
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
            "(set --interruptions-per-hour or --mean-hours-between-interruptions)"
        )
    return SpotTerms(
        interruptions_per_hour=rate or 0.0,
        restart_hours=pricing.restart_minutes / 60.0,
        checkpoint_interval_hours=pricing.checkpoint_minutes / 60.0,
        checkpoint_write_hours=(pricing.checkpoint_write_s if pricing.checkpoint_write_s is not None else write_s)
        / 3600.0,
        notice_s=spot.notice_s,
        overhead_pct=pricing.spot_overhead_pct,
    )


def spot_result(
    request: PlanRequest,
    spot: PriceChoice,
    runtime: Runtime,
    write_s: float,
    on_demand_cost: float | None,
    warnings: list[str],
) -> SpotResult:
    """Expected spot hours and cost (with P50/P90) for a run of ``runtime`` at the ``spot`` price."""
    terms = spot_terms(request, spot, write_s, warnings)
    estimate = estimate_spot(runtime.hours, terms, request.deadline_hours)
    rate = spot.usd_per_instance_hour
    cost = estimate.hours * rate
    savings = None
    if on_demand_cost and math.isfinite(cost):
        savings = (1.0 - cost / on_demand_cost) * 100.0
    if not estimate.finishes:
        warnings.append(
            "spot: interruptions come faster than checkpoints; the run would never finish "
            "(checkpoint more often with --checkpoint-minutes)"
        )
    return SpotResult(estimate, spot, cost, estimate.p50_hours * rate, estimate.p90_hours * rate, savings, terms)


# ----------------------------------------------------------------------------------- plan


def plan_throughput(
    request: PlanRequest, setup: TrainSetup, gpu: GpuSpec | None, trainable: int, allow_measured: bool
) -> Throughput:
    """The speed a plan uses, most trusted first: the user's measured figure (exact), a speed measured in
    the history on this GPU, the step model corrected by speeds measured on other GPUs, the step model."""
    if allow_measured and (request.tokens_per_s is not None or request.samples_per_min is not None):
        return measured_throughput(setup, request.tokens_per_s, request.samples_per_min)
    if gpu is None:
        raise PlanInputError("gpu", "without a GPU the speed must be given: add --tokens-per-s or --samples-per-min")
    speed_model = load_speed_model()
    measured = request.measured.get(gpu.name)
    if measured is not None and not measured.matches(setup):
        measured = None  # measured at other settings: a correction of the model, below
    if measured is None and request.measured and request.mfu is None:
        return _transferred_throughput(request, setup, gpu, trainable)
    estimate = estimate_throughput(request.model, setup, gpu, trainable, request.mfu)
    if measured is None:
        return estimate
    tokens_s = measured.tokens_per_s_per_gpu * setup.gpus * estimate.scaling_efficiency
    source = f"calibrated: {measured.source}"
    if setup.gpus > 1:
        source += f", scaling efficiency {estimate.scaling_efficiency:.0%} over {setup.gpus} GPUs"
    return Throughput(
        tokens_s,
        tokens_s / setup.seq_len * 60.0,
        source,
        None,
        estimate.flops_per_token,
        estimate.scaling_efficiency,
        uncertainty_pct=speed_model.matched_pct,
    )


def _transferred_throughput(request: PlanRequest, setup: TrainSetup, gpu: GpuSpec, trainable: int) -> Throughput:
    """The step model with its matmul efficiency corrected by speeds measured for this model on other GPUs
    or at other settings (sequence length, micro-batch: ``MeasuredSpeed.seq_len``/``micro_batch``).

    Each measurement is compared with what the model predicts for one GPU of that type at the settings
    it was measured at, and the geometric mean of the corrections applies here, with a wider range
    than a speed measured on this very GPU at these settings.
    """
    speed_model = load_speed_model()
    rows = []
    names = []
    for measured in request.measured.values():
        other = catalog_gpu(measured.gpu)
        if other is None:
            continue
        at = replace(
            setup,
            gpus=1,
            seq_len=measured.seq_len or setup.seq_len,
            micro_batch=measured.micro_batch or setup.micro_batch,
        )
        rows.append((request.model, at, other, trainable, measured.tokens_per_s_per_gpu, measured.source))
        names.append(other.name if measured.seq_len is None else f"{other.name} (sequence {measured.seq_len})")
    if not rows:
        return estimate_throughput(request.model, setup, gpu, trainable)
    scale = efficiency_scale(rows, speed_model)
    estimate = estimate_throughput(
        request.model,
        setup,
        gpu,
        trainable,
        efficiency_scale=scale,
        uncertainty_pct=speed_model.calibrated_pct,
    )
    source = f"calibrated from speeds measured on {', '.join(sorted(set(names)))} (efficiency x{scale:.2f}); " + (
        estimate.source.removeprefix("estimate: ")
    )
    return replace(estimate, source=source)


def deadline_budget(
    request: PlanRequest, runtime: Runtime, on_demand_cost: float | None, spot: SpotResult | None
) -> tuple[bool | None, bool | None]:
    """Deadline and budget verdicts under the request's pricing (spot: its P90); None when not set."""
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


def checked_gpu_hours(request: PlanRequest, runtime: Runtime, spot: SpotResult | None, gpus: int) -> float | None:
    """The GPU-hours the cap check uses: the GPUs the run trains on x its hours under the request's
    pricing (spot: the P90 hours, like the budget check); None on spot without a spot estimate. Idle GPUs
    of a larger rented instance are paid for (the budget) but not counted here."""
    if request.pricing_mode == "spot":
        return None if spot is None else spot.estimate.p90_hours * gpus
    return runtime.hours * gpus


def gpu_hours_verdict(request: PlanRequest, runtime: Runtime, spot: SpotResult | None, gpus: int) -> bool | None:
    """Whether the run stays within ``max_gpu_hours`` (None when no cap is set; False when unknown)."""
    if request.max_gpu_hours is None:
        return None
    hours = checked_gpu_hours(request, runtime, spot, gpus)
    return hours is not None and math.isfinite(hours) and hours <= request.max_gpu_hours


def _memory_warnings(memory: MemoryBreakdown, capacity: float | None, headroom: float, setup: TrainSetup) -> list[str]:
    warnings = []
    if capacity is not None and memory.total / GIB > capacity * headroom:
        warnings.append(
            f"does not fit: needs {memory.total / GIB:.1f} GiB per GPU, "
            f"{capacity:.1f} GiB x {headroom:.0%} headroom = {capacity * headroom:.1f} GiB usable"
        )
    if setup.precision == "fp16-mixed":
        warnings.append("fp16 mixed precision needs loss scaling and can overflow; prefer bf16 where the GPU has it")
    return warnings


def option_spot(
    request: PlanRequest,
    setup: TrainSetup,
    memory: MemoryBreakdown,
    trainable: int,
    runtime: Runtime,
    on_demand: PriceChoice | None,
    spot_price: PriceChoice | None,
    warnings: list[str],
) -> SpotResult | None:
    """One option's spot estimate: at the spot price, or with a flat ``spot_overhead_pct`` at the on-demand
    price; None without either (spot's own warnings are added to ``warnings``)."""
    if spot_price is None and request.pricing.spot_overhead_pct is None:
        return None
    choice = spot_price or on_demand
    if choice is None:
        return None
    on_demand_cost = on_demand.usd_per_instance_hour * runtime.hours if on_demand else None
    write_s = checkpoint_write_seconds(memory, setup, trainable)
    return spot_result(request, choice, runtime, write_s, on_demand_cost, warnings)


# A run this long is a pre-training-sized job: its steady state leaves out what whole runs lose.
LONG_RUN_GPU_HOURS = 10_000.0


def long_run_warning(request: PlanRequest, runtime: Runtime) -> list[str]:
    """The hint that a long run's plan is its steady state only, unless the user gave the whole-run overhead."""
    if request.run_overhead_pct is not None or runtime.gpu_hours < LONG_RUN_GPU_HOURS:
        return []
    return [
        f"{runtime.gpu_hours:,.0f} GPU-hours of steady-state training: a whole run also restarts, evaluates, "
        "checkpoints and waits on stragglers (Meta lost about 10% of Llama 3's time); give --run-overhead-pct "
        "to plan the whole run"
    ]


def option_warnings(
    request: PlanRequest,
    gpu: GpuSpec | None,
    setup: TrainSetup,
    memory: MemoryBreakdown,
    throughput: Throughput,
    on_demand: PriceChoice | None,
    spot_price: PriceChoice | None,
) -> list[str]:
    """The warnings of one GPU option once its memory, speed and prices are known: the one list
    :func:`make_plan` and every row of :func:`gpuplanner.plan.compare.compare` give (the GPU's missing bf16
    and spot's own warnings are added where those are worked out)."""
    warnings: list[str] = [request.model.reading_note] if request.model.reading_note else []
    if gpu is not None and setup.tf32 and not gpu.tflops.get("tf32"):
        warnings.append(f"{gpu.name} has no TF32 tensor cores: fp32 matmuls run at the plain fp32 rate")
    warnings += _memory_warnings(memory, gpu.memory_gib if gpu else None, request.headroom, setup)
    note = load_speed_model().unfitted_note(gpu) if gpu is not None and throughput.step is not None else ""
    if note:
        warnings.append(f"{note}; measure a run (trainer bench) to calibrate it")
    if throughput.scaling_efficiency < LOW_SCALING_EFFICIENCY:
        warnings.append(
            f"communication dominates: {setup.gpus} GPUs reach only {throughput.scaling_efficiency:.0%} "
            "scaling efficiency; raise --grad-accum or the micro-batch, or use fewer GPUs"
        )
    dated = [c for c in (on_demand, spot_price) if c is not None and c.as_of]
    stale_as_of = oldest(c.as_of for c in dated)
    stale = stale_warning(
        stale_as_of, providers=(c.provider for c in dated if (age_days(c.as_of) or 0) > STALE_AFTER_DAYS)
    )
    if stale:
        warnings.append(stale)
    if on_demand is None:
        multi = f" (beyond one node: whole {GPUS_PER_NODE}-GPU nodes)" if setup.gpus > GPUS_PER_NODE else ""
        warnings.append(f"no catalog offer has {setup.gpus} x {gpu.name if gpu else 'this GPU'}{multi}: give --price")
    if on_demand and on_demand.billed_gpus > setup.gpus:
        warnings.append(
            f"the cheapest instance ({on_demand.provider} {on_demand.instance_type}) has "
            f"{on_demand.billed_gpus} GPUs: you pay for all of them"
        )
    if spot_price is None and request.pricing.spot_overhead_pct is None:
        warnings.append("no spot price known: give --spot-price or --spot-discount to see spot")
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
    if gpu is not None:
        precision, note = precision_for(gpu, setup.precision)
        if note:
            setup = replace(setup, precision=precision)
            warnings.append(note)
    memory = _plan_memory(request, setup, warnings)
    trainable = trainable_params(request.model, setup)
    capacity = gpu.memory_gib if gpu else None
    fits = None if capacity is None else memory.total / GIB <= capacity * request.headroom
    throughput = plan_throughput(request, setup, gpu, trainable, allow_measured=True)
    runtime = estimate_runtime(request.workload, throughput, setup, request.run_overhead_pct)
    offers = catalog.offers_for(gpu.name) if (catalog is not None and gpu is not None) else ()
    on_demand, spot_price = choose_prices(request, offers, setup.gpus)
    warnings += option_warnings(request, gpu, setup, memory, throughput, on_demand, spot_price)
    warnings += long_run_warning(request, runtime)
    on_demand_cost = on_demand.usd_per_instance_hour * runtime.hours if on_demand else None
    spot = option_spot(request, setup, memory, trainable, runtime, on_demand, spot_price, warnings)
    deadline_ok, budget_ok = deadline_budget(request, runtime, on_demand_cost, spot)
    suggestions: tuple[str, ...] = ()
    largest_batch = None
    if capacity is not None:
        largest_batch = max_micro_batch(request.model, setup, capacity, request.headroom)
        if suggest and not fits:
            suggestions = tuple(
                fit_suggestions(request.model, setup, capacity, request.headroom, _larger_gpus(catalog, capacity))
            )
    plan = Plan(
        request,
        gpu,
        setup,
        memory,
        capacity,
        fits,
        throughput,
        runtime,
        on_demand,
        on_demand_cost,
        spot,
        deadline_ok,
        budget_ok,
        tuple(warnings),
        suggestions,
        largest_batch,
        gpu_hours_verdict(request, runtime, spot, setup.gpus),
    )
    return with_bill_budget(plan)  # with a dataset size the budget counts storage and transfer too
