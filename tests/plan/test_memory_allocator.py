"""Reserved vs allocated: the caching allocator's slack (gpuplanner/plan/memory_allocator.py), its fit over the
published reserved peaks, and what a plan reports and judges "fits" on."""

from __future__ import annotations

import pytest

from gpuplanner.plan import memory as mem
from gpuplanner.plan import memory_allocator as alloc
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from tests.benchmarks import planner_accuracy as accuracy

GIB = 1024**3


def test_shipped_shares_are_what_the_benchmark_fits() -> None:
    """The shares memory_allocator.py ships are the benchmark's fit over every published reserved peak (a
    stale constant, or one tuned by hand, fails here)."""
    fit = accuracy.allocator_fit(accuracy.memory_rows())
    assert fit["fixed"] == pytest.approx(alloc.FRAGMENTATION_FIXED, abs=1e-9)
    assert fit["variable"] == pytest.approx(alloc.FRAGMENTATION_VARIABLE, abs=1e-9)
    # every source that reports reserved memory is left out once; the variable share has one source only,
    # so without it nothing is fitted (share 0) and its LOSO error is the error of the fixed share alone
    assert set(fit["fixed_loso"]) == {"answerai-fsdp-qlora", "torchtitan", "universal-llm-trainer"}
    assert fit["variable_loso"]["ms-swift"][0] == 0.0
    assert fit["variable_loso"]["ms-swift"][1] > 10.0


def test_fit_recovers_a_known_share_and_loso_leaves_each_source_out() -> None:
    samples = [
        alloc.Sample("a", base=10.0, transient=4.0, measured=10.0 + 0.3 * 4.0),
        alloc.Sample("a", base=20.0, transient=10.0, measured=20.0 + 0.3 * 10.0),
        alloc.Sample("b", base=5.0, transient=2.0, measured=5.0 + 0.3 * 2.0),
    ]
    assert alloc.fit_share(samples) == pytest.approx(0.3)
    out = alloc.loso(samples, alloc.fit_share)
    assert out["a"] == pytest.approx((0.3, 0.0), abs=1e-9)
    assert out["b"] == pytest.approx((0.3, 0.0), abs=1e-9)
    # a cap (the card) bounds the prediction: a measured peak at the cap is met by any share past it
    capped = [alloc.Sample("c", base=10.0, transient=10.0, measured=12.0, cap=12.0)]
    assert alloc.fit_share(capped) == pytest.approx(0.2)
    assert alloc.fit_share([]) == 0.0


def _lora_8k() -> tuple[mem.MemoryBreakdown, ms.ModelSpec]:
    spec = ms.from_preset("llama-3.1-8b")
    setup = TrainSetup(method="lora", precision="bf16", seq_len=8192, grad_checkpointing="full", engine="hf-trainer")
    return mem.estimate_memory(spec, setup), spec


def test_slack_is_a_share_of_the_transient_bytes_not_of_the_weights() -> None:
    b, spec = _lora_8k()
    # single GPU, no accumulation: at the start of backward no gradient is alive, so everything but the
    # 16-bit weights, the fp32 adapters and their AdamW states is transient (activations and the loss)
    assert b.peak_moment == "start-of-backward"
    assert b.transient == b.allocated - b.weights - b.optimizer
    assert b.transient >= b.activations + b.logits
    assert b.allocator_slack == int(alloc.FRAGMENTATION_FIXED * b.transient)
    assert b.variable_length_slack == alloc.slack_bytes(b.transient, "variable") - b.allocator_slack


def test_reserved_allocated_and_total_as_the_plan_reports_them() -> None:
    b, _ = _lora_8k()
    g = b.as_gib()
    assert b.reserved == b.allocated + b.allocator_slack + b.stream_pools
    assert b.total == b.reserved + b.cuda_context  # what "fits" is judged on: reserved plus the context
    assert g["allocated_gib"] == round(b.allocated / GIB, 3)
    assert g["reserved_gib"] == round(b.reserved / GIB, 3)
    assert g["variable_length_slack_gib"] == round(b.variable_length_slack / GIB, 3)
    # variable lengths add their slack to reserved and nvidia-smi only, never to allocated or to total
    assert b.measured("allocated", "variable") == b.allocated
    assert b.measured("reserved", "variable") == b.reserved + b.variable_length_slack
    assert b.measured("nvidia-smi", "variable") == b.total + b.variable_length_slack
    assert mem.fits(b, b.total / GIB / 0.95 + 1e-6)


def test_variable_slack_stops_at_the_card() -> None:
    """The allocator releases its cached blocks and retries before it fails: reserved never exceeds the
    card (less the context), and never falls below the fixed-shape reserved."""
    b, _ = _lora_8k()
    card = b.reserved + b.cuda_context + b.variable_length_slack // 2
    assert b.measured("reserved", "variable", card) == card - b.cuda_context
    assert b.measured("nvidia-smi", "variable", card) == card
    small = b.reserved  # a card smaller than what the step needs: fixed-shape reserved stays
    assert b.measured("reserved", "variable", small) == b.reserved
    with pytest.raises(PlanInputError) as err:
        b.measured("reserved", "ragged")
    assert err.value.field == "lengths"
