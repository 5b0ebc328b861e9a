"""The ranked comparison: every catalog GPU x count x pricing for one workload, and the winner."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from gpuplanner.export.human import human_hours, human_money
from gpuplanner.plan.catalog import Catalog, GpuSpec, PriceOffer, precision_for
from gpuplanner.plan.fit_settings import PINNABLE, Candidate, fastest_candidate, fitting_candidates
from gpuplanner.plan.memory import MemoryBreakdown, estimate_memory, trainable_params
from gpuplanner.plan.planner import (
    GIB,
    PRICINGS,
    Plan,
    PlanRequest,
    choose_prices,
    deadline_budget,
    gpu_hours_verdict,
    long_run_warning,
    option_spot,
    option_warnings,
    plan_throughput,
)
from gpuplanner.plan.runtime import Runtime, estimate_runtime
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.speed_params import load_speed_model
from gpuplanner.plan.storage_cost import Bill, plan_bill, with_bill_budget
from gpuplanner.plan.throughput import Throughput, quantized_params, step_model_tokens_per_s, step_params

GPU_COUNTS = (1, 2, 4, 8)
QLORA_CHANGE = "QLoRA (4-bit base weights)"  # how a row fitted with QLoRA names that change
# Whole 8-GPU nodes joined by the network, compared when no single node meets the deadline.
MULTI_NODE_COUNTS = (16, 32, 64)


@dataclass(frozen=True)
class CompareRow:
    plan: Plan
    gpu: str
    gpus: int
    pricing: str
    provider: str | None
    usable: bool
    reason: str
    rank: int | None = None
    fitted: tuple[str, ...] = ()  # settings changed so that this option fits (compare(fit_settings=True))

    @property
    def cost_usd(self) -> float | None:
        if self.pricing == "spot":
            return self.plan.spot.cost_usd if self.plan.spot else None
        return self.plan.on_demand_cost_usd

    @property
    def p90_cost_usd(self) -> float | None:
        """The top of the row's likely (P10-P90) cost, ``plan.cost_range`` (the speed's error and, on spot, the
        interruptions), so the P90 beside a range is that range's P90; None without a price."""
        likely = self.plan.cost_range
        return likely[1] if likely is not None else None

    @property
    def hours(self) -> float:
        return self.plan.hours

    @property
    def bill(self) -> Bill | None:
        """Compute, storage and transfer (plan/storage_cost.py); None without a dataset size."""
        return plan_bill(self.plan, self.pricing)

    @property
    def total_usd(self) -> float | None:
        """What the row is ranked by: compute plus storage and transfer when a dataset size is given."""
        bill = self.bill
        return bill.total_usd if bill is not None else self.cost_usd


def _row_reason(plan: Plan, priced: bool) -> str:
    reasons = []
    if plan.fits is False:
        reasons.append(
            f"needs {plan.memory.total / GIB:.1f} GiB, has {plan.capacity_gib * plan.request.headroom:.1f} GiB usable"
            if plan.capacity_gib
            else "does not fit"
        )
    if not priced:
        reasons.append("no offer in the catalog")
    if plan.deadline_ok is False:
        reasons.append("misses the deadline")
    if plan.budget_ok is False:
        reasons.append("over budget")
    if plan.gpu_hours_ok is False:
        reasons.append("over the GPU-hour cap")
    return "; ".join(reasons)


def select_gpus(catalog: Catalog, min_memory_gb: float | None = None, families: Sequence[str] = ()) -> list[str]:
    """The catalog GPUs with at least ``min_memory_gb`` of memory as sold (40 keeps the A100 40GB) and of
    one of the ``families`` (architecture names, case and spaces ignored, a prefix is enough: ``ada``,
    ``hopper``, ``cdna3``); :class:`PlanInputError` naming the flag when no GPU is left."""
    wanted = [_squash(family) for family in families if family.strip()]
    known = sorted({gpu.architecture for gpu in catalog.gpus})
    for family in wanted:
        if not any(_squash(name).startswith(family) for name in known):
            raise PlanInputError("gpu-family", f"no GPU family {family!r}; families: {', '.join(known)}")
    names = [
        gpu.name
        for gpu in catalog.gpus
        if (min_memory_gb is None or gpu.marketing_memory_gb >= min_memory_gb)
        and (not wanted or any(_squash(gpu.architecture).startswith(family) for family in wanted))
    ]
    if not names:
        kind = "of those families " if wanted else ""
        raise PlanInputError("min-gpu-memory", f"no catalog GPU {kind}has {min_memory_gb or 0:g} GB or more")
    return names


