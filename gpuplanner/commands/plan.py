"""`gpuplanner plan` (one workload on one GPU option) and `gpuplanner compare` (the ranked table).

Flag names are a stable contract (scripts and the desktop app use them). Sizes accept suffixes:
``7B``, ``1.5e9``, ``100k``, ``2M``. With no flags both commands plan the built-in example
(LoRA of Llama 3.1 8B on 50,000 samples of 2,048 tokens).

This module is the argparse wiring and the text/CSV/Markdown/JSON output: the flags become a
:class:`~gpuplanner.plan.inputs.PlanInputs` (the ranges and rules the Plan form uses too), the run
history's measured speeds come from :mod:`gpuplanner.planning`.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
from collections.abc import Callable
from typing import Any

from gpuplanner.app.compare_row import compare_cells, compare_columns, compare_documents, has_bill
from gpuplanner.app.percentiles import spot_percentiles
from gpuplanner.app.plan_fields import CLI_GROUPS, PLAN_FIELDS, PlanField
from gpuplanner.commands.errors import UsageError
from gpuplanner.export.human import human_gpus, human_hours, human_money
from gpuplanner.export.tables import to_csv, to_json, to_markdown, to_text
from gpuplanner.history.db import HistoryError, resolve_db_path
from gpuplanner.plan import example
from gpuplanner.plan.catalog import Catalog, CatalogError, load_catalog
from gpuplanner.plan.compare import GPU_COUNTS, compare, recommendation, select_gpus
from gpuplanner.plan.documents import compare_document, plan_document, rows_offer_ages
from gpuplanner.plan.inputs import INPUT_NAMES, PlanInputs, inputs_document, parse_amount, parse_value, split_targets
from gpuplanner.plan.planner import Plan, PlanRequest, make_plan
from gpuplanner.plan.price_dates import describe_age, describe_offer_ages, stale_offers_warning
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.plan.storage_cost import describe_bill, plan_bill
from gpuplanner.planning import calibrated_request, calibration_skips

GIB = 1024**3
# --pin names (as the flags spell them) -> the settings fit_settings may change
PIN_FLAGS = {
    "micro-batch": "micro_batch",
    "checkpointing": "grad_checkpointing",
    "optimizer": "optimizer",
    "sharding": "sharding",
}


def flag_type(field: str) -> Callable[[str], int | float]:
    """The argparse type of a numeric planner flag: the input layer's parser and range, as argparse errors."""

    def parse(text: str) -> int | float:
        try:
            return parse_value(field, text)
        except PlanInputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    parse.__name__ = field
    return parse


def positive_int(text: str) -> int:
    """A whole number of at least 1 (``--top``)."""
    try:
        value = parse_amount("top", text)
    except PlanInputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(value)


def _argument_kind(row: PlanField) -> dict[str, Any]:
    """The add_argument keywords of a table row's kind: its parser and metavar, choices, or a switch."""
    if row.kind == "flag":
        return {"action": "store_true"}
    if row.kind == "choice":
        return {"choices": row.choices}
    if row.kind == "number":
        return {"metavar": row.metavar, "type": flag_type(row.flag)}
    if row.kind == "names":
        return {"metavar": row.metavar, "type": split_targets}
    return {"metavar": row.metavar}  # a name or a path, as typed


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    # The planner's inputs: one argument per row of the shared table (flag, help, metavar, kind), grouped
    # and made mutually exclusive as the table and the input layer say.
    groups: dict[str, argparse._ArgumentGroup | argparse.ArgumentParser] = {
        title: parser.add_argument_group(title) if title else parser for title in CLI_GROUPS
    }
    exclusive: dict[tuple[str, ...], argparse._MutuallyExclusiveGroup] = {}
    for row in PLAN_FIELDS:
        group = groups[row.cli_group]
        target: argparse._ActionsContainer = group
        if row.exclusive_with:
            if row.exclusive_with not in exclusive:
                exclusive[row.exclusive_with] = group.add_mutually_exclusive_group()
            target = exclusive[row.exclusive_with]
        target.add_argument(row.option, help=row.argparse_help, **_argument_kind(row))
        if row.flag == "params":  # beside the model's source, as always
            groups[row.cli_group].add_argument(
                "--list-models", action="store_true", help="list the model presets and exit"
            )
    parser.add_argument("--db", metavar="FILE", help="run history to take measured speeds from (default: the user's)")
    parser.add_argument("--no-calibration", action="store_true", help="ignore speeds measured in the run history")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_const", const="json", dest="format", help="print only JSON")
    out.add_argument("--csv", action="store_const", const="csv", dest="format", help="print only CSV")
    out.add_argument("--markdown", action="store_const", const="markdown", dest="format", help="print only Markdown")
    defaults = PlanInputs()  # the one place the planner's defaults live
    parser.set_defaults(**{name: getattr(defaults, name) for name in INPUT_NAMES})


