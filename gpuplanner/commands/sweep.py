"""`gpuplanner sweep plan|run|size`: budgeted hyperparameter searches with pruning (on Optuna).

    gpuplanner sweep plan [plan flags] --trials N [--pruner P ...] [--parallel P] [--budget-usd X] [--max-gpu-hours Y]
    gpuplanner sweep run --host NAME[,NAME...] --space SPACE.toml --trials N --budget-usd X [...] -- TRAINER FLAGS
    gpuplanner sweep size --budget-usd X [--gpu NAME] [--price USD] [--mfu SHARE]

Exit codes: 0 done (a search stopped by its cap included), 1 a search that could not go on (all hosts
failing), 2 bad input (one line naming the flag or file; nothing started).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuplanner.app.sweep_requests import (
    ScheduleRequest,
    SearchPlanRequest,
    SweepRunRequest,
    split_hosts,
    sweep_settings,
)
from gpuplanner.app.sweep_requests import search_estimate as app_search_estimate
from gpuplanner.commands.hosts import terminal_prompter

# The one place this command depends on `gpuplanner plan`'s flags: the per-trial workload is exactly a plan.
from gpuplanner.commands.plan import _add_workload_arguments, request_from_args, with_calibration
from gpuplanner.commands.spend import add_tag_flag
from gpuplanner.commands.sweep_show import register_show
from gpuplanner.export.human import human_gpus, human_money
from gpuplanner.export.tables import to_csv, to_json, to_markdown, to_text
from gpuplanner.history.db import resolve_db_path
from gpuplanner.launch.manager import RunManager
from gpuplanner.plan import example
from gpuplanner.plan.catalog import Catalog, CatalogError, load_catalog
from gpuplanner.plan.inputs import gpu_and_count
from gpuplanner.plan.setup import PRECISIONS, PlanInputError
from gpuplanner.sweep.estimate import SearchEstimate
from gpuplanner.sweep.runner import SweepResult, SweepRunner, SweepSettings
from gpuplanner.sweep.schedule import PRUNERS
from gpuplanner.sweep.sizing import FORMULA_SOURCE, Sizing, SizingRequest, size_for_budget
from gpuplanner.sweep.study import SAMPLERS


def _number(text: str) -> float:
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = _number(text)
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(value)


def _trial_request(args: argparse.Namespace) -> Any:
    """One trial's plan request from `gpuplanner plan`'s flags; ``--budget-usd`` and ``--max-gpu-hours`` are the
    search's caps, not the trial's."""
    return replace(request_from_args(args, default_gpu=example.GPU), budget_usd=None, max_gpu_hours=None)


def register(subparsers: Any) -> None:
    sweep = subparsers.add_parser(
        "sweep",
        help="plan, run or size a budgeted hyperparameter search",
        description=__doc__.splitlines()[0],
    )
    actions = sweep.add_subparsers(dest="sweep_action", metavar="ACTION", parser_class=type(sweep))
    actions.required = True
    plan = actions.add_parser(
        "plan",
        help="expected GPU-hours, cost and wall time of a search, with and without pruning",
        description="Estimate a hyperparameter search of identical trials (each one the plan of the flags) "
        "under a pruning schedule, against a $ and GPU-hour cap.",
    )
    _add_workload_arguments(plan)
    _add_schedule_arguments(plan, unit="epochs")
    plan.set_defaults(handler=run_sweep_plan)
    run = actions.add_parser(
        "run",
        help="run a search of the bundled trainer on hosts under a hard $ / GPU-hour cap",
        description="Run an Optuna study whose trials are runs of the bundled trainer, pruned at milestones and "
        "stopped at the cap; run it again with the same --study to continue after a crash.",
        usage="gpuplanner sweep run --host NAME[,NAME...] --space SPACE.toml --trials N --max-steps N "
        "(--budget-usd X | --max-gpu-hours Y) [options] -- TRAINER FLAGS...",
    )
    _add_run_arguments(run)
    _add_schedule_arguments(run, unit="steps")
    run.set_defaults(handler=run_sweep_run)
    size = actions.add_parser(
        "size",
        help="the compute-optimal model (parameters, tokens) a budget buys on one GPU option",
        description="Size a model for a budget: the compute a $ or GPU-hour cap buys on a GPU and the "
        "Chinchilla-optimal parameters and tokens for it, with the source of each figure.",
    )
    _add_size_arguments(size)
    size.set_defaults(handler=run_sweep_size)
    register_show(actions)


def _add_schedule_arguments(parser: argparse.ArgumentParser, unit: str) -> None:
    word, one = ("epochs", "epoch") if unit == "epochs" else ("steps", "step")
    search = parser.add_argument_group("search")
    search.add_argument("--trials", type=positive_int, required=True, metavar="N", help="trials in the search")
    search.add_argument(
        "--pruner",
        choices=PRUNERS,
        default="successive-halving",
        help="successive-halving (ASHA, default), hyperband, percentile (prune the bottom X%% at one point) or none",
    )
    search.add_argument(
        f"--min-{word}",
        dest="min_resource",
        type=positive_float if unit == "epochs" else positive_int,
        metavar=word.upper(),
        help=f"first milestone of successive halving / hyperband, in {word} (default: the trial / reduction factor^2)",
    )
    search.add_argument(
        "--reduction-factor",
        type=positive_int,
        default=3,
        metavar="ETA",
        help="successive halving keeps the best 1/ETA at each milestone (default 3)",
    )
    search.add_argument(
        "--prune-percent", type=positive_float, metavar="PCT", help="percentile: prune the bottom PCT%%"
    )
    search.add_argument(
        f"--prune-at-{one}",
        dest="prune_at",
        type=positive_float if unit == "epochs" else positive_int,
        metavar=one.upper(),
        help=f"percentile: the {one} to judge at",
    )
    search.add_argument(
        "--startup-trials",
        type=int,
        default=1,
        metavar="N",
        help="percentile: trials that must finish before any is pruned (default 1)",
    )
    if unit == "steps":  # `sweep plan` has it among `plan`'s flags (there: the search's cap, not the trial's)
        search.add_argument(
            "--max-gpu-hours", type=positive_float, metavar="H", help="cap on the GPU-hours of the whole search"
        )
    if unit == "epochs":
        search.add_argument(
            "--parallel", type=positive_int, default=1, metavar="P", help="trials at once (GPUs or hosts)"
        )
        search.add_argument(
            "--trial-overhead-minutes",
            type=non_negative_float,
            default=0.0,
            metavar="MIN",
            help="billed minutes each trial spends starting (boot, load, first evaluation); default 0",
        )


def schedule_request(args: argparse.Namespace) -> ScheduleRequest:
    """The pruning schedule's flags."""
    return ScheduleRequest(
        pruner=args.pruner,
        min_resource=args.min_resource,
        reduction_factor=args.reduction_factor,
        prune_percent=args.prune_percent,
        prune_at=args.prune_at,
        startup_trials=args.startup_trials,
    )


