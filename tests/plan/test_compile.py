"""``--compile`` (issue 24): a run under torch.compile moves the fused element-wise traffic, not the eager
chains of the engine's own blocks; the same input from the CLI and in the JSON inputs."""

from __future__ import annotations

import json

import pytest

from gpuplanner.cli import main
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.plan.memory import trainable_params
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.step_model import EAGER_BYTES_PER_HIDDEN, step_work
from gpuplanner.plan.throughput import estimate_throughput


def test_compile_fuses_the_element_wise_ops_of_an_eager_engine() -> None:
    spec = ms.from_preset("llama-3.2-1b")
    a6000 = load_catalog().gpu("RTX A6000")
    eager = TrainSetup(engine="torchtune", micro_batch=2, seq_len=2048, grad_checkpointing="full")
    compiled = TrainSetup(engine="torchtune", micro_batch=2, seq_len=2048, grad_checkpointing="full", compile=True)
    n = trainable_params(spec, eager)
    off, on = step_work(spec, eager, a6000, n), step_work(spec, compiled, a6000, n)
    tokens, layers, r = 2 * 2048, spec.num_layers, 1.0  # full checkpointing recomputes the forward once
    # the eager chains leave the fixed bytes (at least the RMSNorms', residuals' and copies' share) ...
    assert off.fixed_bytes - on.fixed_bytes >= tokens * layers * EAGER_BYTES_PER_HIDDEN * spec.hidden_size
    # ... and the fused element-wise units (2h + intermediate per token and layer, 2 bytes) come in
    assert off.elementwise_units == 0.0
    units = tokens * layers * (2 * spec.hidden_size + spec.intermediate_size) * 2.0 * (1.0 + r / 3.0)
    assert on.elementwise_units == pytest.approx(units, rel=1e-12)
    # the matmuls are the same work
    assert (on.matmul_flops, on.attention_flops) == (off.matmul_flops, off.attention_flops)
    slow = estimate_throughput(spec, eager, a6000, n)
    fast = estimate_throughput(spec, compiled, a6000, n)
    assert fast.step.memory_s < slow.step.memory_s
    assert fast.step.compute_s == pytest.approx(slow.step.compute_s, rel=1e-12)
    assert fast.tokens_per_s > slow.tokens_per_s * 1.05


def test_compile_changes_nothing_on_an_engine_that_already_fuses() -> None:
    spec = ms.from_preset("llama-3.2-1b")
    h100 = load_catalog().gpu("H100 SXM")
    plain = TrainSetup(engine="unsloth", method="lora")
    n = trainable_params(spec, plain)
    compiled = TrainSetup(engine="unsloth", method="lora", compile=True)
    assert step_work(spec, plain, h100, n) == step_work(spec, compiled, h100, n)


def test_compile_must_be_a_switch() -> None:
    with pytest.raises(PlanInputError) as err:
        TrainSetup(compile="yes")  # type: ignore[arg-type]
    assert err.value.field == "compile" and "true or false" in err.value.message


def test_plan_flag_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.2-1b", "--gpu", "RTX 4090", "--engine", "torchtune", "--json"]
    assert main(base) == 0
    off = json.loads(capsys.readouterr().out)
    assert main([*base, "--compile"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert (off["inputs"]["compile"], on["inputs"]["compile"]) == (False, True)
    assert on["throughput"]["tokens_per_s"] > off["throughput"]["tokens_per_s"]
    assert on["throughput"]["step"]["memory_s"] < off["throughput"]["step"]["memory_s"]
    assert PlanInputs(compile=True).setup().compile is True
