"""The stable JSON documents of a plan (`gpuplanner plan --json`) and of a comparison row."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.planner import Plan, PriceChoice


def _num(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


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
    else:
        basis = f"speed model: +/-{pct:g}% typical error on published runs it was not fitted on"
    if plan.request.pricing_mode == "spot" and plan.spot is not None:
        basis += ", with simulated spot interruptions"
    return basis + " (P10-P90)"


def plan_document(plan: Plan, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The stable JSON document of one plan (names documented in the README)."""
    memory = {key: _num(value) for key, value in plan.memory.as_gib().items()}
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
            **_price_fields(plan.on_demand),
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
            **_price_fields(plan.spot.price),
        }
    return {
        "inputs": dict(inputs),
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
        "warnings": list(plan.warnings),
    }


def _price_fields(choice: PriceChoice) -> dict[str, Any]:
    return {
        "price_per_gpu_hour": choice.usd_per_gpu_hour,
        "billed_gpus": choice.billed_gpus,
        "provider": choice.provider,
        "region": choice.region,
        "instance_type": choice.instance_type,
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
            "fitted_settings": list(row.fitted),
        }
    )
    return document