def _squash(text: str) -> str:
    return "".join(text.lower().split())


# Without --fit-settings only the sharding may change (every other fitting setting kept as given)
SHARDING_ONLY = frozenset(PINNABLE) - {"sharding"}


def compare(
    request: PlanRequest,
    catalog: Catalog,
    counts: Sequence[int] = GPU_COUNTS,
    gpus: Sequence[str] | None = None,
    *,
    fit_settings: bool = False,
    pinned: Collection[str] = (),
    allow_qlora: bool = False,
) -> list[CompareRow]:
    """Every GPU x count x pricing for one workload, ranked cheapest first among usable options.

    An option is usable when it fits, has a price, meets the deadline and stays within the budget
    (spot options: in 90% of simulated runs). Unusable rows follow, cheapest first, with the reason.
    An option over several GPUs that does not fit replicated is planned with ZeRO-2 or FSDP sharding
    (the faster that fits, or when none fits the one needing least memory, so its reason says what the
    sharded run needs; named in ``fitted``) unless ``pinned`` names ``sharding``.
    With the default counts and a deadline no single node meets, 16, 32 and 64 GPUs (whole 8-GPU
    nodes) are compared too. With ``fit_settings``, an option the requested settings do not fit gets
    the fastest settings that do (:mod:`gpuplanner.plan.fit_settings`; ``pinned`` settings stay), and
    its row names them in ``fitted``. With ``allow_qlora`` too, a LoRA that no such setting fits is tried
    as QLoRA (4-bit base weights: it changes what is trained, so only when the user allows it).
    """
    if request.pricing.price is not None and request.gpu is None:
        raise PlanInputError("price", "compare ranks catalog offers; --price applies only with --gpu")
    names = (
        list(gpus)
        if gpus is not None
        else ([catalog.gpu(request.gpu).name] if request.gpu else [g.name for g in catalog.gpus])
    )
    mode_requests = {mode: replace(request, pricing_mode=mode) for mode in PRICINGS}
    rows: list[CompareRow] = []
    # each GPU and its offers looked up once for every GPU count
    specs = [catalog.gpu(name) for name in names] if counts else []
    offers = {gpu.name: catalog.offers_for(gpu.name) for gpu in specs}

    def add(count: int) -> None:
        setup = replace(request.setup, gpus=count)
        # A candidate setting's memory and changes do not depend on the GPU: worked out once per GPU count
        # (and method), not once per GPU (most of the time fitting takes).
        known: dict[TrainSetup, MemoryBreakdown] = {}

        def memory_of(candidate: TrainSetup) -> MemoryBreakdown:
            found = known.get(candidate)
            if found is None:
                found = known[candidate] = estimate_memory(request.model, candidate)
            return found

        built: dict[tuple[str, frozenset[str]], tuple[Candidate, tuple[Candidate, ...]]] = {}

        def fitting(method: str, keep: frozenset[str] = frozenset(pinned)) -> tuple[Candidate, tuple[Candidate, ...]]:
            if (method, keep) not in built:
                asked = setup if method == setup.method else replace(setup, method=method)
                built[method, keep] = (
                    Candidate(asked, memory_of(asked), (), 1.0),
                    fitting_candidates(asked, keep, memory_of),
                )
            return built[method, keep]

        memory = memory_of(setup)
        trainable = trainable_params(request.model, setup)
        for gpu in specs:
            changes: tuple[str, ...] = ()
            use, use_memory = setup, memory
            if fit_settings and memory.total / GIB > gpu.memory_gib * request.headroom:
                speed = _speed_of(request, gpu, trainable)
                fitted = fastest_candidate(*fitting(setup.method), gpu.memory_gib, request.headroom, speed)
                if fitted is None and allow_qlora and setup.method == "lora":
                    fitted = fastest_candidate(*fitting("qlora"), gpu.memory_gib, request.headroom, speed)
                    if fitted is not None:
                        fitted = replace(fitted, changes=(QLORA_CHANGE, *fitted.changes))
                if fitted is not None:
                    use, use_memory, changes = fitted.setup, memory_of(fitted.setup), fitted.changes
            elif count > 1 and "sharding" not in pinned and memory.total / GIB > gpu.memory_gib * request.headroom:
                # Sharding changes how the model is spread, not what is trained: an option that does not fit
                # replicated is planned sharded (ZeRO-2 or FSDP, the faster that fits) even without --fit-settings
                speed = _speed_of(request, gpu, trainable)
                asked, sharded = fitting(setup.method, SHARDING_ONLY)
                fitted = fastest_candidate(asked, sharded, gpu.memory_gib, request.headroom, speed)
                if fitted is not None:
                    use, use_memory, changes = fitted.setup, memory_of(fitted.setup), fitted.changes
                elif sharded:  # nothing fits: the row says what the leanest sharding needs, not replicated
                    leanest = min(sharded, key=lambda candidate: candidate.memory.total)
                    if leanest.memory.total < memory.total:
                        use, use_memory, changes = leanest.setup, leanest.memory, leanest.changes
            rows.extend(
                _compare_rows(mode_requests, offers[gpu.name], gpu, use, use_memory, trainable, changes, memory_of)
            )

    for count in counts:
        add(count)
    if tuple(counts) == GPU_COUNTS and request.deadline_hours is not None and not any(r.usable for r in rows):
        # one node is too slow: offer whole nodes joined by the network (the step model prices it in)
        for count in MULTI_NODE_COUNTS:
            add(count)
    return rank_rows(rows)


