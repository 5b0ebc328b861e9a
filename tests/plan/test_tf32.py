"""fp32 training on Ampere and newer: TF32 tensor cores on or off (PyTorch's default is off)."""

from __future__ import annotations

import json

import pytest

from gpuplanner.cli import main
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.memory import trainable_params
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.speed_params import load_speed_model
from gpuplanner.plan.step_model import matmul_peak_tflops, step_work
from gpuplanner.plan.throughput import estimate_throughput


def test_the_matmul_peak_follows_the_setting() -> None:
    catalog = load_catalog()
    a100, v100 = catalog.gpu("A100 80GB"), catalog.gpu("V100")
    fp32 = TrainSetup(precision="fp32")
    tf32 = TrainSetup(precision="fp32", tf32=True)
    assert matmul_peak_tflops(a100, fp32) == a100.tflops["fp32"] == 19.5
    assert matmul_peak_tflops(a100, tf32) == a100.tflops["tf32"] == 156.0
    # Volta has no TF32 units: the setting changes nothing
    assert matmul_peak_tflops(v100, tf32) == matmul_peak_tflops(v100, fp32) == v100.tflops["fp32"]
    spec = ms.from_preset("llama-3.2-1b")
    work = step_work(spec, tf32, a100, spec.n_params)
    assert work.peak_flops == 156.0e12


def test_tf32_speeds_up_fp32_training_on_ampere_only() -> None:
    catalog = load_catalog()
    spec = ms.from_preset("llama-3.2-1b")
    fp32 = TrainSetup(precision="fp32", micro_batch=4, seq_len=2048)
    tf32 = TrainSetup(precision="fp32", micro_batch=4, seq_len=2048, tf32=True)
    n = trainable_params(spec, fp32)
    slow = estimate_throughput(spec, fp32, catalog.gpu("A100 80GB"), n)
    fast = estimate_throughput(spec, tf32, catalog.gpu("A100 80GB"), n)
    # matmuls get 8x the peak; memory-bound work and the optimizer step do not, so less than 8x overall
    assert 3.0 < fast.tokens_per_s / slow.tokens_per_s < 8.0
    # fp32 runs on the CUDA cores at fp32_efficiency, TF32 on the tensor cores at Ampere's fitted efficiency
    model = load_speed_model()
    cores = model.shared.get("fp32_efficiency", 0.9) / model.efficiency_for("Ampere")
    assert fast.step.compute_s == pytest.approx(slow.step.compute_s * 19.5 / 156.0 * cores, rel=1e-9)
    assert fast.step.memory_s == pytest.approx(slow.step.memory_s, rel=1e-9)
    # MFU is against the peak the matmuls ran at
    assert fast.mfu == pytest.approx(slow.mfu * fast.tokens_per_s / slow.tokens_per_s * 19.5 / 156.0, rel=1e-6)
    v100 = catalog.gpu("V100")
    assert (
        estimate_throughput(spec, tf32, v100, n).tokens_per_s == estimate_throughput(spec, fp32, v100, n).tokens_per_s
    )


def test_tf32_needs_fp32() -> None:
    with pytest.raises(PlanInputError) as err:
        TrainSetup(precision="bf16-mixed", tf32=True)
    assert err.value.field == "tf32" and "fp32" in err.value.message


def test_plan_flag_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.2-1b", "--precision", "fp32", "--json"]
    assert main([*base, "--gpu", "A100 80GB"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert main([*base, "--gpu", "A100 80GB", "--tf32"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert (off["inputs"]["tf32"], on["inputs"]["tf32"]) == (False, True)
    assert on["runtime"]["hours"] < off["runtime"]["hours"] / 3
    assert main([*base, "--gpu", "V100", "--tf32"]) == 0
    volta = json.loads(capsys.readouterr().out)
    assert any("no TF32" in w for w in volta["warnings"])
    assert main(["plan", "--model", "llama-3.2-1b", "--tf32"]) == 2
    assert "--tf32" in capsys.readouterr().err
