"""What the Plan pane's details say about one option of the comparison (no Qt).

The details (headline, summary, what to rent, memory bar, chart highlight) describe one option at a time:
the row selected in the table, else the recommended one (rank 1), else the form's own plan when nothing
can be used. :class:`Focus` names that option; the functions here write its sentences.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplanner.app.percentiles import LIKELY, spot_percentiles
from gpuplanner.plan.catalog import OWN_PROVIDER, Catalog
from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.documents import range_basis
from gpuplanner.plan.planner import GIB, Plan, PriceChoice
from gpuplanner.plan.price_dates import describe_age
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.ui.human import human_hours, human_money, human_number
from gpuplanner.ui.plan_inputs import FIELD_BY_KEY

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
    return (
        f"Selected: #{row.rank} {option_name(row)}: {human_money(row.cost_usd)}"
        f"{' expected' if row.pricing == 'spot' else ''} in {human_hours(row.hours)}."
    )


def focus_line(focus: Focus, form_plan: Plan, *, hints: bool = True) -> str:
    """Which option the details describe; with ``hints`` (the window, not a report), how to see another."""
    gpu = form_plan.gpu.name if form_plan.gpu else "your GPU"
    form = f"{form_plan.setup.gpus} x {gpu}, {form_plan.request.pricing_mode}"
    if focus.row is None:
        return f"Details of the form's option ({form}): no option in the table can be used."
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
        text += f" Save and Launch use the form's {form}; double-click a row to plan with it."
    return text


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
            f"On-demand {human_money(plan.on_demand_cost_usd)} at ${plan.on_demand.usd_per_gpu_hour:.2f}/GPU-h "
            f"({plan.on_demand.provider})."
        )
    if plan.spot is not None:
        est = plan.spot.estimate
        parts.append(
            f"Spot {human_money(plan.spot.cost_usd)} expected in {human_hours(est.hours)} "
            f"(+{human_hours(est.overhead_hours)} overhead), "
            f"{spot_percentiles(human_money(plan.spot.p50_cost_usd), human_money(plan.spot.p90_cost_usd))}."
        )
    if plan.deadline_ok is not None and request.deadline_hours is not None:
        parts.append(f"Deadline {request.deadline_hours:g} h: {'met' if plan.deadline_ok else 'MISSED'}.")
    if plan.budget_ok is not None and request.budget_usd is not None:
        parts.append(f"Budget ${request.budget_usd:,.2f}: {'within' if plan.budget_ok else 'OVER'}.")
    if plan.gpu_hours_ok is not None and request.max_gpu_hours is not None:
        parts.append(f"GPU-hour cap {request.max_gpu_hours:,g}: {'within' if plan.gpu_hours_ok else 'OVER'}.")
    low, high = plan.hours_range
    likely = f"Likely {human_hours(low)} to {human_hours(high)}"
    if plan.cost_range is not None:
        likely += f", {human_money(plan.cost_range[0])} to {human_money(plan.cost_range[1])}"
    parts.append(f"{likely} ({LIKELY}; {range_basis(plan).removesuffix(f' ({LIKELY})')}).")
    return " ".join(parts)  # the price's date and source: rental_text


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
        return f"Rent: {gpus} GPU(s) at your price of {per_gpu}/GPU-h ({choice.source or 'given in the form'})."
    gpu = plan.gpu.name if plan.gpu else ""
    instance = human_money(choice.usd_per_gpu_hour * choice.billed_gpus)
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
