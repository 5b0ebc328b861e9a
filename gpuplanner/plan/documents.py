"""The stable JSON documents of a plan (`gpuplanner plan --json`) and of a comparison row."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import Any

from gpuplanner.export.human import human_gpus, round_for_people
from gpuplanner.plan import engines
from gpuplanner.plan.catalog import ASSUMED
from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.planner import FALLBACK_INTERRUPTIONS_PER_HOUR, Plan, PriceChoice
from gpuplanner.plan.price_dates import STALE_AFTER_DAYS, OfferAges, age_days, describe_age, offer_ages, oldest
from gpuplanner.plan.storage_cost import bill_document, plan_bill


def _num(value: float | None, digits: int = 4) -> float | None:
    """``digits`` decimals; a tiny value keeps 3 significant figures (a $0.0000385 run is not free)."""
    if value is None or not math.isfinite(value):
        return None
    return round_for_people(float(value), digits)


def _range(values: tuple[float, float] | None, digits: int = 4) -> list[float | None] | None:
    if values is None:
        return None
    return [_num(values[0], digits), _num(values[1], digits)]


def _step_document(plan: Plan) -> dict[str, Any] | None:
    """The parts of one optimizer step on one GPU (step-model estimates only)."""
    step = plan.throughput.step
    if step is None:
        return None
    return {
        "compute_s": _num(step.compute_s, 6),
        "recompute_s": _num(step.recompute_s, 6),
        "memory_s": _num(step.memory_s, 6),
        "communication_s": _num(step.communication_s, 6),
        "overhead_s": _num(step.overhead_s, 6),
        "step_s": _num(step.step_s, 6),
        "tokens_per_gpu": _num(step.tokens, 0),
    }


def range_basis(plan: Plan) -> str:
    """What a plan's likely range stands for, in words."""
    pct = plan.throughput.uncertainty_pct
    source = plan.throughput.source
    if not pct:
        basis = "speed measured: exact"
    elif source.startswith("calibrated from"):
        basis = f"speed calibrated on other GPUs: +/-{pct:g}% typical error"
    elif source.startswith("calibrated"):
        basis = f"speed measured on this GPU: +/-{pct:g}% typical error"
    elif source.startswith("estimate:") and " step model" in source:
        regime = engines.speed_regime(plan.request.setup.engine, plan.request.setup.method)
        basis = (
            f"speed model ({regime} on {plan.request.setup.engine}): +/-{pct:g}% typical error, the range "
            "that held 80% of such published runs it was not fitted on"
        )
    else:
        basis = f"speed model: +/-{pct:g}% typical error on published runs it was not fitted on"
    if plan.request.pricing_mode == "spot" and plan.spot is not None:
        basis += ", with simulated spot interruptions"
    return basis + " (P10-P90)"