def _catalog() -> Catalog:
    try:
        return load_catalog()
    except CatalogError as exc:
        raise PlanInputError("gpu", str(exc)) from None


def search_estimate(args: argparse.Namespace, catalog: Any) -> tuple[SearchEstimate, dict[str, Any]]:
    """`sweep plan` for parsed flags: the estimate and its JSON document, with the speeds measured in the
    history at ``args.db``."""
    request = SearchPlanRequest(
        trial=with_calibration(_trial_request(args), args, catalog),
        trials=args.trials,
        schedule=schedule_request(args),
        parallel=args.parallel,
        budget_usd=args.budget_usd,
        max_gpu_hours=args.max_gpu_hours,
        trial_overhead_minutes=args.trial_overhead_minutes,
    )
    return app_search_estimate(request, catalog)


def run_sweep_plan(args: argparse.Namespace) -> int:
    estimate, document = search_estimate(args, _catalog())
    if args.format == "json":
        print(to_json(document), end="")
    elif args.format in ("csv", "markdown"):
        render = to_csv if args.format == "csv" else to_markdown
        print(render(MILESTONE_COLUMNS, milestone_rows(estimate)), end="")
    else:
        print(describe_search(estimate, document), end="")
    return 0


MILESTONE_COLUMNS = ("resource", "unit", "trials_reaching", "trials_continuing")


