"""`gpuplanner plan` (one workload on one GPU option) and `gpuplanner compare` (the ranked table).

Flag names are a stable contract (scripts and the desktop app use them). Sizes accept suffixes:
``7B``, ``1.5e9``, ``100k``, ``2M``. With no flags both commands plan the built-in example
(LoRA of Llama 3.1 8B on 50,000 samples of 2,048 tokens).
"""

from __future__ import annotations

import argparse
import math
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuplanner.cli import UsageError
from gpuplanner.export.tables import to_csv, to_json, to_markdown, to_text
from gpuplanner.history.calibration import measurements
from gpuplanner.history.db import HistoryError, open_db, resolve_db_path
from gpuplanner.plan import example
from gpuplanner.plan.catalog import Catalog, CatalogError, load_catalog
from gpuplanner.plan.compare import GPU_COUNTS, compare, recommendation
from gpuplanner.plan.documents import compare_document, plan_document, rental_note, rows_prices_as_of
from gpuplanner.plan.model_spec import ModelSpec, from_config_file, from_param_count, from_preset
from gpuplanner.plan.planner import MeasuredSpeed, Plan, PlanRequest, PricingInputs, make_plan
from gpuplanner.plan.price_dates import describe_age, stale_warning
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import ATTENTION, CHECKPOINTING, METHODS, OPTIMIZERS, PRECISIONS, SHARDING, TrainSetup

