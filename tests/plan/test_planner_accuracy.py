"""The planner against published training runs (tests/data/published): accuracy must not regress.

Runs the same computation as ``tests/benchmarks/planner_accuracy.py``: every row planned through the inputs a
user sets (engine included), every source weighing the same in the headline. Issue 24's targets: speed over
sources 15% (reached 23.8%), leave-one-source-out over sources 18% (reached 26.0%), memory over sources 5%
(reached 4.8%), band coverage 75-85% (reached 81.1% over sources); each is asserted at what was reached plus a
small margin, so a regression fails; see docs/speed-model.md. The figures moved last when the step model, its
[uncertainty] and the allocator's variable-length share were refitted on the dataset grown by xtuner's speed
benchmark, Qwen's fine-tuning profile, NeMo AutoModel's LoRA table and ms-swift's Qwen v1 rows
(`planner_accuracy.py --fit --uncertainty`; before the refit 23.5%, 26.0%, 5.9% and 81.1%; before those sources
21.6%, 25.7%, 3.7% and 78.3%). The figures were re-measured when the
fine-tuning sources of speed_finetune.csv / memory_finetune.csv joined the dataset, and again after the step
model and its per-regime uncertainty were refitted on the grown dataset (`planner_accuracy.py --fit
--uncertainty`): before them the same benchmark gave 27.3%, 32.9% (17.9% over rows), 8.9% and 78.0%.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "planner_accuracy.py"
# the figures take ~20 s to compute (a module fixture): one worker computes them once, not each worker that
# draws one of these tests
pytestmark = pytest.mark.xdist_group("planner_accuracy")


@pytest.fixture(scope="module")
def accuracy():
    spec = importlib.util.spec_from_file_location("planner_accuracy", BENCHMARK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures(accuracy):
    overall, tables = accuracy.figures()
    return overall, tables


def test_the_dataset_is_large_and_varied_enough(accuracy) -> None:
    speed = accuracy.speed_rows()
    memory = accuracy.memory_rows()
    assert len(speed) >= 40 and len(memory) >= 20
    assert len({row.source for row in speed}) >= 5
    assert len({row.source for row in speed} | {row.source for row in memory}) >= 6
    assert {row.setup.method for row in speed} == {"full", "lora", "qlora"}
    assert {row.gpu.architecture for row in speed} >= {"Ampere", "Hopper", "Ada Lovelace"}


def test_speed_error_does_not_regress(figures) -> None:
    overall, _ = figures
    # target 15; reached 23.8 after the refit on the sources added last (23.5 before it: the fit minimises the
    # mean absolute log error with a weak prior, not this % error; Qwen's profile, 42%, above all), 21.6 before
    # them (22.0 before the torch.compile input, 24.3 before AdamW's foreach passes, the eager engines' counted
    # element-wise ops and attention at FlashAttention-2's share of Hopper's peak)
    assert overall["speed_mape_by_source"] <= 24.3
    # rows weighted: reached 18.4 after the refit (17.7 before it), 14.6 before the sources added last (14.5
    # before the torch.compile input; 15.7 before the refit on the grown dataset, which minimises the mean over
    # sources, the headline)
    assert overall["speed_mape"] <= 18.9


def test_leave_one_source_out_error_does_not_regress(figures) -> None:
    overall, _ = figures
    assert math.isfinite(overall["speed_loso_mape"])
    # target 18; reached 26.0 with the sources added last (a refit does not move it: each left-out fit starts
    # from the same fixed values), 25.7 before them (26.1 before the torch.compile
    # input, 33.0 before AdamW's passes)
    assert overall["speed_loso_mape_by_source"] <= 26.5
    # rows weighted: reached 20.2 with the sources added last (llm-foundry left out: 26.5 -> 13.0, its rows
    # now predicted by constants fitted on more full fine-tunes at scale), 27.3 before them (27.4 before the
    # torch.compile input, 17.9 before the fine-tuning sources)
    assert overall["speed_loso_mape"] <= 20.7
    assert overall["speed_calibrated_mape"] <= overall["speed_loso_mape"]


def test_band_coverage_on_left_out_sources_is_near_its_share(figures) -> None:
    """Each source judged against bands set (and widened: tests/benchmarks/band_calibration.py) from the
    other sources' left-out errors only."""
    overall, _ = figures
    assert (
        75.0 <= overall["speed_band_coverage_by_source"] <= 85.0
    )  # reached 81.1 with the sources added last, before and after the refit (78.3 before them, 77.0 before
    # --compile; 72.4 unwidened)


