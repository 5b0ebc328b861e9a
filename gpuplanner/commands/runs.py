"""`gpuplanner runs`: the run history (list, show, alerts, compare, delete, import, export, compact)."""

from __future__ import annotations

import argparse
import datetime
import math
import sqlite3
import sys
from pathlib import Path
from typing import Any

from gpuplanner.app.eta import stored_eta_s
from gpuplanner.commands.errors import UsageError
from gpuplanner.commands.spend import add_tag_flag, tags_from_args
from gpuplanner.commands.spend import register_actions as register_spend_actions
from gpuplanner.export.human import NO_PRICE, human_money
from gpuplanner.history import export as export_mod
from gpuplanner.history import jsonsafe
from gpuplanner.history.alert_rules import SPECS, AlertSettings, SettingsError
from gpuplanner.history.alerts import refresh_alerts
from gpuplanner.history.analytics import RunSummary, compare, summarize
from gpuplanner.history.calibration import delete_bench, measurements
from gpuplanner.history.db import HistoryError, open_db, read_snapshot
from gpuplanner.history.gpu_metrics import (
    METRICS,
    MISSING,
    UTILISATION_NOTE,
    format_metric,
    node_totals,
    throttle_text,
)
from gpuplanner.history.maintenance import downsample, optimize
from gpuplanner.history.plans import get_plan, planned_figures
from gpuplanner.history.run_cost import unpriced_figure
from gpuplanner.history.runs import delete_run, get_run, list_runs, run_for_stream, update_run
from gpuplanner.history.slurm_queue import QueueSummary
from gpuplanner.history.tags import format_tags, tags_of
from gpuplanner.history.tail import events_file, ingest_file
from gpuplanner.history.tensorboard_export import TensorBoardMissing, write_tensorboard
from gpuplanner.history.time_breakdown import SHOWN_MIN_S

TENSORBOARD = "tensorboard"
LIST_COLUMNS = (
    "run_id",
    "name",
    "status",
    "host",
    "gpu_type",
    "gpu_count",
    "started_at",
    "hours",
    "gpu_hours",
    "avg_util_pct",
    "cost_usd",
    "samples",
    "tags",
)
COMPARE_COLUMNS = (
    "run_id",
    "name",
    "status",
    "gpu_type",
    "gpu_count",
    "pricing",
    "hours",
    "gpu_hours",
    "avg_util_pct",
    "effective_gpu_hours",
    "effective_gpu_hours_sm",
    "cost_usd",
    "cost_per_effective_gpu_hour_usd",
    "cost_per_sample_usd",
    "cost_per_million_tokens_usd",
    "idle_gpu_hours",
    "data_wait_pct",
    "interruptions",
    "samples",
    "tokens",
    "tokens_per_s",
    "peak_mem_bytes",
    "final_loss",
)


def _output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", dest="fmt", action="store_const", const="json", help="print one JSON document")
    group.add_argument("--csv", dest="fmt", action="store_const", const="csv", help="print CSV")
    group.add_argument("--markdown", dest="fmt", action="store_const", const="markdown", help="print a Markdown table")


ID_MAX = (1 << 63) - 1  # SQLite's largest integer: no id is larger


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _run_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= ID_MAX:
        raise argparse.ArgumentTypeError(f"an ID is a positive whole number up to {ID_MAX}, not {_shown(text)}")
    return value


def _count(text: str) -> int:
    """A whole number from 1 up to SQLite's largest integer (--limit, --gpus)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= ID_MAX:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {ID_MAX}, not {_shown(text)}")
    return value


def _finite_nonnegative(text: str) -> float:
    """A finite number, 0 or more (no inf, no nan)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"a finite number, 0 or more, not {_shown(text)}")
    return value


ALERT_FLAGS = {
    "low_util_pct": "--low-util-pct",
    "low_util_minutes": "--low-util-minutes",
    "mem_pct": "--mem-pct",
    "data_wait_pct": "--data-wait-pct",
    "throttle_minutes": "--throttle-minutes",
    "idle_util_pct": "--idle-util-pct",
    "idle_minutes": "--idle-minutes",
    "comm_factor": "--comm-factor",
}


