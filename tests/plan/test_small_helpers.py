"""Runtime, unit economics and Chinchilla sizes against hand-computed figures."""

from __future__ import annotations

import pytest

from gpuplanner.plan.economics import unit_economics
from gpuplanner.plan.runtime import Workload, estimate_runtime
from gpuplanner.plan.scaling import compute_optimal, flops_for_budget
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.throughput import Throughput


def test_runtime_from_samples_and_epochs() -> None:
    setup = TrainSetup(micro_batch=4, grad_accum=8, gpus=2, seq_len=1000)
    runtime = estimate_runtime(Workload(samples=36_000, epochs=2), Throughput(20_000.0, 1200.0, "test"), setup)
    # 72,000 samples x 1,000 tokens = 72M tokens at 20k tokens/s = 3,600 s = 1 h on 2 GPUs.
    assert runtime.hours == pytest.approx(1.0)
    assert runtime.gpu_hours == pytest.approx(2.0)
    assert runtime.effective_batch == 64
    assert runtime.optimizer_steps == 1125


def test_runtime_from_tokens() -> None:
    runtime = estimate_runtime(
        Workload(tokens=7_200_000, epochs=3), Throughput(6_000.0, 1.0, "t"), TrainSetup(seq_len=100)
    )
    assert runtime.hours == pytest.approx(1.0)
    assert runtime.total_samples == pytest.approx(216_000)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({}, "samples"),
        ({"samples": 10, "tokens": 10}, "tokens"),
        ({"samples": 0}, "samples"),
        ({"tokens": -5}, "tokens"),
        ({"samples": 10, "epochs": 0.0}, "epochs"),
    ],
)
def test_workload_rejects_bad_sizes(kwargs: dict, field: str) -> None:
    with pytest.raises(PlanInputError) as info:
        Workload(**kwargs)
    assert info.value.field == field


def test_unit_economics_of_the_issue_example() -> None:
    economics = unit_economics(
        gpus=8, hours=1.25, price_usd_per_gpu_hour=8.0, avg_util_pct=60.0, samples=200_000, tokens=200_000 * 512
    )
    assert economics.gpu_hours == pytest.approx(10.0)
    assert economics.effective_gpu_hours == pytest.approx(6.0)
    assert economics.cost_usd == pytest.approx(80.0)
    assert economics.cost_per_effective_gpu_hour_usd == pytest.approx(13.3333, rel=1e-4)
    assert economics.cost_per_sample_usd == pytest.approx(0.0004)
    assert economics.cost_per_million_tokens_usd == pytest.approx(80.0 / 102.4)
    assert (
        unit_economics(gpus=1, hours=1.0, price_usd_per_gpu_hour=2.0, avg_util_pct=0.0).cost_per_effective_gpu_hour_usd
        is None
    )


def test_chinchilla_twenty_tokens_per_parameter() -> None:
    # Chinchilla itself: 70B parameters on 1.4T tokens, C = 6 N D = 5.88e23 FLOPs.
    optimal = compute_optimal(5.88e23)
    assert 6 * optimal.params * optimal.tokens == pytest.approx(5.88e23)
    assert 60e9 < optimal.params < 80e9
    assert 1.2e12 < optimal.tokens < 1.6e12
    assert 18 < optimal.tokens_per_param < 22


def test_flops_for_a_dollar_budget() -> None:
    # $1,000 at $2/GPU-h = 500 GPU-h x 3600 s x 1000 TFLOP/s x 0.4 = 7.2e20 FLOPs.
    assert flops_for_budget(1000.0, 2.0, 1000.0, 0.4) == pytest.approx(7.2e20)
    with pytest.raises(PlanInputError):
        compute_optimal(0.0)
