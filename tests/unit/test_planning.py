"""`gpuplanner.planning`: the engine with the run history's measured speeds, without Qt or argparse."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.history.calibration import record_bench
from gpuplanner.history.db import open_db
from gpuplanner.plan.catalog import Catalog, load_catalog
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.planning import MeasuredCache, compute


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def bench_history(path: Path, tokens_per_s: float = 777.0, gpu: str = "L4") -> Path:
    with open_db(path) as handle:
        record_bench(
            handle,
            gpu_type=gpu,
            model_name="gpt2",
            result={"tokens_per_s": tokens_per_s, "seq_len": 1024, "method": "lora", "precision": "bfloat16"},
        )
    return path


def gpt2(**changes: object) -> PlanInputs:
    return PlanInputs(**{"model": "gpt2", "method": "lora", "seq_len": 1024, "gpu": "L4", **changes})


def test_the_measured_speed_cache_keys_on_method_and_precision(tmp_path: Path, catalog: Catalog) -> None:
    db = bench_history(tmp_path / "h.sqlite")
    cache = MeasuredCache()
    lora = cache.speeds(gpt2().to_request(default_gpu=None), db, catalog)
    assert [m.tokens_per_s_per_gpu for m in lora.values()] == [777.0]
    assert cache.speeds(gpt2(method="full").to_request(default_gpu=None), db, catalog) == {}  # not LoRA's speed
    assert cache.speeds(gpt2(precision="fp32").to_request(default_gpu=None), db, catalog) == {}


def test_the_cache_sees_a_new_measurement(tmp_path: Path, catalog: Catalog) -> None:
    db = bench_history(tmp_path / "h.sqlite", 500.0)
    cache, request = MeasuredCache(), gpt2().to_request(default_gpu=None)
    assert [m.tokens_per_s_per_gpu for m in cache.speeds(request, db, catalog).values()] == [500.0]
    bench_history(db, 900.0)  # the file changes: the cache asks the history again
    assert [m.tokens_per_s_per_gpu for m in cache.speeds(request, db, catalog).values()] != [500.0]


def test_compute_says_what_the_history_gave(tmp_path: Path, catalog: Catalog) -> None:
    db = bench_history(tmp_path / "h.sqlite")
    result = compute(1, gpt2().to_request(default_gpu=None), {"gpu": "L4"}, catalog, db)
    assert result.plan.throughput.source.startswith("calibrated: trainer bench results")
    assert result.calibration_note.startswith("Speed calibrated")
    assert result.rows and result.rows[0].rank == 1 and result.recommendation
    assert result.memory_note == "Answered by the formulas."
    assert result.plan.throughput.tokens_per_s == 777.0
    # measured on L4 only: the A100's step model is corrected by what L4 showed, with a wider range than an
    # exact match but a narrower one than the uncalibrated model
    model_only = compute(5, gpt2(gpu="A100 80GB").to_request(default_gpu=None), {}, catalog, None)
    elsewhere = compute(2, gpt2(gpu="A100 80GB").to_request(default_gpu=None), {}, catalog, db)
    assert elsewhere.calibration_note.startswith("Speed calibrated from speeds measured on L4 (sequence 1024)")
    assert elsewhere.plan.throughput.tokens_per_s < model_only.plan.throughput.tokens_per_s
    exact, transferred, uncalibrated = (r.plan.throughput.uncertainty_pct for r in (result, elsewhere, model_only))
    assert exact < transferred < uncalibrated
    # another sequence length on the measured GPU: the 1,024-token measurement still calibrates it
    longer = compute(3, gpt2(seq_len=2048).to_request(default_gpu=None), {}, catalog, db)
    assert longer.calibration_note.startswith("Speed calibrated from speeds measured on L4 (sequence 1024)")
    nothing = compute(6, gpt2(model="gpt2-medium").to_request(default_gpu=None), {}, catalog, db)
    assert nothing.calibration_note == "Nothing measured for gpt2-medium at 1,024 tokens: estimated."
    without = compute(4, gpt2().to_request(default_gpu=None), {}, catalog, None)
    assert without.calibration_note == "" and without.plan.throughput.source.startswith("estimate")


def test_an_unreadable_history_is_a_note_not_an_error(tmp_path: Path, catalog: Catalog) -> None:
    bad = tmp_path / "not-a-history.sqlite"
    bad.write_text("this is not SQLite")
    result = compute(1, gpt2().to_request(default_gpu=None), {}, catalog, bad)
    assert result.calibration_note.startswith("Cannot read the run history")
    assert result.plan.throughput.source.startswith("estimate")


def test_launch_takes_the_settings_compare_fitted_to_the_plans_gpu(catalog: Catalog) -> None:
    """8B LoRA at micro-batch 8 x 4 over 4096 tokens needs about 75 GiB: on a 48 GB RTX A6000 the
    comparison fits it with a smaller micro-batch and more accumulation (same effective batch), and
    "Launch this plan" runs with exactly those settings."""
    from gpuplanner.planning import launch_setup
    from gpuplanner.ui.plan.plan_inputs import trainer_settings

    inputs = PlanInputs(
        model="llama-3.1-8b",
        method="lora",
        micro_batch=8,
        grad_accum=4,
        seq_len=4096,
        grad_checkpointing="full",
        gpu="RTX A6000",
    )
    request = inputs.to_request(default_gpu=None)
    result = compute(1, request, {}, catalog)
    assert result.plan.fits is False
    setup, fitted = launch_setup(result.request, result.plan, result.rows)
    assert fitted and setup.micro_batch < 8
    assert setup.micro_batch * setup.grad_accum == 32 and setup.gpus == 1
    row = next(r for r in result.rows if r.gpu == "RTX A6000" and r.gpus == 1 and r.pricing == "on-demand")
    assert row.plan.fits and row.plan.setup == setup
    settings = trainer_settings(result.request, {}, plan_id=None, price_per_gpu_hour=None, setup=setup)
    assert (settings["micro_batch"], settings["grad_accum"]) == (setup.micro_batch, setup.grad_accum)
    # a plan whose settings fit launches them unchanged
    fitting = compute(
        2, PlanInputs(model="llama-3.1-8b", method="lora", gpu="H100 SXM").to_request(default_gpu=None), {}, catalog
    )
    assert launch_setup(fitting.request, fitting.plan, fitting.rows) == (fitting.plan.setup, ())