def milestone_rows(estimate: SearchEstimate) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = [
        (round(s.resource, 4), estimate.schedule.unit, round(s.reaching, 3), round(s.continuing, 3))
        for s in estimate.milestones
    ]
    rows.append(
        (
            round(estimate.schedule.max_resource, 4),
            estimate.schedule.unit,
            round(estimate.pruned.trials_finishing, 3),
            None,
        )
    )
    return rows


def describe_search(estimate: SearchEstimate, document: dict[str, Any]) -> str:
    """The readable report of a search estimate."""
    search, trial = document["search"], document["trial"]
    lines = [
        f"{search['trials']} trials, {search['parallel']} at a time, pruner {search['pruner']}; "
        f"one full trial: {trial['hours']:,.3f} h, {trial['gpu_hours']:,.3f} GPU-hours, {human_money(trial['cost_usd'])} "
        f"({trial['pricing']})",
        "",
    ]
    rows = milestone_rows(estimate)
    lines.append(to_text(MILESTONE_COLUMNS, rows).rstrip("\n"))
    lines.append("")
    table = [
        (name, part["gpu_hours"], part["cost_usd"], part["wall_hours"], part["trials_finishing"])
        for name, part in (("with pruning", document["pruned"]), ("without pruning", document["unpruned"]))
    ]
    lines.append(to_text(("search", "gpu_hours", "cost_usd", "wall_hours", "trials_finishing"), table).rstrip("\n"))
    saving = document["saving"]
    if saving["pct"] is not None:
        lines.append(
            f"pruning saves {human_money(saving['cost_usd'])} ({saving['pct']:.1f}%) and {saving['gpu_hours']:,.2f} GPU-hours"
        )
    caps = document["caps"]
    if caps["binding"] is not None:
        verdict = "finishes under the cap" if caps["finishes_under_cap"] else "DOES NOT finish under the cap"
        shares = ", ".join(
            f"{name} {caps[name + '_share']:.0%} used"
            for name in ("budget_usd", "max_gpu_hours")
            if caps[name + "_share"] is not None
        )
        lines.append(
            f"caps: {shares}; {caps['binding']} binds first; the search {verdict} "
            f"({caps['trials_within_cap']} of {search['trials']} trials fit)"
        )
    for warning in document["warnings"] + document["trial_plan"]["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- run


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        required=True,
        metavar="NAME[,NAME...]",
        help="hosts to run trials on, one trial at a time per name (repeat a name for more: local,local)",
    )
    parser.add_argument("--space", required=True, metavar="SPACE.toml", help="the search space (see docs/sweeps.md)")
    parser.add_argument(
        "--max-steps", type=positive_int, required=True, metavar="N", help="optimizer steps of a full trial"
    )
    parser.add_argument("--budget-usd", type=positive_float, metavar="USD", help="cap on the spend of the whole search")
    parser.add_argument(
        "--study", metavar="NAME", help="study name (default: the space file's name); the same name continues it"
    )
    parser.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler (default tpe)")
    parser.add_argument("--seed", type=int, metavar="N", help="sampler seed (repeatable searches)")
    parser.add_argument(
        "--step-seconds",
        type=positive_float,
        metavar="S",
        help="expected seconds per optimizer step of a trial, to check the cap before anything starts and to "
        "run trials side by side from the start (default: measured by the first trial)",
    )
    parser.add_argument(
        "--db", metavar="FILE", help="history database (default: $GPUPLANNER_DB or the data directory's)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for every trial (repeat), e.g. OMP_NUM_THREADS=1",
    )
    add_tag_flag(parser, "a tag on every trial's run, for attributing spend (sweep=STUDY is added)")
    parser.add_argument("--json", action="store_true", help="no progress lines; print one JSON document at the end")
    parser.add_argument("words", nargs="*", metavar="-- TRAINER FLAGS", help="the trainer's flags for every trial")