def _alert_flags(parser: argparse.ArgumentParser) -> None:
    defaults = AlertSettings()
    group = parser.add_argument_group("alert settings (the window's Alert settings hold the same)")
    for name, flag in ALERT_FLAGS.items():
        spec = SPECS[name]
        group.add_argument(
            flag,
            dest=f"alert_{name}",
            type=_finite_nonnegative,
            default=getattr(defaults, name),
            metavar=spec.unit.split()[0].upper().replace("%", "PCT"),
            help=f"{spec.help.replace('%', '%%')} (default {getattr(defaults, name):g} {spec.unit.replace('%', '%%')})",
        )


def _alert_settings(args: argparse.Namespace) -> AlertSettings:
    try:
        return AlertSettings(**{name: getattr(args, f"alert_{name}") for name in ALERT_FLAGS})
    except SettingsError as exc:
        raise UsageError(f"{ALERT_FLAGS[exc.field]}: {exc.message}") from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="the run history: list, show, compare, import, export runs; measured speeds",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    parser.set_defaults(handler=_no_action)

    p = actions.add_parser("list", help="runs, newest first")
    _output_flags(p)
    p.add_argument("--limit", type=_count, default=None, help="show at most this many runs")
    p.add_argument("--status", help="only runs with this status (running, finished, preempted, stopped, ...)")
    add_tag_flag(p, "only runs with this tag")
    p.set_defaults(handler=_list)

    p = actions.add_parser("show", help="one run's derived metrics, planned against actual, alerts")
    _output_flags(p)
    p.add_argument("run_id", metavar="ID", type=_run_id)
    _alert_flags(p)
    p.set_defaults(handler=_show)

    p = actions.add_parser(
        "alerts", help="one run's alerts, each with a diagnosis and its expected saving (stored with the run)"
    )
    _output_flags(p)
    p.add_argument("run_id", metavar="ID", type=_run_id)
    _alert_flags(p)
    p.set_defaults(handler=_alerts)

    p = actions.add_parser("compare", help="several runs side by side")
    _output_flags(p)
    p.add_argument("run_ids", metavar="ID", type=_run_id, nargs="+")
    p.set_defaults(handler=_compare)

    p = actions.add_parser(
        "measured",
        help="the speeds the planner takes from the history (finished runs and "
        "trainer bench results), one row per GPU, model, method, arithmetic "
        "and sequence length",
    )
    _output_flags(p)
    p.add_argument("--gpu", help="only this GPU type")
    p.add_argument("--model", help="only this model name")
    p.set_defaults(handler=_measured)

    p = actions.add_parser("delete-bench", help="forget a trainer bench result (see `runs measured`)")
    _output_flags(p)
    p.add_argument("bench_id", metavar="BENCH_ID", type=_run_id)
    p.set_defaults(handler=_delete_bench)

    p = actions.add_parser("delete", help="delete a run and all its telemetry")
    _output_flags(p)
    p.add_argument("run_id", metavar="ID", type=_run_id)
    p.set_defaults(handler=_delete)

    p = actions.add_parser("import", help="ingest a run directory or events.jsonl (again: only what is new)")
    _output_flags(p)
    p.add_argument("path", metavar="RUN_DIR_OR_EVENTS_FILE")
    p.add_argument("--price", type=_finite_nonnegative, help="price in $ per GPU-hour the run paid")
    p.add_argument("--spot", action="store_true", help="the price is a spot price")
    p.add_argument("--gpus", type=_count, help="number of GPUs the run used")
    p.add_argument("--gpu-type", help="GPU type, e.g. 'H100 SXM' (used for calibration)")
    p.add_argument("--host", help="host name the run ran on")
    p.add_argument("--model", help="model name (used for calibration; default: from the run's config)")
    p.add_argument("--name", help="a name for the run")
    p.add_argument("--plan", type=_run_id, metavar="PLAN_ID", help="saved plan the run came from")
    p.add_argument("--follow", action="store_true", help="keep reading while the file grows, until run_end")
    p.set_defaults(handler=_import)

    p = actions.add_parser(
        "export", help="a run's summary, steps and GPU samples, or its curves as TensorBoard event files"
    )
    p.add_argument("--db", help="history database file")
    p.add_argument("run_id", metavar="ID", type=_run_id)
    p.add_argument("--format", choices=(*export_mod.FORMATS, TENSORBOARD), default="json")
    p.add_argument(
        "--out", help="write to this file instead of stdout (tensorboard: the folder for the event file, needed)"
    )
    p.set_defaults(handler=_export)

    p = actions.add_parser("compact", help="downsample old GPU samples to 1-minute rows and tidy the file")
    _output_flags(p)
    p.add_argument(
        "--older-than-days", type=_finite_nonnegative, default=7.0, help="keep raw samples this long (default 7)"
    )
    p.set_defaults(handler=_compact)

    register_spend_actions(actions)  # report, tag