def register(subparsers: argparse._SubParsersAction) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="plan one workload on one GPU option",
        description="Predict memory, runtime and cost of one workload on one GPU option.",
    )
    _add_workload_arguments(plan)
    plan.set_defaults(handler=run_plan)
    comparison = subparsers.add_parser(
        "compare",
        help="rank every GPU x count x pricing for one workload",
        description="Rank every catalog GPU x count (1, 2, 4, 8) x on-demand/spot.",
    )
    _add_workload_arguments(comparison)
    comparison.add_argument("--top", type=positive_int, metavar="N", help="show only the first N rows (text output)")
    comparison.add_argument(
        "--fit-settings",
        action="store_true",
        help="for each option the given settings do not fit, use the fastest settings that do (micro-batch with "
        "accumulation keeping the effective batch, checkpointing, 8-bit optimizer states, sharding); rows say which",
    )
    comparison.add_argument(
        "--pin",
        action="append",
        choices=sorted(PIN_FLAGS),
        metavar="SETTING",
        help=f"keep this setting as given (repeatable: {', '.join(sorted(PIN_FLAGS))}); without --fit-settings "
        "only the sharding is ever changed (a multi-GPU option that does not fit replicated is planned sharded)",
    )
    comparison.add_argument(
        "--min-gpu-memory",
        type=float,
        metavar="GB",
        help="only GPUs with at least this much memory, in GB as sold (40 keeps the A100 40GB)",
    )
    comparison.add_argument(
        "--gpu-family",
        action="append",
        metavar="NAME",
        help="only GPUs of this architecture (Hopper, Ampere, Ada, Blackwell, CDNA 3...; repeatable)",
    )
    comparison.add_argument(
        "--allow-qlora",
        action="store_true",
        help="with --fit-settings, a LoRA that no other setting fits may become QLoRA (4-bit base weights)",
    )
    comparison.set_defaults(handler=run_compare)


# ----------------------------------------------------------------------------------- inputs


def inputs_from_args(args: argparse.Namespace) -> PlanInputs:
    """The planner inputs of the parsed flags (validated by :class:`PlanInputs`)."""
    values = {name: getattr(args, name) for name in INPUT_NAMES}
    for name, value in values.items():
        if value == []:  # argparse reads `--price=--` as an empty list
            raise PlanInputError(name.replace("_", "-"), "expected a value, got '--'")
    return PlanInputs(**values)


def request_from_args(args: argparse.Namespace, default_gpu: str | None) -> PlanRequest:
    """The plan request of the flags; ``--price`` without ``--gpu`` plans without the catalog."""
    return inputs_from_args(args).to_request(default_gpu=default_gpu)


def _catalog() -> Catalog:
    try:
        return load_catalog()
    except CatalogError as exc:
        raise UsageError(str(exc)) from None


def _list_models(args: argparse.Namespace) -> bool:
    if not args.list_models:
        return False
    from gpuplanner.plan.model_spec import list_presets

    names = list_presets()
    print(to_json(names) if args.format == "json" else "\n".join(names))
    return True


def with_calibration(request: PlanRequest, args: argparse.Namespace, catalog: Catalog) -> PlanRequest:
    """Add the speeds measured for this model in the run history (finished runs, `trainer bench`)."""
    if args.no_calibration:
        return request
    if args.db is not None and (not isinstance(args.db, str) or not args.db.strip()):
        raise UsageError("--db: needs the file name of a run history")
    path = resolve_db_path(args.db)
    try:
        return calibrated_request(request, path, catalog)
    except (HistoryError, sqlite3.Error, OSError) as exc:
        raise UsageError(f"--db: cannot read the run history {path}: {exc}") from None