GIB = 1024**3
_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_amount(text: str) -> float:
    """A number with an optional k/M/B/T suffix: ``7B`` -> 7e9, ``100k`` -> 1e5."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = 1.0
    if cleaned and cleaned[-1].lower() in _SUFFIXES:
        scale = _SUFFIXES[cleaned[-1].lower()]
        cleaned = cleaned[:-1]
    try:
        value = float(cleaned) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (suffixes k, M, B, T allowed), got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = parse_amount(text)
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(value)


def positive_float(text: str) -> float:
    value = parse_amount(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = parse_amount(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or a positive number, got {text!r}")
    return value


def share(text: str) -> float:
    value = parse_amount(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1 (0.6 = 60%), got {text!r}")
    return value


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model and method")
    which = model.add_mutually_exclusive_group()
    which.add_argument(
        "--model",
        metavar="NAME",
        help=f"a preset (default {example.MODEL}); `gpuplanner plan --list-models` lists them",
    )
    which.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    which.add_argument("--params", type=positive_float, metavar="N", help="a bare parameter count, e.g. 7B")
    model.add_argument("--list-models", action="store_true", help="list the model presets and exit")
    model.add_argument(
        "--method", choices=METHODS, default=example.METHOD, help="full fine-tune, LoRA or QLoRA (4-bit base)"
    )
    model.add_argument("--lora-rank", type=positive_int, default=example.LORA_RANK, metavar="R")
    model.add_argument(
        "--lora-targets",
        default=",".join(example.LORA_TARGETS),
        metavar="NAMES",
        help="comma-separated module names, or `attention` / `all-linear`",
    )
    model.add_argument("--precision", choices=PRECISIONS, default=example.PRECISION)
    model.add_argument("--optimizer", choices=OPTIMIZERS, default=example.OPTIMIZER)
    batch = parser.add_argument_group("batch and sequence")
    batch.add_argument(
        "--micro-batch",
        type=positive_int,
        default=example.MICRO_BATCH,
        metavar="N",
        help="sequences per GPU per forward pass",
    )
    batch.add_argument(
        "--grad-accum",
        type=positive_int,
        default=example.GRAD_ACCUM,
        metavar="N",
        help="micro-batches per optimizer step",
    )
    batch.add_argument("--seq-len", type=positive_int, default=example.SEQ_LEN, metavar="TOKENS")
    batch.add_argument("--grad-checkpointing", choices=CHECKPOINTING, default=example.GRAD_CHECKPOINTING)
    batch.add_argument("--attention", choices=ATTENTION, default=example.ATTENTION)
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--gpu", metavar="NAME", help=f"a catalog GPU (plan default {example.GPU}; compare: all)")
    hardware.add_argument(
        "--gpus", type=positive_int, metavar="N", help="GPUs in the run (plan: default 1; compare: 1, 2, 4 and 8)"
    )
    hardware.add_argument(
        "--sharding",
        choices=SHARDING,
        default="ddp",
        help="ddp replicates, zero2 shards grads+optimizer, fsdp shards everything",
    )
    hardware.add_argument(
        "--mfu", type=share, metavar="SHARE", help="model-FLOPs utilisation to assume (default: the GPU's)"
    )
    hardware.add_argument(
        "--headroom",
        type=share,
        default=0.95,
        metavar="SHARE",
        help="share of GPU memory a plan may use (default 0.95)",
    )
    data = parser.add_argument_group("data and speed")
    size = data.add_mutually_exclusive_group()
    size.add_argument(
        "--samples", type=positive_int, metavar="N", help=f"training sequences per epoch (default {example.SAMPLES:,})"
    )
    size.add_argument("--tokens", type=positive_int, metavar="N", help="training tokens per epoch")
    data.add_argument("--epochs", type=positive_float, default=1.0, metavar="N")
    speed = data.add_mutually_exclusive_group()
    speed.add_argument("--tokens-per-s", type=positive_float, metavar="X", help="measured speed of the whole run")
    speed.add_argument("--samples-per-min", type=positive_float, metavar="X", help="measured speed of the whole run")
    prices = parser.add_argument_group("pricing and spot")
    prices.add_argument(
        "--price", type=positive_float, metavar="USD", help="on-demand $ per GPU-hour (without --gpu: no catalog)"
    )
    spot_price = prices.add_mutually_exclusive_group()
    spot_price.add_argument("--spot-price", type=positive_float, metavar="USD", help="spot $ per GPU-hour")
    spot_price.add_argument("--spot-discount", type=share, metavar="SHARE", help="0.6 = spot costs 60%% less per hour")
    rate = prices.add_mutually_exclusive_group()
    rate.add_argument("--interruptions-per-hour", type=non_negative_float, metavar="RATE")
    rate.add_argument("--mean-hours-between-interruptions", type=positive_float, metavar="HOURS")
    rate.add_argument(
        "--spot-overhead-pct",
        type=non_negative_float,
        metavar="PCT",
        help="10 = spot takes 10%% longer than on-demand (instead of the interruption model)",
    )
    prices.add_argument(
        "--restart-minutes",
        type=non_negative_float,
        default=10.0,
        metavar="MIN",
        help="boot, load checkpoint, warm up (default 10)",
    )
    prices.add_argument(
        "--checkpoint-minutes",
        type=positive_float,
        default=30.0,
        metavar="MIN",
        help="checkpoint interval (default 30)",
    )
    prices.add_argument(
        "--checkpoint-write-s",
        type=non_negative_float,
        metavar="S",
        help="seconds to write one checkpoint (default: estimated from its size)",
    )
    prices.add_argument(
        "--pricing",
        choices=("on-demand", "spot"),
        default="on-demand",
        help="which price the deadline and budget checks use (plan)",
    )
    goals = parser.add_argument_group("deadline and budget")
    goals.add_argument("--deadline-hours", type=positive_float, metavar="H")
    goals.add_argument("--budget-usd", type=positive_float, metavar="USD")
    parser.add_argument(
        "--memory",
        choices=("formula", "trace"),
        default="formula",
        help="trace: run one real training step on fake tensors to measure memory (needs torch)",
    )
    parser.add_argument("--db", metavar="FILE", help="run history to take measured speeds from (default: the user's)")
    parser.add_argument("--no-calibration", action="store_true", help="ignore speeds measured in the run history")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_const", const="json", dest="format", help="print only JSON")
    out.add_argument("--csv", action="store_const", const="csv", dest="format", help="print only CSV")
    out.add_argument("--markdown", action="store_const", const="markdown", dest="format", help="print only Markdown")


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
    comparison.set_defaults(handler=run_compare)


# ----------------------------------------------------------------------------------- inputs


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    if args.model_config:
        return from_config_file(args.model_config)
    if args.params is not None:
        return from_param_count(int(args.params))
    return from_preset(args.model or example.MODEL)


def setup_from_args(args: argparse.Namespace, gpus: int) -> TrainSetup:
    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    return TrainSetup(
        method=args.method,
        lora_rank=args.lora_rank,
        lora_targets=targets,
        precision=args.precision,
        optimizer=args.optimizer,
        micro_batch=args.micro_batch,
        grad_accum=args.grad_accum,
        seq_len=args.seq_len,
        grad_checkpointing=args.grad_checkpointing,
        attention=args.attention,
        gpus=gpus,
        sharding=args.sharding,
    )


def request_from_args(args: argparse.Namespace, gpus: int, default_gpu: str | None) -> PlanRequest:
    """The plan request of the flags; ``--price`` without ``--gpu`` plans without the catalog."""
    rate = args.interruptions_per_hour
    if args.mean_hours_between_interruptions is not None:
        rate = 1.0 / args.mean_hours_between_interruptions
    samples = args.samples if (args.samples is not None or args.tokens is not None) else example.SAMPLES
    gpu = args.gpu or (None if args.price is not None else default_gpu)
    return PlanRequest(
        model=model_from_args(args),
        setup=setup_from_args(args, gpus),
        workload=Workload(samples=None if args.tokens else samples, epochs=args.epochs, tokens=args.tokens),
        gpu=gpu,
        pricing=PricingInputs(
            price=args.price,
            spot_price=args.spot_price,
            spot_discount=args.spot_discount,
            interruptions_per_hour=rate,
            restart_minutes=args.restart_minutes,
            checkpoint_minutes=args.checkpoint_minutes,
            checkpoint_write_s=args.checkpoint_write_s,
            spot_overhead_pct=args.spot_overhead_pct,
        ),
        pricing_mode=args.pricing,
        deadline_hours=args.deadline_hours,
        budget_usd=args.budget_usd,
        mfu=args.mfu,
        tokens_per_s=args.tokens_per_s,
        samples_per_min=args.samples_per_min,
        headroom=args.headroom,
        memory_source=args.memory,
    )


def inputs_document(request: PlanRequest) -> dict[str, Any]:
    setup, workload, pricing = request.setup, request.workload, request.pricing
    return {
        "model": request.model.name,
        "params": request.model.n_params,
        "model_source": request.model.source,
        "method": setup.method,
        "lora_rank": setup.lora_rank if setup.uses_adapters else None,
        "lora_targets": list(setup.lora_targets) if setup.uses_adapters else None,
        "precision": setup.precision,
        "optimizer": setup.optimizer,
        "micro_batch": setup.micro_batch,
        "grad_accum": setup.grad_accum,
        "seq_len": setup.seq_len,
        "grad_checkpointing": setup.grad_checkpointing,
        "attention": setup.attention,
        "gpu": request.gpu,
        "gpus": setup.gpus,
        "sharding": setup.sharding,
        "samples": workload.samples,
        "tokens": workload.tokens,
        "epochs": workload.epochs,
        "tokens_per_s": request.tokens_per_s,
        "samples_per_min": request.samples_per_min,
        "mfu": request.mfu,
        "price": pricing.price,
        "spot_price": pricing.spot_price,
        "spot_discount": pricing.spot_discount,
        "interruptions_per_hour": pricing.interruptions_per_hour,
        "restart_minutes": pricing.restart_minutes,
        "checkpoint_minutes": pricing.checkpoint_minutes,
        "checkpoint_write_s": pricing.checkpoint_write_s,
        "spot_overhead_pct": pricing.spot_overhead_pct,
        "pricing": request.pricing_mode,
        "deadline_hours": request.deadline_hours,
        "budget_usd": request.budget_usd,
        "headroom": request.headroom,
    }


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
    path = resolve_db_path(args.db)
    try:
        return calibrated_request(request, path, catalog)
    except (HistoryError, sqlite3.Error) as exc:
        raise UsageError(f"--db: cannot read the run history {path}: {exc}") from None


def calibrated_request(request: PlanRequest, db_path: Path, catalog: Catalog) -> PlanRequest:
    """The request with the speeds measured for its model in the history at ``db_path`` (unchanged when the
    file does not exist or holds nothing that applies). Opens and closes its own connection, so any thread
    may call it; raises HistoryError or sqlite3.Error when the file cannot be read."""
    measured = measured_speeds(request, db_path, catalog)
    return replace(request, measured=measured) if measured else request


def measured_speeds(request: PlanRequest, db_path: Path, catalog: Catalog) -> dict[str, MeasuredSpeed]:
    """Per catalog GPU name, the speed measured in the history for this model, training method (full or
    LoRA), sequence length and arithmetic (fp32 or 16-bit)."""
    if not db_path.exists():
        return {}
    db = open_db(db_path, create=False)
    try:
        found = measurements(
            db,
            model_name=request.model.name,
            method=request.setup.method,
            seq_len=request.setup.seq_len,
            precision=request.setup.precision,
        )
    finally:
        db.close()
    measured: dict[str, MeasuredSpeed] = {}
    for calibration in found.values():
        gpu = catalog.find_gpu(calibration.gpu_type)
        if gpu is None or calibration.tokens_per_s_per_gpu is None:
            continue
        where = "runs" if calibration.source == "run" else "trainer bench results"
        source = f"{where} {', '.join(f'#{i}' for i in calibration.ids)} on {calibration.gpu_type}"
        peak = calibration.peak_mem_bytes / 1024**3 if calibration.peak_mem_bytes else None
        measured[gpu.name] = MeasuredSpeed(gpu.name, calibration.tokens_per_s_per_gpu, source, peak)
    return measured


# ----------------------------------------------------------------------------------- plan


def run_plan(args: argparse.Namespace) -> int:
    if _list_models(args):
        return 0
    catalog = _catalog()
    request = with_calibration(request_from_args(args, args.gpus or 1, default_gpu=example.GPU), args, catalog)
    plan = make_plan(request, catalog)
    document = plan_document(plan, inputs_document(request))
    if args.format == "json":
        print(to_json(document), end="")
    elif args.format in ("csv", "markdown"):
        rows = list(_flatten(document))
        render: Callable = to_csv if args.format == "csv" else to_markdown
        print(render(("field", "value"), rows), end="")
    else:
        print(describe_plan(plan, document), end="")
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
    return "-" if value is None else f"${value:,.2f}"


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} h"


def _offer_line(block: dict[str, Any]) -> str:
    """``rents 1 x p5.48xlarge (8 GPUs) in us-east-1, $55.04/instance-h; source: ..., as of 2025-06-15``."""
    if block["provider"] == "given":
        return f"rents {block['rents']}; source: {block['source']}"
    return (
        f"rents {block['rents']} in {block['region']}, ${block['price_per_instance_hour']:,.2f}/instance-h; "
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
    text = f"Likely   {_hours(hours[0])} to {_hours(hours[1])}"
    cost = document.get("cost_range")
    if cost and cost[0] is not None:
        text += f", {_money(cost[0])} to {_money(cost[1])}"
    return text + f" ({document['range_basis']})"


def describe_plan(plan: Plan, document: dict[str, Any]) -> str:
    """The readable report of one plan."""
    inputs, memory, runtime = document["inputs"], document["memory"], document["runtime"]
    gpu = plan.gpu.name if plan.gpu else "your GPU"
    lines = [
        f"{inputs['model']} ({inputs['params'] / 1e9:.2f}B params), {inputs['method']}, {plan.setup.precision}, "
        f"{inputs['gpus']} x {gpu}, micro-batch {inputs['micro_batch']} x accumulation {inputs['grad_accum']} "
        f"x {inputs['gpus']} GPU(s) = effective batch {runtime['effective_batch']}, sequence {inputs['seq_len']}",
        "",
        "Peak memory per GPU"
        + (f" ({memory['source']}, peak at {memory['peak_moment']})" if memory.get("peak_moment") else ""),
    ]
    for key in ("weights", "gradients", "optimizer", "activations", "logits", "overhead"):
        lines.append(f"  {key:<12}{memory[key + '_gib']:>9.2f} GiB")
    verdict = {True: "fits", False: "DOES NOT FIT", None: "capacity unknown"}[memory["fits"]]
    capacity = f" of {memory['capacity_gib']:.1f} GiB" if memory["capacity_gib"] else ""
    lines.append(f"  {'total':<12}{memory['total_gib']:>9.2f} GiB{capacity}: {verdict}")
    if memory.get("max_micro_batch") is not None:
        lines.append(f"  largest micro-batch that fits: {memory['max_micro_batch']}")
    for suggestion in memory.get("suggestions") or []:
        lines.append(f"  to fit: {suggestion}")
    throughput = document["throughput"]
    lines += [
        "",
        f"Speed    {throughput['tokens_per_s']:,.0f} tokens/s, {throughput['samples_per_min']:,.1f} samples/min",
        f"         source: {throughput['source']}",
    ]
    lines += _step_lines(throughput)
    lines.append(
        f"Runtime  {_hours(runtime['hours'])}, {runtime['gpu_hours']:,.2f} GPU-hours, {runtime['optimizer_steps']:,} optimizer steps"
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
            f"On-demand {_money(on_demand['cost_usd'])} at ${on_demand['price_per_gpu_hour']:.2f}/GPU-h x {on_demand['billed_gpus']}{where}"
        )
        lines.append("         " + _offer_line(on_demand))
    if spot:
        lines.append(
            f"Spot     {_money(spot['cost_usd'])} expected ({_hours(spot['hours'])}), P50 {_money(spot['p50_cost_usd'])}, "
            f"P90 {_money(spot['p90_cost_usd'])} at ${spot['price_per_gpu_hour']:.2f}/GPU-h"
        )
        lines.append("         " + _offer_line(spot))
        if spot.get("interruptions_per_hour") is not None:
            lines.append(
                f"         interruptions {spot['interruptions_per_hour']:g}/h ({spot['interruptions_source']})"
            )
        if spot["model"] == "interruptions":
            lines.append(
                f"         overhead {_hours(spot['overhead_hours'])}: {spot['expected_interruptions']:.2f} interruptions, "
                f"restarts {_hours(spot['restart_hours'])}, lost work {_hours(spot['lost_work_hours'])}, "
                f"checkpoints {_hours(spot['checkpoint_hours'])}"
            )
        else:
            lines.append(f"         overhead {_hours(spot['overhead_hours'])} (flat {inputs['spot_overhead_pct']:g}%)")
        if spot["savings_pct"] is not None:
            lines.append(f"         saves {spot['savings_pct']:.1f}% against on-demand")
        if spot["p_meet_deadline"] is not None:
            lines.append(f"         chance to meet the deadline: {spot['p_meet_deadline']:.0%}")
    if document["deadline_ok"] is not None:
        lines.append(
            f"Deadline {inputs['deadline_hours']:g} h: {'met' if document['deadline_ok'] else 'MISSED'} ({inputs['pricing']})"
        )
    if document["budget_ok"] is not None:
        lines.append(
            f"Budget   ${inputs['budget_usd']:,.2f}: {'within' if document['budget_ok'] else 'OVER'} ({inputs['pricing']})"
        )
    for warning in document["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- compare

COMPARE_COLUMNS = (
    "rank",
    "gpu",
    "gpus",
    "pricing",
    "provider",
    "fits",
    "mem_gib",
    "hours",
    "cost_usd",
    "p90_cost_usd",
    "meets_deadline",
    "within_budget",
    "reason",
    "rents",
    "price_per_gpu_hour",
    "price_as_of",
    "price_source",
)


def run_compare(args: argparse.Namespace) -> int:
    if _list_models(args):
        return 0
    catalog = _catalog()
    request = with_calibration(request_from_args(args, args.gpus or 1, default_gpu=None), args, catalog)
    counts = (args.gpus,) if args.gpus else GPU_COUNTS
    # fitted settings per option, when the command line offers the switch (--fit-settings, --pin)
    rows = compare(
        request,
        catalog,
        counts=counts,
        fit_settings=bool(getattr(args, "fit_settings", False)),
        pinned=tuple(getattr(args, "pin", None) or ()),
    )
    inputs = inputs_document(request)
    if args.format == "json":
        print(to_json([compare_document(row, inputs) for row in rows]), end="")
        return 0
    table = [
        (
            row.rank,
            row.gpu,
            row.gpus,
            row.pricing,
            row.provider,
            row.plan.fits,
            round(row.plan.memory.total / GIB, 2),
            _round(row.hours, 2),
            _round(row.cost_usd, 2),
            _round(row.p90_cost_usd, 2),
            row.plan.deadline_ok,
            row.plan.budget_ok,
            row.reason or ("fitted: " + ", ".join(row.fitted) if row.fitted else ""),
            *_row_price(row),
        )
        for row in rows
    ]
    as_of = rows_prices_as_of(rows)
    dated = describe_age(as_of).capitalize() + "; each row names its offer's date and source."
    stale = stale_warning(as_of)
    if args.format == "csv":
        print(to_csv(COMPARE_COLUMNS, table), end="")
    elif args.format == "markdown":
        print(to_markdown(COMPARE_COLUMNS, table), end="")
        print("\n" + dated + (f"\n\nWarning: {stale}" if stale else ""))
    else:
        shown = table[: args.top] if args.top else table
        print(to_text(COMPARE_COLUMNS, shown), end="")
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


def _row_price(row: Any) -> tuple[str | None, float | None, str | None, str | None]:
    """What a comparison row rents, its price per GPU-hour, and that price's date and source."""
    choice = row.plan.on_demand if row.pricing == "on-demand" else (row.plan.spot.price if row.plan.spot else None)
    if choice is None:
        return None, None, None, None
    return rental_note(choice, row.gpus), choice.usd_per_gpu_hour, choice.as_of or None, choice.source or None


def _round(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)
