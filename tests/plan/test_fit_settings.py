"""compare can choose, per GPU option, the fastest settings that fit (same effective batch, method, precision)."""

from __future__ import annotations

from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import compare
from gpuplanner.plan.documents import compare_document
from gpuplanner.plan.fit_settings import candidates, fastest_fitting
from gpuplanner.plan.memory import estimate_memory
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import GIB, PlanRequest
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

CATALOG = load_catalog()
LLAMA_8B = from_preset("llama-3.1-8b")
SETUP = TrainSetup(method="lora", micro_batch=4, grad_accum=4, seq_len=2048)
REQUEST = PlanRequest(LLAMA_8B, SETUP, Workload(samples=20_000), gpu="RTX 4090")


def test_candidates_keep_the_effective_batch_method_precision_and_sequence() -> None:
    seen = list(candidates(SETUP))
    assert seen and seen[0] == SETUP
    for c in seen:
        assert c.micro_batch * c.grad_accum == 16
        assert (c.method, c.precision, c.seq_len, c.gpus) == (SETUP.method, SETUP.precision, 2048, 1)
    assert {c.micro_batch for c in seen} == {4, 2, 1}
    pinned = list(candidates(SETUP, pinned=("micro_batch", "grad_checkpointing")))
    assert {(c.micro_batch, c.grad_checkpointing) for c in pinned} == {(4, "none")}


def test_an_8b_lora_on_a_24_gb_card_fits_with_a_smaller_micro_batch() -> None:
    plain = [r for r in compare(REQUEST, CATALOG, counts=(1,)) if r.pricing == "on-demand"][0]
    assert plain.plan.fits is False and not plain.usable
    fitted = [r for r in compare(REQUEST, CATALOG, counts=(1,), fit_settings=True) if r.pricing == "on-demand"][0]
    assert fitted.plan.fits is True and fitted.usable
    setup = fitted.plan.setup
    assert setup.micro_batch < 4 and setup.micro_batch * setup.grad_accum == 16
    assert any(change.startswith("micro-batch") for change in fitted.fitted)
    assert estimate_memory(LLAMA_8B, setup).total / GIB <= 23.5 * 0.95 + 0.5
    document = compare_document(fitted, {})
    assert document["fitted_settings"] == list(fitted.fitted)


def test_a_setup_that_fits_is_left_alone_and_pinned_settings_stay() -> None:
    fitted = fastest_fitting(LLAMA_8B, SETUP, 139.8, 0.95, lambda s: 1.0)
    assert fitted is not None and fitted.setup == SETUP and fitted.changes == ()
    pinned = fastest_fitting(LLAMA_8B, SETUP, 23.5, 0.95, lambda s: 1.0, pinned=("micro_batch",))
    assert pinned is None or pinned.setup.micro_batch == 4
    nothing = fastest_fitting(LLAMA_8B, SETUP, 2.0, 0.95, lambda s: 1.0)
    assert nothing is None


def test_the_fastest_fitting_candidate_wins_and_changes_must_pay_for_themselves() -> None:
    # a speed function that prefers micro-batch 2: the fit picks it over 1 when both fit
    fitted = fastest_fitting(LLAMA_8B, SETUP, 79.1, 0.95, lambda s: 100.0 if s.micro_batch == 2 else 50.0)
    assert fitted is not None and fitted.setup.micro_batch == 2
    # equal speeds: the fewest changes
    assert fitted.setup.optimizer == SETUP.optimizer and fitted.setup.grad_checkpointing == SETUP.grad_checkpointing
