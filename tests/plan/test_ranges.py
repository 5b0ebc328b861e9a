"""Likely ranges of hours and cost, the parts of a step in the plan document, and calibration that transfers."""

from __future__ import annotations

import math

import pytest

from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.documents import plan_document
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import MeasuredSpeed, PlanRequest, PricingInputs, make_plan
from gpuplanner.plan.ranges import Z90, hours_range, speed_sigma, spot_hours_range
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup
from gpuplanner.plan.speed_params import load_speed_model
from gpuplanner.plan.spot import SpotTerms

CATALOG = load_catalog()
LLAMA_8B = from_preset("llama-3.1-8b")
SETUP = TrainSetup(method="lora", micro_batch=2, grad_accum=8, seq_len=2048, grad_checkpointing="full")


def request(**kwargs) -> PlanRequest:
    base = {"model": LLAMA_8B, "setup": SETUP, "workload": Workload(samples=20_000), "gpu": "A100 80GB"}
    base.update(kwargs)
    return PlanRequest(**base)


def test_a_measured_speed_gives_exact_hours_and_a_range_of_one_point() -> None:
    # 20,000 samples x 2 epochs at 100 samples/min: exactly 400 minutes.
    plan = make_plan(
        request(
            workload=Workload(samples=20_000, epochs=2.0),
            samples_per_min=100.0,
            gpu=None,
            pricing=PricingInputs(price=2.0),
        ),
        CATALOG,
    )
    assert plan.runtime.hours == pytest.approx(20_000 * 2 / 100.0 / 60.0)
    assert plan.hours_range == (plan.runtime.hours, plan.runtime.hours)
    assert plan.cost_range == pytest.approx((plan.on_demand_cost_usd, plan.on_demand_cost_usd))
    document = plan_document(plan, {})
    assert document["range_basis"].startswith("speed measured: exact")
    assert document["throughput"]["step"] is None


def test_a_model_speed_gets_the_range_of_its_regimes_left_out_errors() -> None:
    """A LoRA plan is fine-tuning: its range is the fine-tuning band (issue 24: set from left-out sources)."""
    plan = make_plan(request(), CATALOG)
    pct = load_speed_model().regime_pct["fine-tuning"]
    assert plan.throughput.uncertainty_pct == pct
    low, high = plan.hours_range
    sigma = math.log1p(pct / 100.0) / math.sqrt(2.0 / math.pi)
    assert low == pytest.approx(plan.runtime.hours * math.exp(-Z90 * sigma))
    assert high == pytest.approx(plan.runtime.hours * math.exp(Z90 * sigma))
    assert low < plan.runtime.hours < high
    rate = plan.on_demand.usd_per_gpu_hour * plan.on_demand.billed_gpus
    assert plan.cost_range == pytest.approx((low * rate, high * rate))


def test_plan_json_names_the_parts_of_a_step_mfu_hfu_and_the_ranges() -> None:
    plan = make_plan(request(pricing=PricingInputs(spot_discount=0.6)), CATALOG)
    document = plan_document(plan, {})
    throughput = document["throughput"]
    step = throughput["step"]
    assert set(step) == {
        "compute_s",
        "recompute_s",
        "memory_s",
        "communication_s",
        "overhead_s",
        "step_s",
        "tokens_per_gpu",
    }
    assert step["step_s"] == pytest.approx(
        step["compute_s"] + step["recompute_s"] + step["memory_s"] + step["communication_s"] + step["overhead_s"],
        rel=1e-4,
    )
    assert step["recompute_s"] > 0  # full checkpointing: one forward again, its own part
    assert 0 < throughput["mfu"] < throughput["hfu"] < 1
    assert throughput["uncertainty_pct"] == load_speed_model().uncertainty_for("fine-tuning", "Ampere")
    assert document["hours_range"][0] < document["runtime"]["hours"] < document["hours_range"][1]
    assert document["on_demand"]["hours_range"] == document["hours_range"]
    assert document["spot"]["hours_range"][0] < document["spot"]["hours"] < document["spot"]["hours_range"][1]
    assert document["cost_range"] == document["on_demand"]["cost_range"]
    assert "P10-P90" in document["range_basis"]


