"""`compare` gives every option the warnings `plan` gives it (make_plan's option_warnings), none dropped."""

from __future__ import annotations

import json
from dataclasses import replace

from gpuplanner.cli import main
from gpuplanner.plan.catalog import builtin_catalog
from gpuplanner.plan.compare import compare
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, PricingInputs, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

# full fine-tuning of an 8B model, micro-batch 1 and no accumulation: too big for small GPUs and
# communication-bound on several; once in fp16, once in fp32 with TF32 matmuls (GPUs without TF32 warn)
REQUESTS = [
    PlanRequest(
        model=from_preset("llama-3.1-8b"),
        setup=TrainSetup(method="full", micro_batch=1, grad_accum=1, seq_len=512, precision=precision, tf32=tf32),
        workload=Workload(samples=2_000, epochs=1.0),
        gpu=None,
        pricing=PricingInputs(),
    )
    for precision, tf32 in (("fp16-mixed", False), ("fp32", True))
]
# the five kinds compare used to drop (it kept only the bf16 fallback note and spot's own warnings)
DROPPED_BEFORE = (
    "does not fit:",
    "fp16 mixed precision needs loss scaling",
    "has no TF32 tensor cores",
    "communication dominates:",
    ": you pay for all of them",
)


def test_every_row_has_make_plans_warnings() -> None:
    catalog = builtin_catalog()
    seen = set()
    for request in REQUESTS:
        rows = compare(request, catalog)
        assert rows
        for row in rows:
            alone = make_plan(
                # the row's own settings: an option that does not fit replicated is planned sharded
                replace(request, gpu=row.gpu, setup=row.plan.setup, pricing_mode=row.pricing),
                catalog,
            )
            assert row.plan.warnings == alone.warnings, (row.gpu, row.gpus, row.pricing)
        seen |= {kind for row in rows for kind in DROPPED_BEFORE if any(kind in w for w in row.plan.warnings)}
    assert seen == set(DROPPED_BEFORE)


def test_compare_json_carries_the_warnings(capsys) -> None:
    argv = ["compare", "--model", "llama-3.1-8b", "--method", "full", "--micro-batch", "1", "--grad-accum", "1"]
    argv += ["--seq-len", "512", "--precision", "fp16-mixed", "--samples", "2000", "--no-calibration", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    warnings = [w for row in rows for w in row["warnings"]]
    for kind in ("does not fit:", "fp16 mixed precision needs loss scaling", ": you pay for all of them"):
        assert any(kind in w for w in warnings), kind