def settings_from_args(args: argparse.Namespace, db_path: Path) -> SweepSettings:
    """The search of the flags, checked; every problem is one line naming the flag or file."""
    request = SweepRunRequest(
        hosts=split_hosts(args.host),
        space=args.space,
        trials=args.trials,
        max_steps=args.max_steps,
        trainer_flags=(*args.words, *getattr(args, "passthrough", [])),
        schedule=schedule_request(args),
        budget_usd=args.budget_usd,
        max_gpu_hours=args.max_gpu_hours,
        study=args.study,
        sampler=args.sampler,
        seed=args.seed,
        step_seconds=args.step_seconds,
        env=tuple(args.env),
        tags=tuple(args.tag or ()),
    )
    return sweep_settings(request, db_path)


def run_sweep_run(args: argparse.Namespace) -> int:
    db_path = resolve_db_path(args.db)
    settings = settings_from_args(args, db_path)

    def say(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr, flush=True)

    manager = RunManager(db_path, passphrase_callback=terminal_prompter())
    try:
        runner = SweepRunner(db_path, settings, manager, say)
        runner.check_first_trial_fits()
        result = runner.run()
    finally:
        manager.close()
    document = result_document(result, settings)
    if args.json:
        print(to_json(document), end="")
    else:
        print(describe_result(document), end="")
    return 1 if result.stop_reason.startswith("failed") else 0


TRIAL_COLUMNS = ("trial", "state", "end", "run", "host", "last_step", "eval_loss", "spend_usd", "params")


def result_document(result: SweepResult, settings: SweepSettings) -> dict[str, Any]:
    """The JSON document of `gpuplanner sweep run --json` (names in docs/sweeps.md)."""
    return {
        "study": result.study,
        "stop_reason": result.stop_reason,
        "spent_usd": round(result.spent_usd, 6),
        "spent_gpu_hours": round(result.spent_gpu_hours, 9),
        "budget_usd": settings.caps.usd,
        "max_gpu_hours": settings.caps.gpu_hours,
        "trials_asked": settings.trials,
        "best": result.best,
        "trials": result.trials,
    }


def describe_result(document: dict[str, Any]) -> str:
    rows = [
        (
            t["number"],
            t["state"],
            t["end"],
            t["run_id"],
            t["host"],
            t["last_step"],
            None if t["value"] is None else round(t["value"], 4),
            round(t["spend_usd"], 4),
            ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t["params"].items()),
        )
        for t in document["trials"]
    ]
    lines = [to_text(TRIAL_COLUMNS, rows).rstrip("\n"), ""]
    caps = []
    if document["budget_usd"] is not None:
        caps.append(f"{human_money(document['spent_usd'], 4)} of {human_money(document['budget_usd'])}")
    if document["max_gpu_hours"] is not None:
        caps.append(f"{document['spent_gpu_hours']:,.6f} of {document['max_gpu_hours']:,g} GPU-hours")
    lines.append(f"study {document['study']}: {document['stop_reason']}; spent {', '.join(caps)}")
    best = document["best"]
    if best:
        params = " ".join(f"{k}={v}" for k, v in best["params"].items())
        lines.append(f"best: trial {best['number']} (run {best['run_id']}), eval_loss {best['value']:.4f}: {params}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- size


def _add_size_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget-usd", type=positive_float, metavar="USD", help="the money to spend")
    parser.add_argument("--max-gpu-hours", type=positive_float, metavar="H", help="the GPU-hours to spend")
    parser.add_argument(
        "--gpu", metavar="NAME[:N]", help=f"a catalog GPU (default {example.GPU}); H100:8 is --gpu H100 --gpus 8"
    )
    parser.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs training together (default 1)")
    parser.add_argument("--precision", choices=PRECISIONS, default=example.PRECISION, help="which peak rate applies")
    parser.add_argument("--pricing", choices=("on-demand", "spot"), default="on-demand")
    parser.add_argument("--price", type=positive_float, metavar="USD", help="$ per GPU-hour (default: the catalog's)")
    parser.add_argument("--peak-tflops", type=positive_float, metavar="T", help="peak TFLOP/s (default: the catalog's)")
    parser.add_argument(
        "--mfu", type=positive_float, metavar="SHARE", help="model-FLOPs utilisation (default: the GPU's)"
    )
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="print only JSON")