def _speed_of(request: PlanRequest, gpu: GpuSpec, trainable: int) -> Callable[[TrainSetup], float]:
    """The step model's tokens/s of a candidate setting on ``gpu`` (0 where the GPU cannot run it): the
    ``tokens_per_s`` of :func:`estimate_throughput` without the rest of its answer, with the GPU's
    constants looked up once for every candidate."""
    try:
        params = step_params(load_speed_model(), gpu)
    except PlanInputError:
        return lambda setup: 0.0
    quantized = quantized_params(request.model)

    def speed(setup: TrainSetup) -> float:
        try:
            return step_model_tokens_per_s(request.model, setup, gpu, trainable, params, quantized)
        except PlanInputError:
            return 0.0

    return speed


def _compare_rows(
    mode_requests: Mapping[str, PlanRequest],
    offers: Sequence[PriceOffer],
    gpu: GpuSpec,
    setup: TrainSetup,
    memory: MemoryBreakdown,
    trainable: int,
    fitted: tuple[str, ...] = (),
    memory_of: Callable[[TrainSetup], MemoryBreakdown] | None = None,
) -> list[CompareRow]:
    request = mode_requests["on-demand"]
    warnings: list[str] = []
    precision, note = precision_for(gpu, setup.precision)
    if note:  # no bf16 on this GPU: fp16 mixed precision instead
        setup = replace(setup, precision=precision)
        memory = memory_of(setup) if memory_of else estimate_memory(request.model, setup)
        warnings.append(note)
    capacity = gpu.memory_gib
    fits = memory.total / GIB <= capacity * request.headroom
    try:
        throughput = plan_throughput(request, setup, gpu, trainable, allow_measured=request.gpu is not None)
    except PlanInputError as exc:  # e.g. bf16 on a GPU without bf16
        return [_unusable_row(mode_requests[mode], gpu, setup, memory, fits, exc.message) for mode in PRICINGS]
    runtime = estimate_runtime(request.workload, throughput, setup, request.run_overhead_pct)
    on_demand, spot_price = choose_prices(request, offers, setup.gpus)
    on_demand_cost = on_demand.usd_per_instance_hour * runtime.hours if on_demand else None
    # make_plan's warnings and spot estimate for this option, none dropped
    warnings += option_warnings(request, gpu, setup, memory, throughput, on_demand, spot_price)
    warnings += long_run_warning(request, runtime)
    spot = option_spot(request, setup, memory, trainable, runtime, on_demand, spot_price, warnings)
    rows = []
    for mode, mode_request in mode_requests.items():
        deadline_ok, budget_ok = deadline_budget(mode_request, runtime, on_demand_cost, spot)
        gpu_hours_ok = gpu_hours_verdict(mode_request, runtime, spot, setup.gpus)
        plan = Plan(
            mode_request,
            gpu,
            setup,
            memory,
            capacity,
            fits,
            throughput,
            runtime,
            on_demand,
            on_demand_cost,
            spot,
            deadline_ok,
            budget_ok,
            tuple(warnings),
            gpu_hours_ok=gpu_hours_ok,
        )
        plan = with_bill_budget(plan)  # with a dataset size the budget counts storage and transfer too
        budget_ok = plan.budget_ok
        choice = on_demand if mode == "on-demand" else (spot.price if spot else None)
        priced = choice is not None
        usable = bool(
            fits and priced and deadline_ok is not False and budget_ok is not False and gpu_hours_ok is not False
        )
        rows.append(
            CompareRow(
                plan,
                gpu.name,
                setup.gpus,
                mode,
                choice.provider if choice else None,
                usable,
                _row_reason(plan, priced),
                fitted=fitted,
            )
        )
    return rows