# ----------------------------------------------------------------------------------- plan


def run_plan(args: argparse.Namespace) -> int:
    if _list_models(args):
        return 0
    catalog = _catalog()
    request = with_calibration(request_from_args(args, default_gpu=example.GPU), args, catalog)
    plan = make_plan(request, catalog)
    document = plan_document(plan, inputs_document(request))
    if args.format == "json":
        print(to_json(document), end="")
    elif args.format in ("csv", "markdown"):
        rows = list(_flatten(document))
        render: Callable = to_csv if args.format == "csv" else to_markdown
        print(render(("field", "value"), rows), end="")
    else:
        skips: list[str] = []
        if not args.no_calibration and not plan.throughput.source.startswith("calibrated"):
            try:
                skips = calibration_skips(request.model.name, resolve_db_path(args.db))
            except (HistoryError, sqlite3.Error, OSError):
                skips = []  # with_calibration read it a moment ago; a file gone since says nothing here
        print(describe_plan(plan, document, skips), end="")
    return 0


def _flatten(document: dict[str, Any], prefix: str = "") -> Any:
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, name + ".")
        elif isinstance(value, list):
            yield name, "; ".join(str(v) for v in value)
        else:
            yield name, value


def _money(value: float | None) -> str:
    return "-" if value is None else human_money(value)  # cents; 3 significant figures below 10 cents


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _hours(value: float | None) -> str:
    return "-" if value is None else human_hours(value)  # "1 h 12 min", "4 min", "under 1 s"


def _offer_line(block: dict[str, Any]) -> str:
    """``rents 1 x p5.48xlarge (8 GPUs) in us-east-1, $55.04/instance-h; source: ..., as of 2025-06-15``."""
    if block["provider"] == "given":
        return f"rents {block['rents']}; source: {block['source']}"
    return (
        f"rents {block['rents']} in {block['region']}, {human_money(block['price_per_instance_hour'])}/instance-h; "
        f"source: {block['source'] or '-'}, as of {block['as_of'] or '-'}"
    )


def _step_lines(throughput: dict[str, Any]) -> list[str]:
    """The parts of one optimizer step on one GPU, with MFU and HFU (step-model estimates only)."""
    step = throughput.get("step")
    if not step:
        return []
    total = step["step_s"] or 1.0
    parts = ", ".join(
        f"{name} {step[key]:.3g} s ({step[key] / total:.0%})"
        for name, key in (
            ("compute", "compute_s"),
            ("recompute", "recompute_s"),
            ("memory-bound", "memory_s"),
            ("communication", "communication_s"),
            ("overhead", "overhead_s"),
        )
        if step[key]
    )
    line = f"         one step {step['step_s']:.3g} s per GPU: {parts}"
    if throughput.get("mfu") is not None and throughput.get("hfu") is not None:
        line += f"; MFU {throughput['mfu']:.2f}, HFU {throughput['hfu']:.2f}"
    return [line]


def _range_line(document: dict[str, Any]) -> str:
    """The likely (P10-P90) hours and cost and what they rest on."""
    hours = document.get("hours_range")
    if not hours or hours[0] is None:
        return ""
    text = f"Likely   {_span(_hours(hours[0]), _hours(hours[1]))}"
    cost = document.get("cost_range")
    if cost and cost[0] is not None:
        text += f", {_span(_money(cost[0]), _money(cost[1]))}"
    return text + f" ({document['range_basis']})"


def _span(low: str, high: str) -> str:
    """ "1 h 5 min to 2 h", or "under 1 s" once when both ends read the same (a tiny run)."""
    return low if low == high else f"{low} to {high}"


def _params_text(inputs: dict[str, Any]) -> str:
    """ "8.03B params", or for a mixture of experts "46.70B params, 12.88B active: 2 of 8 experts per token"."""
    text = f"{inputs['params'] / 1e9:.2f}B params"
    if inputs.get("experts"):
        text += (
            f", {inputs['active_params'] / 1e9:.2f}B active: "
            f"{inputs['experts_per_token']} of {inputs['experts']} experts per token"
        )
    return text