def _no_action(args: argparse.Namespace) -> int:
    raise UsageError(
        "ACTION: one of list, show, alerts, compare, delete, import, export, compact, measured, delete-bench, report, tag"
    )


def _guard(fn: Any) -> Any:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except HistoryError as exc:
            print(f"gpuplanner runs: error: {exc}", file=sys.stderr)
            return 1
        except sqlite3.Error as exc:  # a damaged or locked file, a full disk under the database
            print(f"gpuplanner runs: error: history database: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            raise
        except OSError as exc:  # stdout on a full device, a file that vanished, ...
            where = f" {exc.filename}" if exc.filename else ""
            print(f"gpuplanner runs: error: cannot read or write{where}: {exc.strerror or exc}", file=sys.stderr)
            return 1

    wrapped.__doc__ = fn.__doc__
    return wrapped


def _time(t: float | None) -> str:
    if t is None:
        return ""
    try:
        return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a corrupt record)
        return f"(bad time {t:.6g})"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 1e15:
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"  # never 1.828e+04
    return str(value)


def _summary_value(key: str, value: Any) -> str:
    """One line's value of `runs show`: times as dates, dollars as the window writes them (export/human.py:
    "$1,234.50", "$0.0137"; the JSON keeps the full figure), the rest as numbers."""
    if key.endswith("_at"):
        return _time(value)
    if key.endswith("_usd") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return human_money(value)
    return _fmt(value)


def _cell(row: dict[str, Any], column: str) -> str:
    """One cell of a text table of runs: "no price" for a cost the run cannot have without a price."""
    value = row.get(column)
    if "price_usd_per_gpu_hour" in row and unpriced_figure(column, value, row["price_usd_per_gpu_hour"]):
        return NO_PRICE
    return _time(value) if column.endswith("_at") else _fmt(value)


def _print_rows(fmt: str | None, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    if fmt == "json":
        print(jsonsafe.dumps(rows, indent=1))
    elif fmt in ("csv", "markdown"):
        export_mod.write_table(sys.stdout, fmt, columns, [[row.get(c) for c in columns] for row in rows])
    else:
        table = [[_cell(r, c) for c in columns] for r in rows]
        widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(columns)]
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for row in table:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


@_guard
def _list(args: argparse.Namespace) -> int:
    where = tags_from_args(args.tag)
    with open_db(args.db) as db, read_snapshot(db):  # one snapshot: a run deleted meanwhile is not half there
        runs = list_runs(db, status=args.status)
        tags = tags_of(db, [run.id for run in runs])
        runs = [run for run in runs if all(tags.get(run.id, {}).get(k) == v for k, v in where.items())]
        rows = []
        for run in runs[: args.limit]:
            row = summarize(db, run.id, with_alerts=False).as_dict()
            row["tags"] = format_tags(tags.get(run.id, {})) if args.fmt != "json" else tags.get(run.id, {})
            rows.append(row)
    _print_rows(args.fmt, LIST_COLUMNS, rows)
    return 0