def _unusable_row(
    request: PlanRequest, gpu: GpuSpec, setup: TrainSetup, memory: MemoryBreakdown, fits: bool, reason: str
) -> CompareRow:
    zero = Throughput(0.0, 0.0, reason)
    runtime = Runtime(math.inf, math.inf, setup.effective_batch, 0, 0.0, 0.0)
    plan = Plan(
        request, gpu, setup, memory, gpu.memory_gib, fits, zero, runtime, None, None, None, None, None, (reason,)
    )
    return CompareRow(plan, gpu.name, setup.gpus, request.pricing_mode, None, False, reason)


def _sort_key(row: CompareRow) -> tuple[bool, float, float]:
    cost = row.total_usd
    return (not row.usable, cost if cost is not None and math.isfinite(cost) else math.inf, row.hours)


def rank_rows(rows: Sequence[CompareRow]) -> list[CompareRow]:
    """Usable rows first, cheapest (expected cost, plus storage and transfer when given) first; ties go to the
    faster option."""
    ordered = sorted(rows, key=_sort_key)
    # an unusable row keeps no rank: only rows whose rank changes are copied
    return [
        replace(row, rank=index + 1) if row.usable else row if row.rank is None else replace(row, rank=None)
        for index, row in enumerate(ordered)
    ]


def _no_usable_option(rows: Sequence[CompareRow]) -> str:
    """Why no option can be used although some fit in memory: only the constraints the options that fit
    actually miss are named (a missing price is not a deadline to relax)."""
    fitting = [row.plan for row in rows if row.plan.fits]
    missed = [
        name
        for name, flag in (
            ("the deadline", "deadline_ok"),
            ("the budget", "budget_ok"),
            ("the GPU-hour cap", "gpu_hours_ok"),
        )
        if any(getattr(plan, flag) is False for plan in fitting)
    ]
    if not missed:
        return "No option that fits in memory has a price: give a price per GPU-hour, or see the reasons per row."
    return f"No option meets every constraint: relax {_and_join(missed)}, or see the reasons per row."


def _and_join(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def recommendation(rows: Sequence[CompareRow]) -> str:
    """The winner in one sentence, with what makes it win."""
    usable = [row for row in rows if row.usable]
    if not usable:
        if not any(row.plan.fits for row in rows):
            return "No option fits in memory: see the suggestions of `gpuplanner plan` for what would make it fit."
        return _no_usable_option(rows)
    best = usable[0]
    cost = best.total_usd or 0.0
    # in words for people: "$0.0112 in 4 min", never "$0.00 in 0.0 h" for a tiny run
    text = (
        f"{best.gpus} x {best.gpu} {best.pricing} at {best.provider}: {human_money(cost)} in {human_hours(best.hours)}"
    )
    if best.bill is not None and best.bill.total_usd is not None:
        text += " (compute + storage + transfer)"
    if len(usable) > 1:
        runner = usable[1]
        other = runner.total_usd or 0.0
        text += (
            f", {human_money(other - cost)} cheaper than the next option ({runner.gpus} x {runner.gpu} "
            f"{runner.pricing}, {human_hours(runner.hours)})"
        )
    constraints = [
        c
        for c, v in (
            ("the deadline", best.plan.request.deadline_hours),
            ("the budget", best.plan.request.budget_usd),
            ("the GPU-hour cap", best.plan.request.max_gpu_hours),
        )
        if v is not None
    ]
    if constraints:
        text += " while meeting " + " and ".join(constraints)
    return text + "."