def describe_plan(plan: Plan, document: dict[str, Any], skips: list[str] | None = None) -> str:
    """The readable report of one plan."""
    inputs, memory, runtime = document["inputs"], document["memory"], document["runtime"]
    gpu = plan.gpu.name if plan.gpu else "your GPU"
    lines = [
        f"{inputs['model']} ({_params_text(inputs)}), {inputs['method']}, {plan.setup.precision}, "
        f"{inputs['gpus']} x {gpu}, micro-batch {inputs['micro_batch']} x accumulation {inputs['grad_accum']} "
        f"x {human_gpus(inputs['gpus'])} = effective batch {runtime['effective_batch']}, sequence {inputs['seq_len']}",
        "",
        "Peak memory per GPU"
        + (f" ({memory['source']}, peak at {memory['peak_moment']})" if memory.get("peak_moment") else ""),
    ]
    for key in ("weights", "gradients", "optimizer", "activations", "logits", "overhead"):
        lines.append(f"  {key:<12}{memory[key + '_gib']:>9.2f} GiB")
    verdict = {True: "fits", False: "DOES NOT FIT", None: "capacity unknown"}[memory["fits"]]
    capacity = f" of {memory['capacity_gib']:.1f} GiB" if memory["capacity_gib"] else ""
    lines.append(f"  {'total':<12}{memory['total_gib']:>9.2f} GiB{capacity}: {verdict}")
    if memory.get("allocated_gib") is not None and memory.get("reserved_gib") is not None:
        # what torch's own counters will read, beside the total (what nvidia-smi shows)
        lines.append(
            f"  torch reads  {memory['allocated_gib']:.2f} GiB allocated, {memory['reserved_gib']:.2f} GiB reserved "
            "(the total adds the CUDA context: nvidia-smi)"
        )
    if memory.get("max_micro_batch") is not None:
        lines.append(f"  largest micro-batch that fits: {memory['max_micro_batch']}")
    for suggestion in memory.get("suggestions") or []:
        lines.append(f"  to fit: {suggestion}")
    throughput = document["throughput"]
    lines += [
        "",
        f"Speed    {throughput['tokens_per_s']:,.0f} tokens/s, {throughput['samples_per_min']:,.1f} samples/min",
        f"         source: {throughput['source']}",
        *(f"         ({line})" for line in skips or []),
    ]
    lines += _step_lines(throughput)
    lines.append(
        f"Runtime  {_hours(runtime['hours'])}, {runtime['gpu_hours']:,.2f} GPU-hours, {runtime['optimizer_steps']:,} optimizer steps"
    )
    if runtime.get("run_overhead_hours"):
        lines.append(
            f"         of which whole-run overhead {_hours(runtime['run_overhead_hours'])} "
            f"({inputs['run_overhead_pct']:g}% of {_hours(runtime['steady_state_hours'])} steady-state training: "
            "restarts, evaluations, checkpoints, stragglers)"
        )
    if _range_line(document):
        lines.append(_range_line(document))
    on_demand, spot = document["on_demand"], document["spot"]
    if on_demand or spot:
        lines.append(describe_age(document.get("prices_as_of")).capitalize())
    if on_demand:
        where = (
            f" ({on_demand['provider']} {on_demand['instance_type']})".replace(" )", ")")
            if on_demand["provider"] != "given"
            else ""
        )
        lines.append(
            f"On-demand {_money(on_demand['cost_usd'])} at {human_money(on_demand['price_per_gpu_hour'])}/GPU-h x {on_demand['billed_gpus']}{where}"
        )
        lines.append("         " + _offer_line(on_demand))
    if spot and spot["hours"] is None:  # interruptions come faster than checkpoints (see the warnings)
        lines.append(f"Spot     never finishes at {human_money(spot['price_per_gpu_hour'])}/GPU-h")
        lines.append("         " + _offer_line(spot))
    elif spot:
        lines.append(
            f"Spot     {_money(spot['cost_usd'])} expected ({_hours(spot['hours'])}), "
            f"{spot_percentiles(_money(spot['p50_cost_usd']), _money(spot['p90_cost_usd']))} "
            f"at {human_money(spot['price_per_gpu_hour'])}/GPU-h"
        )
        lines.append("         " + _offer_line(spot))
        if spot.get("interruptions_per_hour") is not None:
            lines.append(
                f"         interruptions {spot['interruptions_per_hour']:g}/h ({spot['interruptions_source']})"
            )
        if spot["model"] == "interruptions":
            lines.append(
                f"         overhead {_hours(spot['overhead_hours'])}: {_count(spot['expected_interruptions'])} interruptions, "
                f"restarts {_hours(spot['restart_hours'])}, lost work {_hours(spot['lost_work_hours'])}, "
                f"checkpoints {_hours(spot['checkpoint_hours'])}"
            )
        else:
            lines.append(f"         overhead {_hours(spot['overhead_hours'])} (flat {inputs['spot_overhead_pct']:g}%)")
        if spot["savings_pct"] is not None:
            lines.append(f"         saves {spot['savings_pct']:.1f}% against on-demand")
        if spot["p_meet_deadline"] is not None:
            lines.append(f"         chance to meet the deadline: {spot['p_meet_deadline']:.0%}")
    bill = plan_bill(plan)
    if bill is not None:  # a dataset size was given: compute, storage and transfer (plan/storage_cost.py)
        lines += describe_bill(bill)
    if document["deadline_ok"] is not None:
        lines.append(
            f"Deadline {inputs['deadline_hours']:g} h: {'met' if document['deadline_ok'] else 'MISSED'} ({inputs['pricing']})"
        )
    if document["budget_ok"] is not None:
        lines.append(
            f"Budget   {human_money(inputs['budget_usd'])}: {'within' if document['budget_ok'] else 'OVER'} ({inputs['pricing']})"
        )
    if document["gpu_hours_ok"] is not None:
        lines.append(
            f"GPU-hours cap {inputs['max_gpu_hours']:,g}: {'within' if document['gpu_hours_ok'] else 'OVER'} "
            f"({inputs['pricing']})"
        )
    for warning in document["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- compare


def run_compare(args: argparse.Namespace) -> int:
    if _list_models(args):
        return 0
    catalog = _catalog()
    given = inputs_from_args(args)  # `--gpu H100:8` is read here as --gpu H100 --gpus 8
    request = with_calibration(given.to_request(default_gpu=None), args, catalog)
    counts = (given.gpus,) if given.gpus else GPU_COUNTS
    names = None
    if args.min_gpu_memory is not None or args.gpu_family:
        if args.min_gpu_memory is not None and not (math.isfinite(args.min_gpu_memory) and args.min_gpu_memory > 0):
            raise UsageError(f"--min-gpu-memory: a positive number of GB, got {args.min_gpu_memory!r}")
        if request.gpu is not None:
            raise UsageError("--min-gpu-memory/--gpu-family: filter the catalog's GPUs, not one given with --gpu")
        names = select_gpus(catalog, args.min_gpu_memory, args.gpu_family or ())
    # with --fit-settings each option gets the fastest settings that fit (--pin keeps a setting)
    rows = compare(
        request,
        catalog,
        counts=counts,
        gpus=names,
        fit_settings=args.fit_settings,
        pinned=tuple(PIN_FLAGS[name] for name in args.pin or ()),
        allow_qlora=args.allow_qlora,
    )
    inputs = inputs_document(request)
    if args.format == "json":
        print(to_json(compare_documents(rows, inputs)), end="")
        return 0
    columns = compare_columns(rows)
    table = [compare_cells(row, with_bill=has_bill(rows)) for row in rows]
    ages = rows_offer_ages(rows)
    dated = describe_offer_ages(ages) + "; each row names its offer's date and source."
    stale = stale_offers_warning(ages)
    if args.format == "csv":
        print(to_csv(columns, table), end="")
    elif args.format == "markdown":
        print(to_markdown(columns, table), end="")
        print("\n" + dated + (f"\n\nWarning: {stale}" if stale else ""))
    else:
        shown = table[: args.top] if args.top else table
        print(to_text(columns, shown), end="")
        print("\n" + dated)
        if stale:
            print(f"warning: {stale}")
        print(recommendation(rows))
        best = next((row for row in rows if row.usable), None)
        if best is not None:
            line = _range_line(compare_document(best, inputs))
            if line:
                print(line.replace("Likely  ", "Likely for the best option:", 1))
    return 0