def test_spot_ranges_combine_interruptions_with_the_speed_error() -> None:
    terms = SpotTerms(interruptions_per_hour=0.2, restart_hours=0.2, checkpoint_interval_hours=0.5)
    exact = spot_hours_range(10.0, terms, None)
    wide = spot_hours_range(10.0, terms, 25.0)
    assert exact[0] >= 10.0  # interruptions only add time
    assert wide[0] < exact[0] and wide[1] > exact[1]
    flat = SpotTerms(interruptions_per_hour=0.0, overhead_pct=10.0)
    assert spot_hours_range(10.0, flat, None) == pytest.approx((11.0, 11.0))


def test_the_speed_error_is_log_normal_with_the_given_mean_absolute_deviation() -> None:
    assert speed_sigma(None) == 0.0 and hours_range(5.0, None) == (5.0, 5.0)
    assert speed_sigma(25.0) == pytest.approx(math.log(1.25) / math.sqrt(2 / math.pi))
    assert hours_range(math.inf, 25.0) == (math.inf, math.inf)


def test_a_speed_measured_on_another_gpu_corrects_the_model_with_a_wider_range() -> None:
    model = make_plan(request(gpu="H100 SXM"), CATALOG)
    a100 = make_plan(request(), CATALOG)
    # the A100 ran 10% faster than the model said: the H100 estimate moves up, by about as much. (A speed the
    # model cannot reach even at the card's peak, such as twice its estimate, only pins the efficiency at the
    # peak on both cards: a calibration never pushes it past the peak.)
    measured = {
        "A100 80GB": MeasuredSpeed("A100 80GB", a100.throughput.tokens_per_s * 1.1, "runs #7 on NVIDIA A100 80GB")
    }
    on_h100 = make_plan(request(gpu="H100 SXM", measured=measured), CATALOG)
    assert on_h100.throughput.source.startswith("calibrated from speeds measured on A100 80GB")
    assert 1.05 < on_h100.throughput.tokens_per_s / model.throughput.tokens_per_s < 1.15
    assert on_h100.throughput.uncertainty_pct == load_speed_model().calibrated_pct
    on_a100 = make_plan(request(measured=measured), CATALOG)
    assert on_a100.throughput.source.startswith("calibrated: runs #7")
    assert on_a100.throughput.uncertainty_pct == load_speed_model().matched_pct
    width = on_a100.hours_range[1] / on_a100.hours_range[0]
    assert width < on_h100.hours_range[1] / on_h100.hours_range[0] < model.hours_range[1] / model.hours_range[0]


def test_a_speed_measured_at_another_sequence_length_corrects_the_model_for_this_one() -> None:
    short = replace_setup(seq_len=1024)
    at_short = make_plan(request(setup=short), CATALOG)
    # measured at 1024 tokens: 1.5x what the model said there
    measured = {
        "A100 80GB": MeasuredSpeed(
            "A100 80GB", at_short.throughput.tokens_per_s * 1.5, "runs #9 on NVIDIA A100 80GB", seq_len=1024
        )
    }
    exact = make_plan(request(setup=short, measured=measured), CATALOG)
    assert exact.throughput.source.startswith("calibrated: runs #9")  # same settings: used as is
    longer = make_plan(request(measured=measured), CATALOG)  # SETUP has 2048 tokens
    model = make_plan(request(), CATALOG)
    assert longer.throughput.source.startswith("calibrated from speeds measured on A100 80GB (sequence 1024)")
    # the calibration scales the matmuls' efficiency; the memory-bound part (the bundled trainer's eager
    # element-wise ops, the optimizer) keeps its time, so the plan moves by less than the measured 1.5x
    assert 1.1 < longer.throughput.tokens_per_s / model.throughput.tokens_per_s < 1.6
    assert longer.throughput.uncertainty_pct == load_speed_model().calibrated_pct


def replace_setup(**changes) -> TrainSetup:
    from dataclasses import replace

    return replace(SETUP, **changes)