def test_memory_error_does_not_regress(figures) -> None:
    overall, _ = figures
    # target 5; reached 4.8 with ms-swift's Qwen v1 rows and the allocator's variable-length share refitted on
    # them (2.98 -> 1.49; 5.9 before the refit: Qwen's own code takes the loss on 16-bit logits, which its
    # hf-trainer engine plans in fp32), 3.7 before them (6.5 before the fitted allocator slack, 13.0 before the
    # engine-aware memory fixes)
    assert overall["memory_mape_by_source"] <= 5.0


def test_the_shipped_uncertainty_is_the_measured_one(figures) -> None:
    """The ranges plans show rest on the benchmark's own figures, not on a number typed in."""
    from gpuplanner.plan.ranges import uncertainty_for_band
    from gpuplanner.plan.speed_params import load_speed_model

    overall, _ = figures
    model = load_speed_model()
    assert model.loso_pct == pytest.approx(overall["speed_loso_mape"], abs=0.1)
    assert model.calibrated_pct == pytest.approx(overall["speed_calibrated_mape"], abs=0.1)
    for regime, pct in model.regime_pct.items():
        assert pct == pytest.approx(uncertainty_for_band(overall[f"speed_band_pct_{regime}"]), abs=0.1)


def test_rows_are_planned_through_the_users_inputs(accuracy) -> None:
    """A row's prediction is what `gpuplanner plan` gives for the same flags: the plan's own figures."""
    from gpuplanner.plan.catalog import load_catalog
    from gpuplanner.plan.planner import make_plan

    rows = {row.label: row for row in accuracy.speed_rows()}
    label = "llama-3-8b lora 1xRTX A6000 mb2 seq2048 ckpt=full"
    row = rows[label]
    assert row.setup.engine == "torchtune"
    with (accuracy.DATA / "speed.csv").open() as handle:
        import csv

        rec = next(r for r in csv.DictReader(handle) if r["gpu"] == "RTX A6000" and r["method"] == "lora")
    plan = make_plan(accuracy.user_inputs(rec).to_request(default_gpu=None), load_catalog(), suggest=False)
    assert accuracy.predict_speed(row) == pytest.approx(plan.throughput.tokens_per_s / row.setup.gpus)
    memory = accuracy.memory_rows()[0]
    assert accuracy.predict_memory(memory) * accuracy.GIB == pytest.approx(
        make_plan(
            accuracy.user_inputs(_first(accuracy.DATA / "memory.csv")).to_request(default_gpu=None),
            load_catalog(),
            suggest=False,
        ).memory.measured(memory.measure)
    )


def _first(path):
    import csv

    with path.open() as handle:
        return next(csv.DictReader(handle))


def test_no_published_row_is_removed(accuracy) -> None:
    """The four rows 5b31cad dropped without a word are back, and every row names its engine."""
    from gpuplanner.plan.engines import ENGINE_NAMES

    labels = {row.label for row in accuracy.speed_rows()}
    assert {
        "llama-3-8b full 8xH100 SXM mb2 seq8192 ckpt=selective-op",
        "llama-3-8b full 128xH100 SXM mb2 seq8192 ckpt=selective-op",
        "llama-3-8b full 1xRTX A6000 mb2 seq2048 ckpt=full",
        "llama-3-8b lora 1xRTX A6000 mb2 seq2048 ckpt=full",
    } <= labels
    assert len(accuracy.speed_rows()) >= 315 and len(accuracy.memory_rows()) >= 88
    assert {row.setup.engine for row in accuracy.speed_rows() + accuracy.memory_rows()} <= set(ENGINE_NAMES)


def test_every_source_is_scored_and_named(figures) -> None:
    _, tables = figures
    speed = tables["Speed: tokens/s per GPU, planner vs published"]
    assert {"llm-foundry", "torchtitan", "xtuner", "torchtune", "tinyllama", "universal-llm-trainer"} <= set(speed)
    assert {"optimum-benchmark", "peft-method-comparison", "xtuner-speed-benchmark"} <= set(speed)
    assert {"qwen-finetune", "nemo-automodel"} <= set(speed)
    memory = tables["Memory: peak GiB per GPU, planner vs published"]
    assert {"ms-swift", "litgpt-resource-tables", "answerai-fsdp-qlora"} <= set(memory)
    for score in speed.values():
        assert score.rows >= 1 and score.worst_label