def _print_summary(
    summary: RunSummary, fmt: str | None, tags: dict[str, str] | None = None, extra: dict[str, Any] | None = None
) -> None:
    data = {**summary.as_dict(), **(extra or {})}
    data["tags"] = dict(tags or {}) if fmt == "json" else format_tags(tags or {})
    if fmt == "json":
        print(jsonsafe.dumps(data, indent=1))
        return
    if fmt in ("csv", "markdown"):
        export_mod.write_table(sys.stdout, fmt, ("metric", "value"), list(data.items()))
        return
    for key, value in data.items():
        if key in (
            "planned",
            "alerts",
            "util_histogram",
            "time_breakdown",
            "after_run",
            "gpus",
            "nodes",
            "billed",
            "queue",
        ):
            continue
        if unpriced_figure(key, value, summary.price_usd_per_gpu_hour):
            print(f"{key:34} {NO_PRICE}")
            continue
        print(f"{key:34} {_summary_value(key, value)}")
    if summary.queue:
        print(f"{'queue wait':34} {_queue_text(summary.queue)}")
    print(f"{'util_histogram (0-10%..90-100%)':34} {' '.join(str(n) for n in summary.util_histogram)}")
    _print_utilisation(summary)
    if summary.planned:
        print("planned vs actual:")
        for key, cell in summary.planned.items():
            if isinstance(cell, dict):
                diff = cell["diff_pct"]
                print(
                    f"  {key:16} planned {_fmt(cell['planned']):>12}  actual {_fmt(cell['actual']):>12}  "
                    f"{'' if diff is None else f'{diff:+.1f}%'}"
                )
    for line in _breakdown_lines(summary.time_breakdown):
        print(line)
    for alert in summary.alerts:
        print(f"alert [{alert['kind']}] {alert['message']}")
        diagnosis = alert.get("diagnosis") or {}
        if diagnosis.get("text"):
            print(f"  why: {diagnosis['text']}")


def _queue_text(queue: QueueSummary) -> str:
    """A Slurm run's queue wait: "12.0 s (3 jobs)" and, while pending, "pending: Resources"."""
    wait = queue.get("queue_wait_s")
    text = "unknown" if wait is None else f"{wait:,.1f} s"
    if len(queue.get("attempts") or []) > 1:
        text += f" over {len(queue['attempts'])} jobs"
    if queue.get("pending"):
        text += f"; pending: {queue.get('reason') or 'no reason given'}"
    elif queue.get("reason"):
        text += f" (pending reason was {queue['reason']})"
    return text


def _breakdown_lines(data: dict[str, Any] | None) -> list[str]:
    """``runs show``'s "where the billed time went" lines (phases that took no time are left out)."""
    if not data:
        return []
    if not data["recorded"]:
        return [f"{'time breakdown':34} {data['note']}"]
    lines = ["time breakdown (where the billed time went):"]
    for phase in data["phases"]:
        if phase["seconds"] < SHOWN_MIN_S:
            continue
        cost = phase["cost_usd"]
        money = "" if cost is None else f"  {human_money(cost)}"
        lines.append(f"  {phase['label']:26} {phase['seconds']:>10,.1f} s  {phase['share'] * 100:5.1f}%{money}")
    return lines


def _print_utilisation(summary: RunSummary) -> None:
    """Both effective GPU-hour figures, labelled, and each GPU's telemetry with missing metrics named."""
    sm_hours = summary.effective_gpu_hours_sm
    coverage = summary.sm_active_coverage_pct
    print(f"{'effective GPU-hours (NVML utilisation)':40} {_fmt(summary.effective_gpu_hours)}")
    sm_text = f"{_fmt(sm_hours)} ({_fmt(coverage)}% of samples report SM activity)" if sm_hours is not None else MISSING
    print(f"{'effective GPU-hours (SM activity)':40} {sm_text}")
    print(f"  {UTILISATION_NOTE}")
    nodes = node_totals(summary.gpus)
    if len(nodes) > 1:
        for node in nodes:
            util = format_metric("util_pct", node["util_pct"])
            print(f"  node {node['node']}: {node['gpus']} GPU(s), {node['samples']} samples, utilisation {util}")
    for gpu in summary.gpus:
        cells = [f"{label} {format_metric(key, gpu.get(key))}" for key, label, _ in METRICS if key != "slowdown_pct"]
        cells.append(f"max SM clock {format_metric('sm_clock_mhz', gpu.get('sm_clock_max_mhz'))}")
        cells.append(f"throttled {throttle_text(gpu.get('throttle_pct'))}")
        print(f"  GPU {gpu['node']}:{gpu['index']}  " + "; ".join(cells))


