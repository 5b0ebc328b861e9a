"""compare(fit_settings=True, allow_qlora=True): a LoRA that no other setting fits becomes QLoRA, only then
and only when allowed (`gpuplanner compare --fit-settings --allow-qlora`)."""

from __future__ import annotations

import json

import pytest

from gpuplanner.cli import main
from gpuplanner.plan.catalog import builtin_catalog
from gpuplanner.plan.compare import QLORA_CHANGE, compare
from gpuplanner.plan.memory import GIB
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, PricingInputs
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

REQUEST = PlanRequest(
    model=from_preset("llama-3.1-8b"),
    setup=TrainSetup(method="lora", micro_batch=4, grad_accum=4, seq_len=1024, precision="bf16-mixed"),
    workload=Workload(samples=20_000, epochs=1.0),
    gpu=None,
    pricing=PricingInputs(),
)


def one(rows: list, gpu: str) -> object:
    return next(r for r in rows if r.gpu == gpu and r.gpus == 1 and r.pricing == "on-demand")


def test_qlora_only_where_nothing_else_fits_and_only_when_allowed() -> None:
    catalog = builtin_catalog()
    kept = compare(REQUEST, catalog, fit_settings=True, pinned=("optimizer",))
    allowed = compare(REQUEST, catalog, fit_settings=True, pinned=("optimizer",), allow_qlora=True)
    t4 = one(kept, "T4")
    assert t4.plan.fits is False and not any(r.plan.setup.method == "qlora" for r in kept)
    t4 = one(allowed, "T4")
    assert t4.plan.fits and t4.plan.setup.method == "qlora" and t4.fitted[0] == QLORA_CHANGE
    assert t4.plan.memory.total / GIB <= t4.plan.capacity_gib * REQUEST.headroom
    assert t4.plan.setup.micro_batch * t4.plan.setup.grad_accum == 16  # the effective batch is kept
    # where a LoRA setting fits, the method stays LoRA
    for row in allowed:
        if row.plan.setup.method == "qlora":
            lora = next(r for r in kept if (r.gpu, r.gpus, r.pricing) == (row.gpu, row.gpus, row.pricing))
            assert lora.plan.fits is False


def test_cli_allow_qlora(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["compare", "--model", "llama-3.1-8b", "--samples", "20000", "--seq-len", "1024", "--fit-settings"]
    assert main([*flags, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert not any(QLORA_CHANGE in row["fitted_settings"] for row in rows)
    assert main([*flags, "--allow-qlora", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    t4 = next(r for r in rows if r["gpu"] == "T4" and r["gpus"] == 1 and r["pricing"] == "on-demand")
    assert t4["memory"]["fits"] is True and t4["fitted_settings"][0] == QLORA_CHANGE
