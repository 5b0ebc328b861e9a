"""The planner end to end on the shipped catalog: prices, spot, deadline/budget, ranking, JSON names."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner.plan.catalog import Catalog, PriceOffer, load_catalog
from gpuplanner.plan.compare import compare, recommendation
from gpuplanner.plan.documents import compare_document, plan_document
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, PricingInputs, cheapest_offer, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import ATTENTION, CHECKPOINTING, METHODS, OPTIMIZERS, SHARDING, PlanInputError, TrainSetup

CATALOG = load_catalog()
GPT2 = from_preset("gpt2")
LLAMA_8B = from_preset("llama-3.1-8b")
PLAN_KEYS = {"inputs", "memory", "throughput", "runtime", "on_demand", "spot", "deadline_ok", "budget_ok", "warnings"}
MEMORY_KEYS = {
    "weights_gib",
    "gradients_gib",
    "optimizer_gib",
    "activations_gib",
    "logits_gib",
    "overhead_gib",
    "total_gib",
    "capacity_gib",
    "fits",
}
SPOT_KEYS = {
    "hours",
    "cost_usd",
    "expected_interruptions",
    "overhead_hours",
    "savings_pct",
    "p50_cost_usd",
    "p90_cost_usd",
    "p_meet_deadline",
}


def offer(provider: str, count: int, price: float, spot: float | None = None) -> PriceOffer:
    return PriceOffer(provider, "r", "H100 SXM", count, f"{count}x", price, spot, 0.1, 30.0, "2026-11-01", "test")


def test_direct_case_without_the_catalog() -> None:
    # 1M samples at 1,000 samples/min on 4 GPUs at $2/GPU-hour: 16.67 h, 66.67 GPU-hours, $133.33.
    request = PlanRequest(
        GPT2,
        TrainSetup(gpus=4, seq_len=512),
        Workload(samples=1_000_000),
        gpu=None,
        pricing=PricingInputs(price=2.0, spot_discount=0.6, spot_overhead_pct=10.0),
        samples_per_min=1000.0,
        deadline_hours=18.0,
        budget_usd=100.0,
    )
    plan = make_plan(request, CATALOG)
    document = plan_document(plan, {})
    assert document["runtime"]["hours"] == pytest.approx(1_000_000 / 1000 / 60, rel=1e-4)
    assert document["runtime"]["gpu_hours"] == pytest.approx(4 * 1_000_000 / 1000 / 60, rel=1e-4)
    assert document["on_demand"]["cost_usd"] == pytest.approx(133.33, abs=0.01)
    # Spot: 60% cheaper per hour, 10% longer: 0.4 x 1.1 = 44% of the on-demand cost.
    assert document["spot"]["cost_usd"] == pytest.approx(133.33 * 0.44, abs=0.01)
    assert document["spot"]["savings_pct"] == pytest.approx(56.0)
    assert document["spot"]["hours"] == pytest.approx(18.3333, rel=1e-4)
    assert document["deadline_ok"] is True and document["budget_ok"] is False
    assert document["memory"]["capacity_gib"] is None and document["memory"]["fits"] is None
    assert document["throughput"]["source"].startswith("measured")


def test_plan_document_has_the_stable_names() -> None:
    request = PlanRequest(
        LLAMA_8B,
        TrainSetup(method="lora", micro_batch=2, grad_checkpointing="full"),
        Workload(samples=10_000),
        gpu="A100 80GB",
        deadline_hours=10.0,
        budget_usd=500.0,
    )
    document = plan_document(make_plan(request, CATALOG), {"model": "llama-3.1-8b"})
    assert PLAN_KEYS <= set(document)
    assert MEMORY_KEYS <= set(document["memory"])
    assert SPOT_KEYS <= set(document["spot"])
    assert {"tokens_per_s", "samples_per_min", "source"} <= set(document["throughput"])
    assert {"hours", "gpu_hours", "effective_batch"} <= set(document["runtime"])
    assert {"hours", "cost_usd"} <= set(document["on_demand"])
    json.dumps(document, allow_nan=False)
    parts = sum(document["memory"][k] for k in MEMORY_KEYS - {"total_gib", "capacity_gib", "fits"})
    assert parts == pytest.approx(document["memory"]["total_gib"], abs=0.01)


def test_cheapest_offer_bills_whole_instances() -> None:
    offers = [offer("a", 8, 2.0), offer("b", 1, 3.0), offer("c", 2, 2.8)]
    one = cheapest_offer(offers, 1, spot=False)
    assert one is not None and one.provider == "b"  # $3 for one GPU beats $16 for a whole 8-GPU box
    two = cheapest_offer(offers, 2, spot=False)
    assert two is not None and (two.provider, two.billed_gpus) == ("c", 2)
    # beyond one instance: whole 8-GPU nodes (issue 12), never a partial one
    sixteen = cheapest_offer(offers, 16, spot=False)
    assert sixteen is not None and (sixteen.provider, sixteen.billed_gpus) == ("a", 16)
    assert cheapest_offer(offers, 12, spot=False) is None
    assert cheapest_offer(offers, 1, spot=True) is None


def test_spot_discount_applies_to_the_catalog_on_demand_price() -> None:
    base = PlanRequest(GPT2, TrainSetup(seq_len=1024), Workload(samples=100_000), gpu="H100 SXM")
    plan = make_plan(replace(base, pricing=PricingInputs(spot_discount=0.5)), CATALOG)
    assert plan.on_demand is not None and plan.spot is not None
    assert plan.spot.price.usd_per_gpu_hour == pytest.approx(plan.on_demand.usd_per_gpu_hour * 0.5)


def test_a_model_too_big_for_the_gpu_gets_suggestions() -> None:
    request = PlanRequest(
        from_preset("llama-3.2-1b"),
        TrainSetup(method="full", micro_batch=8, seq_len=4096),
        Workload(samples=1000),
        gpu="A100 40GB",
    )
    plan = make_plan(request, CATALOG)
    assert plan.fits is False
    assert plan.suggestions, "a plan that does not fit must say what would"
    assert plan.max_micro_batch is not None and 1 <= plan.max_micro_batch < 8
    assert any("does not fit" in warning for warning in plan.warnings)


def test_compare_ranks_usable_rows_cheapest_first() -> None:
    request = PlanRequest(
        GPT2, TrainSetup(seq_len=1024, micro_batch=8), Workload(samples=200_000), gpu=None, deadline_hours=24.0
    )
    rows = compare(request, CATALOG)
    assert len(rows) == len(CATALOG.gpus) * 4 * 2
    usable = [row for row in rows if row.usable]
    assert usable and [row.rank for row in usable] == list(range(1, len(usable) + 1))
    costs = [row.cost_usd for row in usable]
    assert costs == sorted(costs)
    first_unusable = next(i for i, row in enumerate(rows) if not row.usable)
    assert all(not row.usable for row in rows[first_unusable:])
    assert all(row.reason for row in rows[first_unusable:])
    assert recommendation(rows).startswith(f"{usable[0].gpus} x {usable[0].gpu}")
    document = compare_document(rows[0], {})
    assert {"gpu", "gpus", "provider", "pricing"} <= set(document) and PLAN_KEYS <= set(document)


def test_deadline_and_budget_exclude_options() -> None:
    request = PlanRequest(
        LLAMA_8B,
        TrainSetup(method="lora", grad_checkpointing="full"),
        Workload(samples=100_000),
        gpu=None,
        deadline_hours=2.0,
        budget_usd=300.0,
    )
    rows = compare(request, CATALOG)
    for row in rows:
        if row.usable:
            assert row.plan.deadline_ok and row.plan.budget_ok
            if row.pricing == "spot":
                assert row.plan.spot is not None and row.plan.spot.estimate.p90_hours <= 2.0
    assert any("misses the deadline" in row.reason for row in rows)


def test_bf16_on_a_gpu_without_bf16_plans_fp16_mixed() -> None:
    rows = compare(PlanRequest(GPT2, TrainSetup(precision="bf16-mixed"), Workload(samples=1000), gpu=None), CATALOG)
    t4 = [row for row in rows if row.gpu == "T4"]
    assert t4 and all(row.usable for row in t4 if row.plan.on_demand is not None)
    assert all(row.plan.setup.precision == "fp16-mixed" for row in t4)
    assert all("T4 has no bf16: planned with fp16-mixed" in " ".join(row.plan.warnings) for row in t4)


def test_compare_with_price_needs_a_gpu() -> None:
    with pytest.raises(PlanInputError) as info:
        compare(
            PlanRequest(GPT2, TrainSetup(), Workload(samples=10), gpu=None, pricing=PricingInputs(price=1.0)), CATALOG
        )
    assert info.value.field == "price"


def test_unknown_gpu_names_the_flag() -> None:
    with pytest.raises(PlanInputError) as info:
        make_plan(PlanRequest(GPT2, TrainSetup(), Workload(samples=10), gpu="H900"), CATALOG)
    assert info.value.field == "gpu"


# ----------------------------------------------------------------------------------- properties

setups = st.builds(
    TrainSetup,
    method=st.sampled_from(METHODS),
    lora_rank=st.integers(1, 256),
    precision=st.sampled_from(("bf16-mixed", "bf16", "fp16-mixed")),
    optimizer=st.sampled_from(OPTIMIZERS),
    micro_batch=st.integers(1, 64),
    grad_accum=st.integers(1, 64),
    seq_len=st.integers(1, 32768),
    grad_checkpointing=st.sampled_from(CHECKPOINTING),
    attention=st.sampled_from(ATTENTION),
    gpus=st.sampled_from((1, 2, 4, 8)),
    sharding=st.sampled_from(SHARDING),
)
models = st.sampled_from(["gpt2", "bert-base", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b", "qwen2.5-14b"]).map(
    from_preset
)
gpus = st.sampled_from([g.name for g in CATALOG.gpus if g.bf16])
pricing = st.builds(
    PricingInputs,
    interruptions_per_hour=st.one_of(st.none(), st.floats(0, 5)),
    restart_minutes=st.floats(0, 120),
    checkpoint_minutes=st.floats(1, 600),
    spot_discount=st.one_of(st.none(), st.floats(0, 0.95)),
)


def _finite_non_negative(value: object, path: str = "") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _finite_non_negative(item, f"{path}.{key}")
    elif isinstance(value, float):
        assert math.isfinite(value), path
        if not path.endswith("savings_pct"):
            assert value >= 0, path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models,
    setup=setups,
    gpu=gpus,
    samples=st.integers(1, 10**8),
    pricing=pricing,
    deadline=st.one_of(st.none(), st.floats(0.01, 1e4)),
    budget=st.one_of(st.none(), st.floats(0.01, 1e7)),
)
def test_engine_never_raises_and_never_returns_nan_or_negative(
    model, setup, gpu, samples, pricing, deadline, budget
) -> None:
    request = PlanRequest(
        model, setup, Workload(samples=samples), gpu=gpu, pricing=pricing, deadline_hours=deadline, budget_usd=budget
    )
    document = plan_document(make_plan(request, CATALOG, suggest=False), {})
    _finite_non_negative({k: v for k, v in document.items() if k != "inputs"})


@settings(max_examples=40, deadline=None)
@given(model=models, setup=setups, gpu=gpus, samples=st.integers(1, 10**7), extra=st.integers(1, 10**7))
def test_more_data_means_more_hours_and_cost(model, setup, gpu, samples, extra) -> None:
    small = make_plan(PlanRequest(model, setup, Workload(samples=samples), gpu=gpu), CATALOG, suggest=False)
    large = make_plan(PlanRequest(model, setup, Workload(samples=samples + extra), gpu=gpu), CATALOG, suggest=False)
    assert large.runtime.hours > small.runtime.hours
    if small.on_demand_cost_usd is not None:
        assert large.on_demand_cost_usd is not None and large.on_demand_cost_usd > small.on_demand_cost_usd
    if small.spot is not None and large.spot is not None:
        assert large.spot.cost_usd >= small.spot.cost_usd


def test_catalog_type_is_the_one_compare_reads() -> None:
    assert isinstance(CATALOG, Catalog)