def plan_document(plan: Plan, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The stable JSON document of one plan (names documented in docs/json.md)."""
    memory: dict[str, Any] = {key: _num(value) for key, value in plan.memory.as_gib().items()}
    memory.update(
        {
            "capacity_gib": _num(plan.capacity_gib),
            "fits": plan.fits,
            "headroom": plan.request.headroom,
            "peak_moment": plan.memory.peak_moment,
            "source": plan.memory.source,
            "max_micro_batch": plan.max_micro_batch,
            "suggestions": list(plan.suggestions),
        }
    )
    on_demand = None
    if plan.on_demand is not None:
        on_demand = {
            "hours": _num(plan.runtime.hours),
            "cost_usd": _num(plan.on_demand_cost_usd, 2),
            "hours_range": _range(plan.on_demand_hours_range),
            "cost_range": _range(plan.on_demand_cost_range, 2),
            **_price_fields(plan.on_demand, plan.setup.gpus),
        }
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
            "hours_range": _range(plan.spot_hours_range),
            "cost_range": _range(plan.spot_cost_range, 2),
            **_price_fields(plan.spot.price, plan.setup.gpus),
            **_spot_rate(plan),
        }
    prices_as_of = plan_prices_as_of(plan)
    return {
        "inputs": dict(inputs),
        "prices_as_of": prices_as_of,
        "prices_age_days": age_days(prices_as_of) if prices_as_of else None,
        "prices_stale": _stale(prices_as_of),
        "memory": memory,
        "throughput": {
            "tokens_per_s": _num(plan.throughput.tokens_per_s, 2),
            "samples_per_min": _num(plan.throughput.samples_per_min, 3),
            "source": plan.throughput.source,
            "mfu": _num(plan.throughput.mfu) if plan.throughput.mfu is not None else None,
            "hfu": _num(plan.throughput.hfu) if plan.throughput.hfu is not None else None,
            "scaling_efficiency": _num(plan.throughput.scaling_efficiency),
            "uncertainty_pct": _num(plan.throughput.uncertainty_pct, 2),
            "step": _step_document(plan),
        },
        "runtime": {
            "hours": _num(plan.runtime.hours),
            "steady_state_hours": _num(plan.runtime.steady_hours),
            "run_overhead_hours": _num(plan.runtime.overhead_hours),
            "gpu_hours": _num(plan.runtime.gpu_hours),
            "effective_batch": plan.runtime.effective_batch,
            "optimizer_steps": plan.runtime.optimizer_steps,
            "tokens": _num(plan.runtime.total_tokens, 0),
            "samples": _num(plan.runtime.total_samples, 1),
        },
        "on_demand": on_demand,
        "spot": spot,
        "hours_range": _range(plan.hours_range),
        "cost_range": _range(plan.cost_range, 2),
        "range_basis": range_basis(plan),
        "deadline_ok": plan.deadline_ok,
        "budget_ok": plan.budget_ok,
        "gpu_hours_ok": plan.gpu_hours_ok,
        "warnings": list(plan.warnings),
        **_bill_part(plan),
    }


def _bill_part(plan: Plan) -> dict[str, Any]:
    """``bill``: compute, storage and transfer (plan/storage_cost.py), only when a dataset size was given."""
    bill = plan_bill(plan)
    return {} if bill is None else {"bill": bill_document(bill)}


def plan_prices_as_of(plan: Plan) -> str | None:
    """The date of the oldest catalog price a plan uses (None when it uses only prices the user gave)."""
    choices = [plan.on_demand, plan.spot.price if plan.spot else None]
    return oldest(c.as_of for c in choices if c is not None)


def prices_note(plan: Plan) -> str:
    """One line for reports and the window: the prices' date and age, and each price's source, e.g.
    ``Prices as of 2025-06-15 (526 days old). On-demand: runpod secure 1x H100 SXM (RunPod GPU Cloud pricing,
    2025-06-15); spot: ...``."""
    parts = []
    for label, choice in (("on-demand", plan.on_demand), ("spot", plan.spot.price if plan.spot else None)):
        if choice is None:
            continue
        if choice.provider == "given":
            parts.append(f"{label}: {choice.source or 'given'}")
        else:
            parts.append(f"{label}: {choice.provider} {choice.instance_type} ({choice.source}, {choice.as_of})")
    head = describe_age(plan_prices_as_of(plan)).capitalize()
    if not parts:
        return head
    text = "; ".join(parts)
    return f"{head}. {text[0].upper()}{text[1:]}"


def rows_offer_ages(rows: list[CompareRow], on: _dt.date | None = None) -> OfferAges:
    """How old the distinct catalog offers a comparison's rows use are (:func:`offer_ages`)."""
    seen: dict[tuple[str, str, str, str], str] = {}
    for row in rows:
        for choice in (row.plan.on_demand, row.plan.spot.price if row.plan.spot else None):
            if choice is not None and choice.as_of:
                seen[(choice.provider, choice.region, choice.instance_type, choice.as_of)] = choice.as_of
    return offer_ages(((key[0], as_of) for key, as_of in seen.items()), on)


def rows_prices_as_of(rows: list[CompareRow]) -> str | None:
    """The date of the oldest catalog price any row of a comparison uses."""
    return oldest(plan_prices_as_of(row.plan) for row in rows)


def _stale(as_of: str | None) -> bool | None:
    days = age_days(as_of) if as_of else None
    return None if days is None else days > STALE_AFTER_DAYS


def _spot_rate(plan: Plan) -> dict[str, Any]:
    """The interruption rate a spot plan used and what it rests on: the user's flag, the offer's source,
    or ``assumed`` (the planner's default rate)."""
    pricing = plan.request.pricing
    if pricing.spot_overhead_pct is not None and pricing.interruptions_per_hour is None:
        return {"interruptions_per_hour": None, "interruptions_source": "flat overhead (--spot-overhead-pct)"}
    if pricing.interruptions_per_hour is not None:
        return {"interruptions_per_hour": pricing.interruptions_per_hour, "interruptions_source": "given"}
    assert plan.spot is not None
    choice = plan.spot.price
    if choice.interruptions_per_hour is None:
        return {"interruptions_per_hour": FALLBACK_INTERRUPTIONS_PER_HOUR, "interruptions_source": ASSUMED}
    return {
        "interruptions_per_hour": choice.interruptions_per_hour,
        "interruptions_source": choice.interruptions_source or choice.source or ASSUMED,
    }


def rental_note(choice: PriceChoice, gpus: int) -> str:
    """What is rented, in words: ``1 x p5.48xlarge (8 GPUs)``, with ``whole instance, 6 GPUs idle`` where the
    run uses fewer GPUs than the instance holds."""
    if choice.provider == "given":
        return f"{human_gpus(gpus)} at your price"
    what = f"1 x {choice.instance_type} ({choice.billed_gpus} GPU{'s' if choice.billed_gpus != 1 else ''})"
    idle = choice.billed_gpus - gpus
    return what + (f", billed as a whole instance: {idle} GPU{'s' if idle != 1 else ''} idle" if idle > 0 else "")


def _price_fields(choice: PriceChoice, gpus: int) -> dict[str, Any]:
    """What is rented and what it costs: one instance of ``instance_type`` with ``billed_gpus`` GPUs."""
    given = choice.provider == "given"
    return {
        "price_per_gpu_hour": choice.usd_per_gpu_hour,
        "price_per_instance_hour": _num(choice.usd_per_instance_hour, 6),
        "billed_gpus": choice.billed_gpus,
        "gpus_per_instance": choice.billed_gpus,
        "provider": choice.provider,
        "region": choice.region or ("" if given else "any"),
        "instance_type": choice.instance_type,
        "idle_gpus": max(0, choice.billed_gpus - gpus),
        "rents": rental_note(choice, gpus),
        "as_of": choice.as_of or None,
        "source": choice.source,
    }


def compare_document(row: CompareRow, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """One row of `compare --json`: the plan document plus gpu, gpus, provider, pricing and the verdict."""
    document = plan_document(row.plan, inputs)
    document.update(
        {
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
            "within_gpu_hours": row.plan.gpu_hours_ok,
            "fitted_settings": list(row.fitted),
        }
    )
    if "bill" in document:
        document["total_usd"] = _num(row.total_usd, 2)
    return document