def run_sweep_size(args: argparse.Namespace) -> int:
    named, gpus = gpu_and_count(args.gpu, args.gpus)
    gpu = named or (None if args.peak_tflops is not None and args.price is not None else example.GPU)
    request = SizingRequest(
        budget_usd=args.budget_usd,
        max_gpu_hours=args.max_gpu_hours,
        gpu=gpu,
        gpus=gpus or 1,
        precision=args.precision,
        pricing=args.pricing,
        price=args.price,
        peak_tflops=args.peak_tflops,
        mfu=args.mfu,
    )
    sizing = size_for_budget(request, _catalog() if gpu is not None else None)
    document = sizing_document(sizing)
    if args.format == "json":
        print(to_json(document), end="")
    else:
        print(describe_sizing(document), end="")
    return 0


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def sizing_document(sizing: Sizing) -> dict[str, Any]:
    """The JSON document of `gpuplanner sweep size --json` (names in docs/sweeps.md)."""
    request = sizing.request
    return {
        "inputs": {
            "budget_usd": request.budget_usd,
            "max_gpu_hours": request.max_gpu_hours,
            "gpu": sizing.gpu,
            "gpus": request.gpus,
            "precision": request.precision,
            "pricing": request.pricing,
        },
        "compute": {
            "gpu_hours": _round(sizing.gpu_hours),
            "binding_cap": sizing.binding_cap,
            "flops": float(f"{sizing.flops:.6e}"),
            "usd_per_gpu_hour": _round(sizing.usd_per_gpu_hour),
            "peak_tflops": _round(sizing.peak_tflops, 2),
            "mfu": _round(sizing.mfu),
        },
        "model": {
            "params": round(sizing.params),
            "tokens": round(sizing.tokens),
            "tokens_per_param": _round(sizing.tokens_per_param, 2),
        },
        "run": {
            "hours": _round(sizing.hours),
            "gpu_hours": _round(sizing.gpu_hours),
            "cost_usd": _round(sizing.cost_usd, 2),
        },
        "sources": {
            "price": sizing.price_source,
            "peak_tflops": sizing.peak_source,
            "mfu": sizing.mfu_source,
            "formula": FORMULA_SOURCE,
        },
    }


def _si(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:,.2f}{suffix}"
    return f"{value:,.0f}"


def describe_sizing(document: dict[str, Any]) -> str:
    inputs, compute, model, run, sources = (document[k] for k in ("inputs", "compute", "model", "run", "sources"))
    price = "-" if compute["usd_per_gpu_hour"] is None else f"{human_money(compute['usd_per_gpu_hour'])}/GPU-h"
    cost = "-" if run["cost_usd"] is None else f"{human_money(run['cost_usd'])}"
    lines = [
        f"{inputs['gpus']} x {inputs['gpu'] or 'your GPU'} ({inputs['precision']}, {inputs['pricing']}): "
        f"{compute['gpu_hours']:,.2f} GPU-hours ({compute['binding_cap']} binds) = {compute['flops']:.3e} FLOPs",
        f"  compute-optimal model  {_si(model['params'])} parameters on {_si(model['tokens'])} tokens "
        f"({model['tokens_per_param']:.1f} tokens per parameter)",
        f"  training               {run['hours']:,.2f} h on {human_gpus(inputs['gpus'])}, {cost} at {price}",
        "sources",
        f"  price                  {sources['price']}",
        f"  peak                   {compute['peak_tflops']:,.1f} TFLOP/s: {sources['peak_tflops']}",
        f"  MFU                    {compute['mfu']:.2f}: {sources['mfu']}",
        f"  sizes                  {sources['formula']}",
    ]
    return "\n".join(lines) + "\n"
