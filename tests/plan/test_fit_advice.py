"""Advice that fits the case (issue 29, item 3): a model that fits no count of the chosen GPU is told what would
fit (a lighter method, a larger GPU, sharding over N GPUs), never to relax a deadline or budget; a small
overshoot is not told to shard over 64 GPUs."""

from __future__ import annotations

import re
from dataclasses import replace

from gpuplanner.plan import memory as mem
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import compare, recommendation
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import make_plan


def plan_of(**inputs: object):  # type: ignore[no-untyped-def]
    return make_plan(PlanInputs(**inputs).to_request(default_gpu=None), load_catalog())  # type: ignore[arg-type]


def test_qlora_of_8b_a_little_over_a_4090_is_told_the_small_change_not_64_gpus() -> None:
    plan = plan_of(model="llama-3.1-8b", method="qlora", gpu="RTX 4090", gpus=1)
    assert plan.fits is False
    assert plan.memory.total / mem.GIB < 30  # a few GiB over: the micro-batch is the answer
    assert any(s.startswith("micro-batch 2 with 8 accumulation steps") for s in plan.suggestions), plan.suggestions
    assert not any("FSDP" in s for s in plan.suggestions), plan.suggestions


def test_70b_full_fine_tune_on_one_4090_is_told_what_would_fit_elsewhere() -> None:
    plan = plan_of(model="llama-3.1-70b", method="full", gpu="RTX 4090", gpus=1)
    assert plan.fits is False and plan.memory.total / mem.GIB > 1000
    assert plan.suggestions, "a model that fits nowhere on this GPU is told what would fit"
    catalog, spec = load_catalog(), from_preset("llama-3.1-70b")
    named = 0
    for text in plan.suggestions:
        found = re.match(
            r"(LoRA|QLoRA \(4-bit base\)) with full gradient checkpointing and micro-batch 1 "
            r"on a larger GPU: (.+?) \(",
            text,
        )
        if found is None:
            continue
        named += 1
        method = "lora" if found.group(1) == "LoRA" else "qlora"
        gpu = catalog.gpu(found.group(2))
        assert gpu is not None and gpu.memory_gib > 24
        setup = plan.setup
        candidate = replace(
            setup,
            method=method,
            grad_checkpointing="full",
            micro_batch=1,
            grad_accum=setup.micro_batch * setup.grad_accum,
        )
        assert mem.fits(mem.estimate_memory(spec, candidate), gpu.memory_gib, plan.request.headroom), text
    assert named >= 1, plan.suggestions
    # QLoRA is named on a smaller GPU than LoRA needs (each one only when it needs less)
    assert any(s.startswith("QLoRA") for s in plan.suggestions), plan.suggestions


def test_no_option_that_fits_is_never_told_to_relax_the_deadline_or_budget() -> None:
    request = PlanInputs(
        model="llama-3.1-70b", method="full", gpu="RTX 4090", deadline_hours=1.0, budget_usd=5.0
    ).to_request(default_gpu=None)
    rows = compare(request, load_catalog(), counts=(1,), gpus=["RTX 4090", "RTX 3090"])
    assert rows and not any(row.plan.fits for row in rows)
    text = recommendation(rows)
    assert text.startswith("No option fits in memory") and "relax" not in text


def test_only_the_constraints_missed_by_options_that_fit_are_named() -> None:
    request = PlanInputs(model="llama-3.1-8b", method="lora", deadline_hours=0.01).to_request(default_gpu=None)
    rows = compare(request, load_catalog(), counts=(1,), gpus=["RTX 4090", "H100 SXM"])
    assert any(row.plan.fits for row in rows) and not any(row.usable for row in rows)
    text = recommendation(rows)
    assert text == "No option meets every constraint: relax the deadline, or see the reasons per row."
