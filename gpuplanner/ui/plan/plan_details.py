"""What the Plan pane's details say about one option of the comparison (no Qt).

The details (headline, summary, speed, what to rent, settings, memory bar, advice, chart highlight)
describe one option at a time: the row selected in the table, else the recommended one (rank 1), else the
form's own plan when nothing can be used. :class:`Focus` names that option; the functions here write its
sentences, and :func:`describe` gathers them (:class:`Details`) for the window and the PDF alike. What
belongs to the form's own option when the details show another (it does not fit) is one sentence of its
own, labelled as the form's (``Details.form_note``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuplanner.app.percentiles import LIKELY, spot_percentiles
from gpuplanner.export.human import human_gpus
from gpuplanner.plan.catalog import OWN_PROVIDER, Catalog
from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.documents import range_basis
from gpuplanner.plan.planner import GIB, Plan, PlanRequest, PriceChoice
from gpuplanner.plan.price_dates import describe_age
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.plan.storage_cost import describe_bill, plan_bill
from gpuplanner.ui.human import human_hours, human_money, human_number
from gpuplanner.ui.plan.plan_form_fields import FIELD_BY_KEY

OptionKey = tuple[str, int, str]  # (GPU, GPU count, pricing)


def option_key(row: CompareRow) -> OptionKey:
    return (row.gpu, row.gpus, row.pricing)


def option_name(row: CompareRow) -> str:
    """``2 x A100 80GB, spot at runpod``."""
    where = f" at {row.provider}" if row.provider else ""
    return f"{row.gpus} x {row.gpu}, {row.pricing}{where}"


@dataclass(frozen=True)
class Focus:
    """The option the details describe and why that one: ``selected``, ``recommended`` or ``form``."""

    plan: Plan
    row: CompareRow | None
    why: str

    @property
    def key(self) -> OptionKey | None:
        return None if self.row is None else option_key(self.row)


def choose_focus(rows: Sequence[CompareRow], form_plan: Plan, selected: OptionKey | None) -> Focus:
    """The selected row when it is still in ``rows``, else the recommended row, else the form's plan.

    The row of the form's own option is described by the form's plan, which holds what only that option
    has (a speed you gave or measured, the advice on what would make it fit), unless the table fitted
    other settings to it (then the row's plan, with those settings, is what Launch runs)."""
    form_key = (form_plan.gpu.name if form_plan.gpu else "", form_plan.setup.gpus, form_plan.request.pricing_mode)

    def focus(row: CompareRow, why: str) -> Focus:
        return Focus(form_plan if option_key(row) == form_key and not row.fitted else row.plan, row, why)

    if selected is not None:
        for row in rows:
            if option_key(row) == selected:
                return focus(row, "selected")
    for row in rows:
        if row.rank == 1:
            return focus(row, "recommended")
    return Focus(form_plan, None, "form")


def _choice(focus: Focus) -> PriceChoice | None:
    plan = focus.plan
    pricing = focus.row.pricing if focus.row is not None else plan.request.pricing_mode
    if pricing == "spot":
        return plan.spot.price if plan.spot is not None else None
    return plan.on_demand


def headline(focus: Focus, recommendation: str) -> str:
    """The bold line above the details: the recommendation, or the selected option's verdict."""
    if focus.why != "selected" or focus.row is None:
        if recommendation.startswith("No option fits in memory"):
            return "No option fits in memory: see below what would make it fit."
        return recommendation
    row = focus.row
    if not row.usable:
        return f"Selected: {option_name(row)} cannot be used: {row.reason}."
    billed = row.bill is not None and row.total_usd is not None  # a dataset size: the total, as ranked
    return (
        f"Selected: #{row.rank} {option_name(row)}: {human_money(row.total_usd if billed else row.cost_usd)}"
        f"{' expected' if row.pricing == 'spot' else ''}{' with storage and transfer' if billed else ''} in {human_hours(row.hours)}."
    )


def focus_line(focus: Focus, form_plan: Plan, *, hints: bool = True) -> str:
    """Which option the details describe; with ``hints`` (the window, not a report), how to see another."""
    gpu = form_plan.gpu.name if form_plan.gpu else "your GPU"
    if focus.row is None:
        return f"Details of the form's option ({form_label(form_plan)}): no option in the table can be used."
    rank = f"#{focus.row.rank} " if focus.row.rank else ""
    what = f"{rank}{option_name(focus.row)}"
    fitted = f" Settings fitted to it: {', '.join(focus.row.fitted)}." if focus.row.fitted else ""
    if not hints:
        return f"Details of the {focus.why} option, {what}.{fitted}"
    if focus.why == "selected":
        text = f"Details of the selected option, {what} (Esc in the table: the recommended one)."
    else:
        text = f"Details of the recommended option, {what} (select a row to see another)."
    text += fitted
    if option_key(focus.row) != (gpu, form_plan.setup.gpus, form_plan.request.pricing_mode):
        text += " Launch runs this option; double-click its row to plan with it in the form."
    return text


def form_label(form_plan: Plan) -> str:
    """``1 x RTX 4090, on-demand``: the form's own option."""
    gpu = form_plan.gpu.name if form_plan.gpu else "your GPU"
    return f"{form_plan.setup.gpus} x {gpu}, {form_plan.request.pricing_mode}"


def describes_form(focus: Focus, form_plan: Plan) -> bool:
    """Whether the details describe the form's own settings on the form's GPU and count (either pricing:
    what fits and what would make it fit are the same)."""
    plan = focus.plan
    return plan is form_plan or (plan.gpu == form_plan.gpu and plan.setup == form_plan.setup)


def form_note(focus: Focus, form_plan: Plan) -> str:
    """What the user must know about the form's own option while the details describe another: that it does
    not fit, and what would make it fit. Empty when the details describe the form's option or it fits."""
    if describes_form(focus, form_plan) or form_plan.fits is not False:
        return ""
    fix = f": to make it fit, {'; '.join(form_plan.suggestions)}" if form_plan.suggestions else ""
    return f"The form's option ({form_label(form_plan)}) does not fit{fix}. The details below are of another option."


def speed_words(source: str) -> str:
    """A throughput source in the details' words: "step model for MI300X (matmuls at ...)", "step model for
    MI300X corrected by speeds measured on H100 SXM, efficiency x0.91; matmuls at ...", "measured in runs #3
    on NVIDIA A10G", "T4 peak 65 TFLOP/s x MFU 0.40 (given)"; other sources as they are."""
    if source.startswith("calibrated: "):
        return "measured in " + source.removeprefix("calibrated: ")
    corrected = re.match(
        r"calibrated from speeds measured on (.+?) \(efficiency (x[\d.]+)\); (.+?) step model, (.+)$", source
    )
    if corrected:
        where, scale, gpu, rest = corrected.groups()
        return f"step model for {gpu} corrected by speeds measured on {where}, efficiency {scale}; {rest}"
    if source.startswith("estimate: "):
        rest = source.removeprefix("estimate: ")
        model = re.match(r"(.+?) step model, (.+)$", rest)
        if model:
            return f"step model for {model.group(1)} ({model.group(2)})"
        return rest  # "T4 peak 65 TFLOP/s x MFU 0.40 (given)"
    return source


def sources_text(focus: Focus, form_plan: Plan) -> str:
    """Where the described option's speed came from and which memory model answered (trace answers for the
    form's own plan only: the table's options use the formulas)."""
    plan = focus.plan
    memory = plan.memory.source
    note = ""
    if form_plan.request.memory_source == "trace" and memory != "trace":
        note = " (trace fell back to the formulas)" if plan is form_plan else " (trace answers for the form's option)"
    return f"Speed: {speed_words(plan.throughput.source)}. Memory: {memory}{note}."


def advice_lines(focus: Focus, form_plan: Plan) -> list[str]:
    """What would make the described option fit (worked out for the form's plan only: the table's plans
    skip it, so another option that does not fit says where to look), then its warnings."""
    plan = focus.plan
    suggestions = form_plan.suggestions if describes_form(focus, form_plan) else plan.suggestions
    advice = []
    if plan.fits is False:
        if suggestions:
            advice.append("To make it fit: " + "; ".join(suggestions) + ".")
        elif describes_form(focus, form_plan):
            advice.append("It does not fit and no simple change makes it fit: try a larger GPU or QLoRA.")
        else:
            advice.append("It does not fit: double-click its row to plan with it and see what would make it fit.")
    advice += [
        w[0].upper() + w[1:]
        for w in plan.warnings
        if not w.startswith(("does not fit", "no spot price known", "trace mode unavailable"))
    ]
    return advice


def focus_request(focus: Focus, form_request: PlanRequest) -> PlanRequest:
    """The form's request for the described option: its GPU, count, pricing and (fitted) settings, the
    form's model, data, deadline and budget (what a saved or launched plan of that option records)."""
    if focus.row is None:
        return form_request
    return replace(form_request, gpu=focus.row.gpu, setup=focus.plan.setup, pricing_mode=focus.row.pricing)


def price_choice(focus: Focus) -> PriceChoice | None:
    """The price the described option pays per GPU-hour (its row's pricing), None without one."""
    return _choice(focus)


@dataclass(frozen=True)
class Details:
    """Every sentence of the details of one option, as the window shows them and the PDF prints them."""

    focus: Focus
    headline: str
    form_note: str
    focus_line: str
    summary: str
    sources: str
    rent: str
    advice: tuple[str, ...]


def describe(
    rows: Sequence[CompareRow],
    form_plan: Plan,
    recommendation: str,
    selected: OptionKey | None,
    catalog: Catalog,
    *,
    hints: bool = True,
) -> Details:
    """The details of the selected option (else the recommended one, else the form's plan)."""
    focus = choose_focus(rows, form_plan, selected)
    return Details(
        focus,
        headline(focus, recommendation),
        form_note(focus, form_plan),
        focus_line(focus, form_plan, hints=hints),
        summary_text(focus.plan),
        sources_text(focus, form_plan),
        rental_text(focus, catalog),
        tuple(advice_lines(focus, form_plan)),
    )


def summary_text(plan: Plan) -> str:
    """Memory, speed, time, cost, deadline, budget and likely range of one option."""
    request = plan.request
    gpu = plan.gpu.name if plan.gpu else "your GPU"
    head = f"{plan.setup.gpus} x {gpu}: {plan.memory.total / GIB:.1f} GiB per GPU"
    if plan.throughput.tokens_per_s <= 0 or not math.isfinite(plan.runtime.hours):
        reason = plan.warnings[0] if plan.warnings else "no speed estimate"
        return f"{head}; cannot run: {reason}."
    parts = [
        f"{head}, {plan.throughput.tokens_per_s:,.0f} tokens/s, "
        f"{human_hours(plan.runtime.hours)}, {human_number(plan.runtime.gpu_hours)} GPU-hours."
    ]
    if plan.on_demand is not None:
        parts.append(
            f"On-demand {human_money(plan.on_demand_cost_usd)} at {human_money(plan.on_demand.usd_per_gpu_hour)}/GPU-h "
            f"({plan.on_demand.provider})."
        )
    if plan.spot is not None:
        est = plan.spot.estimate
        parts.append(
            f"Spot {human_money(plan.spot.cost_usd)} expected in {human_hours(est.hours)} "
            f"(+{human_hours(est.overhead_hours)} overhead), "
            f"{spot_percentiles(human_money(plan.spot.p50_cost_usd), human_money(plan.spot.p90_cost_usd))}."
        )
    # --- storage and transfer (issue 31): with a dataset size, the bill's three parts, as `plan` prints them
    bill = plan_bill(plan)
    if bill is not None:
        parts += [" ".join(line.split()) + "." for line in describe_bill(bill)]
    # ---
    if plan.deadline_ok is not None and request.deadline_hours is not None:
        parts.append(f"Deadline {request.deadline_hours:g} h: {'met' if plan.deadline_ok else 'MISSED'}.")
    if plan.budget_ok is not None and request.budget_usd is not None:
        parts.append(f"Budget {human_money(request.budget_usd)}: {'within' if plan.budget_ok else 'OVER'}.")
    if plan.gpu_hours_ok is not None and request.max_gpu_hours is not None:
        parts.append(f"GPU-hour cap {request.max_gpu_hours:,g}: {'within' if plan.gpu_hours_ok else 'OVER'}.")
    low, high = plan.hours_range
    likely = f"Likely {human_hours(low)} to {human_hours(high)}"
    if plan.cost_range is not None:
        likely += f", {human_money(plan.cost_range[0])} to {human_money(plan.cost_range[1])}"
    parts.append(f"{likely} ({LIKELY}; {range_basis(plan).removesuffix(f' ({LIKELY})')}).")
    return " ".join(parts)  # the price's date and source: rental_text


def batch_text(plan: Plan) -> str:
    """The form's hint under its fields: the model's size, the effective batch and the optimizer steps of the
    form's own plan."""
    model, setup = plan.request.model, plan.setup
    tokens = setup.effective_batch * setup.seq_len
    return (
        f"{model.name}: {model.n_params / 1e9:,.2f}B parameters. Effective batch "
        f"{setup.micro_batch} x {setup.grad_accum} x {human_gpus(setup.gpus)} = {setup.effective_batch} sequences "
        f"({tokens:,} tokens) per optimizer step; {plan.runtime.optimizer_steps:,} steps."
        + (f" Largest micro-batch that fits: {plan.max_micro_batch}." if plan.max_micro_batch else "")
    )


def _what(choice: PriceChoice, gpus: int) -> str:
    """``1 x p5.48xlarge (8 GPUs)`` (``2 x p5.48xlarge (16 GPUs)`` across nodes), with the idle GPUs of a
    whole instance billed for a smaller run."""
    count = "" if re.match(r"^\d+ x ", choice.instance_type) else "1 x "
    billed = choice.billed_gpus
    what = f"{count}{choice.instance_type} ({billed} GPU{'s' if billed != 1 else ''})"
    idle = billed - gpus
    return what + (f", billed as a whole instance: {idle} GPU{'s' if idle != 1 else ''} idle" if idle > 0 else "")


def rented_counts(catalog: Catalog, gpu: str, provider: str) -> list[int]:
    """The GPU counts per instance ``provider`` offers ``gpu`` in (sorted, each once)."""
    try:
        offers = catalog.offers_for(gpu)
    except PlanInputError:
        return []
    return sorted({o.gpu_count for o in offers if o.provider == provider})


def rental_text(focus: Focus, catalog: Catalog) -> str:
    """Exactly what to rent for the focused option: provider, instance type, region, price per GPU-hour and
    per instance, the price's date and source, and the GPU counts the provider rents (a smaller run on a
    bigger machine says that the whole machine is billed)."""
    choice = _choice(focus)
    plan = focus.plan
    gpus = plan.setup.gpus
    if choice is None:
        return "Rent: no price for this option in the catalog."
    per_gpu = human_money(choice.usd_per_gpu_hour)
    if choice.provider == "given":
        return f"Rent: {human_gpus(gpus)} at your price of {per_gpu}/GPU-h ({choice.source or 'given in the form'})."
    gpu = plan.gpu.name if plan.gpu else ""
    instance = human_money(choice.usd_per_instance_hour)
    if choice.provider == OWN_PROVIDER:
        return (
            f"Use your own machine {choice.instance_type} ({choice.billed_gpus} x {gpu}) at {per_gpu}/GPU-h "
            f"({instance}/h for the machine): {choice.source}."
        )
    counts = rented_counts(catalog, gpu, choice.provider)
    sizes = ", ".join(str(c) for c in counts)
    offered = (
        f" {choice.provider} rents {gpu} in instances of {sizes} GPU{'s' if counts != [1] else ''}." if counts else ""
    )
    return (
        f"Rent at {choice.provider}: {_what(choice, gpus)}, region {choice.region or 'any'}, "
        f"{per_gpu}/GPU-h ({instance}/h per instance), {describe_age(choice.as_of)}, source: {choice.source}." + offered
    )


def field_label(key: str) -> str:
    """The form's label of a field key (``epochs`` -> ``Epochs``)."""
    spec = FIELD_BY_KEY.get(key)
    return spec.label if spec is not None else key.replace("-", " ").capitalize()


def in_window_words(message: str) -> str:
    """An engine message with the CLI's flags replaced by the form's labels: "give either --spot-discount or
    --spot-price" -> "give either "Spot discount (share)" or "Spot price ($/GPU-hour)"."""

    def label(match: re.Match[str]) -> str:
        key = match.group(1)
        return f'"{field_label(key)}"' if key in FIELD_BY_KEY else match.group(0)

    return re.sub(r"--([a-z0-9][a-z0-9-]*)", label, message)
