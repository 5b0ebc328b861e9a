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


def _reference_speed(model, gpu, trainable):
    """What compare ranked candidates by before it was made faster: the full throughput estimate."""
    from gpuplanner.plan.setup import PlanInputError
    from gpuplanner.plan.throughput import estimate_throughput

    def speed(setup: TrainSetup) -> float:
        try:
            return estimate_throughput(model, setup, gpu, trainable).tokens_per_s
        except PlanInputError:
            return 0.0

    return speed


def test_compare_fits_every_option_exactly_as_fastest_fitting_with_the_full_estimate() -> None:
    # compare builds the candidates once per GPU count and ranks them by the step model's tokens/s alone;
    # every catalog GPU must get what the straightforward per-GPU search gives
    from dataclasses import replace

    from gpuplanner.plan.memory import trainable_params

    request = replace(REQUEST, gpu=None, setup=replace(SETUP, micro_batch=8, grad_accum=2, grad_checkpointing="none"))
    pinned = ("optimizer",)
    rows = [
        r for r in compare(request, CATALOG, counts=(1, 2), fit_settings=True, pinned=pinned) if r.pricing == "spot"
    ]
    changed = 0
    for row in rows:
        gpu = CATALOG.gpu(row.gpu)
        asked = replace(request.setup, gpus=row.gpus)
        trainable = trainable_params(LLAMA_8B, asked)
        expected = fastest_fitting(
            LLAMA_8B, asked, gpu.memory_gib, request.headroom, _reference_speed(LLAMA_8B, gpu, trainable), pinned
        )
        expected_setup = expected.setup if expected is not None else asked
        # a GPU without bf16 runs the chosen setting in fp16 (compare notes it in the plan's warnings)
        assert row.plan.setup == replace(expected_setup, precision=row.plan.setup.precision), row.gpu
        assert row.fitted == (expected.changes if expected is not None else ()), row.gpu
        changed += bool(row.fitted)
    assert changed >= 5  # the check is not vacuous: many options needed other settings
    assert len({r.plan.setup for r in rows if r.fitted}) >= 2


def test_the_speed_compare_ranks_by_is_the_estimates_tokens_per_second() -> None:
    from gpuplanner.plan.memory import trainable_params
    from gpuplanner.plan.speed_params import load_speed_model
    from gpuplanner.plan.throughput import estimate_throughput, quantized_params, step_model_tokens_per_s, step_params

    for name in ("H100 SXM", "RTX 4090", "A100 80GB"):
        gpu = CATALOG.gpu(name)
        for setup in (SETUP, TrainSetup(method="qlora", gpus=4, sharding="fsdp"), TrainSetup(gpus=8, optimizer="sgd")):
            trainable = trainable_params(LLAMA_8B, setup)
            params = step_params(load_speed_model(), gpu)
            fast = step_model_tokens_per_s(LLAMA_8B, setup, gpu, trainable, params, quantized_params(LLAMA_8B))
            assert fast == estimate_throughput(LLAMA_8B, setup, gpu, trainable).tokens_per_s > 0
            # the remembered constants are the ones params_for builds
            assert params == load_speed_model().params_for(gpu)


def test_compare_shards_a_model_that_does_not_fit_replicated_without_being_asked() -> None:
    """8B full fine-tune on A100 80GB: replicated (DDP) it needs ~190 GiB per GPU, so the 4- and 8-GPU
    options are planned sharded and say so; on 2 GPUs no sharding fits and the row shows the leanest (FSDP)
    with what it needs; one GPU stays as asked; --pin sharding keeps DDP everywhere."""
    catalog = load_catalog()
    model = from_preset("llama-3.1-8b")
    request = PlanRequest(model, TrainSetup(method="full"), Workload(tokens=10**8), gpu="A100 80GB")
    replicated = estimate_memory(model, TrainSetup(method="full", gpus=8))
    assert replicated.total / GIB > 80  # the premise: DDP does not fit
    rows = compare(request, catalog)
    by_count = {(row.plan.setup.gpus, row.pricing): row for row in rows}
    for count in (4, 8):
        row = by_count[count, "on-demand"]
        assert row.plan.setup.sharding in ("zero2", "fsdp")
        assert row.fitted == (f"sharding {row.plan.setup.sharding}",)
        assert row.plan.memory.total / GIB <= 80 * request.headroom
        assert compare_document(row, {})["fitted_settings"] == [f"sharding {row.plan.setup.sharding}"]
    single = by_count[1, "on-demand"]  # one GPU cannot shard
    assert single.plan.setup.sharding == "ddp" and not single.usable and single.fitted == ()
    two = by_count[2, "on-demand"]  # no sharding fits 2 GPUs: the row says what the leanest one needs
    assert not two.usable and two.plan.setup.sharding == "fsdp" and two.fitted == ("sharding fsdp",)
    assert two.plan.memory.total < estimate_memory(model, TrainSetup(method="full", gpus=2)).total
    pinned = compare(request, catalog, pinned=("sharding",))
    assert all(row.plan.setup.sharding == "ddp" and not row.usable for row in pinned)