@_guard
def _show(args: argparse.Namespace) -> int:
    settings = _alert_settings(args)
    with open_db(args.db, create=False) as db:
        summary = summarize(db, args.run_id, alert_settings=settings)
        # the billed figures stay top-level keys too (billed_hours, billed_cost_usd, idle_billed_hours, ...)
        extra = {**(summary.billed or {}), "nodes": node_totals(summary.gpus)}
        if summary.status == "running":  # the ETA `gpuplanner run` and the Runs pane show
            extra["eta_s"] = stored_eta_s(db, args.run_id)
        _print_summary(summary, args.fmt, tags_of(db, [args.run_id]).get(args.run_id), extra)
    return 0


ALERT_COLUMNS = ("kind", "gpu", "minutes", "value", "message", "diagnosis", "saving_hours", "saving_usd")


@_guard
def _alerts(args: argparse.Namespace) -> int:
    """Evaluate a run's alerts under the flags' settings, store them with the run and print them."""
    settings = _alert_settings(args)
    with open_db(args.db, create=False) as db:
        get_run(db, args.run_id)  # an unknown ID is a clear error
        alerts = refresh_alerts(db, args.run_id, settings)
    if args.fmt == "json":
        print(
            jsonsafe.dumps(
                {"run_id": args.run_id, "settings": settings.as_dict(), "alerts": [a.as_dict() for a in alerts]},
                indent=1,
            )
        )
        return 0
    rows = []
    for a in alerts:
        d = a.diagnosis or {}
        gpu = "" if a.gpu_index is None else (f"{a.node}:{a.gpu_index}" if a.node else str(a.gpu_index))
        rows.append(
            [a.kind, gpu, a.minutes, a.value, a.message, d.get("text"), d.get("saving_hours"), d.get("saving_usd")]
        )
    if args.fmt in ("csv", "markdown"):
        export_mod.write_table(sys.stdout, args.fmt, ALERT_COLUMNS, rows)
        return 0
    if not alerts:
        print(f"run {args.run_id}: no alerts")
    for a in alerts:
        print(f"alert [{a.kind}] {a.message}")
        if a.diagnosis:
            print(f"  why: {a.diagnosis['text']}")
    return 0


@_guard
def _compare(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        rows = [s.as_dict() for s in compare(db, args.run_ids)]
    if args.fmt == "json":
        print(jsonsafe.dumps(rows, indent=1))
    else:
        _print_rows(args.fmt, COMPARE_COLUMNS, rows)
    return 0


MEASURED_COLUMNS = (
    "gpu_type",
    "model_name",
    "method",
    "arithmetic",
    "seq_len",
    "source",
    "n",
    "ids",
    "tokens_per_s_per_gpu",
    "samples_per_min_per_gpu",
    "peak_mem_bytes",
    "measured_at",
)


@_guard
def _measured(args: argparse.Namespace) -> int:
    with open_db(args.db) as db:
        found = measurements(db, gpu_type=args.gpu, model_name=args.model)
    rows = [
        cal.as_dict()
        for cal in sorted(
            found.values(), key=lambda c: (c.gpu_type, c.model_name, c.method, c.arithmetic, c.seq_len or 0)
        )
    ]
    if args.fmt != "json":
        for row in rows:  # "runs #3, #4" / "bench #7": what `runs show` or `runs delete-bench` take
            row["ids"] = ("runs " if row["source"] == "run" else "bench ") + ", ".join(f"#{i}" for i in row["ids"])
    _print_rows(args.fmt, MEASURED_COLUMNS, rows)
    return 0


@_guard
def _delete_bench(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        delete_bench(db, args.bench_id)
    print(
        jsonsafe.dumps({"deleted_bench": args.bench_id})
        if args.fmt == "json"
        else f"deleted bench result {args.bench_id}"
    )
    return 0


@_guard
def _delete(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        delete_run(db, args.run_id)
    print(jsonsafe.dumps({"deleted": args.run_id}) if args.fmt == "json" else f"deleted run {args.run_id}")
    return 0


@_guard
def _import(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.exists():
        raise UsageError(f"RUN_DIR_OR_EVENTS_FILE: {path} does not exist")
    file = events_file(path)
    if not file.is_file():
        raise UsageError(f"RUN_DIR_OR_EVENTS_FILE: {file} is not a file")
    pricing = "spot" if args.spot else "on_demand"
    with open_db(args.db) as db:
        planned = None
        if args.plan is not None:
            planned = planned_figures(get_plan(db, args.plan).document, pricing)
        run_id, stream, created = run_for_stream(
            db,
            file,
            name=args.name,
            host=args.host,
            gpu_type=args.gpu_type,
            gpu_count=args.gpus,
            price_usd_per_gpu_hour=args.price,
            pricing=pricing,
            model_name=args.model,
            plan_id=args.plan,
            planned=planned,
        )
        if not created:
            given = {
                "name": args.name,
                "host": args.host,
                "gpu_type": args.gpu_type,
                "gpu_count": args.gpus,
                "price_usd_per_gpu_hour": args.price,
                "model_name": args.model,
                "plan_id": args.plan,
            }
            changes = {k: v for k, v in given.items() if v is not None}
            if args.spot:
                changes["pricing"] = "spot"
            if planned:
                changes.update({f"planned_{k}": v for k, v in planned.items()})
            update_run(db, run_id, **changes)
        stats = ingest_file(db, run_id, file, source=stream, follow=args.follow)
        status = db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()[0]
    result = {
        "run_id": run_id,
        "status": status,
        "inserted": stats.inserted,
        "duplicates": stats.duplicates,
        "malformed": stats.malformed,
        "unknown_kind": stats.unknown_kind,
        "offset": stats.offset,
    }
    if args.fmt == "json":
        print(jsonsafe.dumps(result))
    elif args.fmt in ("csv", "markdown"):
        export_mod.write_table(sys.stdout, args.fmt, tuple(result), [tuple(result.values())])
    else:
        print(
            f"run {run_id} ({status}): {stats.inserted} new records, {stats.duplicates} already stored, "
            f"{stats.malformed} malformed and {stats.unknown_kind} unknown lines skipped"
        )
    return 0


@_guard
def _export(args: argparse.Namespace) -> int:
    if args.format == TENSORBOARD:
        return _export_tensorboard(args)
    with open_db(args.db, create=False) as db:
        if args.out:
            _export_to_file(db, args.run_id, args.format, Path(args.out))
        else:
            export_mod.export_run(db, args.run_id, args.format, sys.stdout)
    return 0


def _export_tensorboard(args: argparse.Namespace) -> int:
    """The run's curves as a TensorBoard event file in the folder ``--out``."""
    if not args.out:
        raise UsageError("--format tensorboard: give the folder for the event file with --out DIR")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} is a file; --format tensorboard writes into a folder")
    with open_db(args.db, create=False) as db:
        try:
            path, count = write_tensorboard(db, args.run_id, out)
        except TensorBoardMissing as exc:
            print(f"gpuplanner runs: error: {exc}", file=sys.stderr)
            return 1
    print(f"wrote {count} scalars of run {args.run_id} to {path} (open it with: tensorboard --logdir {out})")
    return 0


def _export_to_file(db: Any, run_id: int, fmt: str, path: Path) -> None:
    """Write the export to ``path``; a folder, a missing folder or a full device is one clear error, and a
    regular file that could not be written completely is removed rather than left half written."""
    if path.is_dir():
        raise UsageError(f"--out: {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"--out: the folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            export_mod.export_run(db, run_id, fmt, out)
    except OSError as exc:
        if not existed and path.is_file():
            path.unlink(missing_ok=True)
        raise UsageError(f"--out: cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        if not existed and path.is_file():
            path.unlink(missing_ok=True)
        raise


@_guard
def _compact(args: argparse.Namespace) -> int:
    if not args.older_than_days >= 0:
        raise UsageError("--older-than-days: a number of days, 0 or more")
    with open_db(args.db) as db:
        result = downsample(db, older_than_s=args.older_than_days * 86400.0)
        optimize(db)
    data = {"runs": result.runs, "samples_removed": result.samples_removed, "minutes_written": result.minutes_written}
    print(
        jsonsafe.dumps(data)
        if args.fmt == "json"
        else f"downsampled {result.samples_removed} samples of {result.runs} runs into {result.minutes_written} minute rows"
    )
    return 0
