"""`gpuplanner runs` actions that read the history: list, show, alerts, compare, measured."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuplanner.app.eta import stored_eta_s
from gpuplanner.app.run_status import failure_lines
from gpuplanner.commands.runs_args import alert_settings, fmt_value, guard, print_rows, time_text
from gpuplanner.commands.spend import tags_from_args
from gpuplanner.export.human import NO_PRICE, human_gpus, human_money
from gpuplanner.history import export as export_mod
from gpuplanner.history import jsonsafe
from gpuplanner.history.alerts import refresh_alerts
from gpuplanner.history.analytics import RunSummary, compare, summarize
from gpuplanner.history.calibration import measurements
from gpuplanner.history.db import open_db, read_snapshot
from gpuplanner.history.failures import load_failure
from gpuplanner.history.gpu_metrics import METRICS, MISSING, UTILISATION_NOTE, format_metric, node_totals, throttle_text
from gpuplanner.history.run_cost import unpriced_figure
from gpuplanner.history.runs import get_run, list_runs
from gpuplanner.history.slurm_queue import QueueSummary
from gpuplanner.history.tags import format_tags, tags_of
from gpuplanner.history.time_breakdown import SHOWN_MIN_S

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


@guard
def list_action(args: argparse.Namespace) -> int:
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
    print_rows(args.fmt, LIST_COLUMNS, rows)
    return 0


def _summary_value(key: str, value: Any) -> str:
    """One line's value of `runs show`: times as dates, dollars as the window writes them (export/human.py:
    "$1,234.50", "$0.0137"; the JSON keeps the full figure), the rest as numbers."""
    if key.endswith("_at"):
        return time_text(value)
    if key.endswith("_usd") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return human_money(value)
    return fmt_value(value)


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
            "calibration",
            "failure",
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
    if summary.calibration:
        print(
            f"{'calibration':34} {'yes: ' if summary.calibration['calibrates'] else 'no: '}{summary.calibration['detail']}"
        )
    if summary.planned:
        hardware = summary.planned.get("hardware") or {}
        comparable = hardware.get("comparable", True)
        print("planned vs actual:" if comparable else f"planned vs actual ({hardware['note']}):")
        for key, cell in summary.planned.items():
            if isinstance(cell, dict) and "diff_pct" in cell:
                diff = cell["diff_pct"]
                shown = "" if diff is None else f"{diff:+.1f}%" if comparable else "other hardware"
                print(
                    f"  {key:16} planned {fmt_value(cell['planned']):>12}  actual {fmt_value(cell['actual']):>12}  "
                    f"{shown}"
                )
    for line in _breakdown_lines(summary.time_breakdown):
        print(line)
    for line in failure_lines(data.get("failure")):
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
    print(f"{'effective GPU-hours (NVML utilisation)':40} {fmt_value(summary.effective_gpu_hours)}")
    sm_text = (
        f"{fmt_value(sm_hours)} ({fmt_value(coverage)}% of samples report SM activity)"
        if sm_hours is not None
        else MISSING
    )
    print(f"{'effective GPU-hours (SM activity)':40} {sm_text}")
    print(f"  {UTILISATION_NOTE}")
    nodes = node_totals(summary.gpus)
    if len(nodes) > 1:
        for node in nodes:
            util = format_metric("util_pct", node["util_pct"])
            print(f"  node {node['node']}: {human_gpus(node['gpus'])}, {node['samples']} samples, utilisation {util}")
    for gpu in summary.gpus:
        cells = [f"{label} {format_metric(key, gpu.get(key))}" for key, label, _ in METRICS if key != "slowdown_pct"]
        cells.append(f"max SM clock {format_metric('sm_clock_mhz', gpu.get('sm_clock_max_mhz'))}")
        cells.append(f"throttled {throttle_text(gpu.get('throttle_pct'))}")
        print(f"  GPU {gpu['node']}:{gpu['index']}  " + "; ".join(cells))


@guard
def show_action(args: argparse.Namespace) -> int:
    settings = alert_settings(args)
    with open_db(args.db, create=False) as db:
        summary = summarize(db, args.run_id, alert_settings=settings)
        # the billed figures stay top-level keys too (billed_hours, billed_cost_usd, idle_billed_hours, ...)
        extra = {**(summary.billed or {}), "nodes": node_totals(summary.gpus)}
        # why a failed run failed: its exit reason and stderr tail (None for a run that did not fail)
        extra["failure"] = load_failure(db, args.run_id) if summary.status == "failed" else None
        if summary.status == "running":  # the ETA `gpuplanner run` and the Runs pane show
            extra["eta_s"] = stored_eta_s(db, args.run_id)
        _print_summary(summary, args.fmt, tags_of(db, [args.run_id]).get(args.run_id), extra)
    return 0


ALERT_COLUMNS = ("kind", "gpu", "minutes", "value", "message", "diagnosis", "saving_hours", "saving_usd")


@guard
def alerts_action(args: argparse.Namespace) -> int:
    """Evaluate a run's alerts under the flags' settings, store them with the run and print them."""
    settings = alert_settings(args)
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


@guard
def compare_action(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        rows = [s.as_dict() for s in compare(db, args.run_ids)]
    if args.fmt == "json":
        print(jsonsafe.dumps(rows, indent=1))
    else:
        print_rows(args.fmt, COMPARE_COLUMNS, rows)
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


@guard
def measured_action(args: argparse.Namespace) -> int:
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
    print_rows(args.fmt, MEASURED_COLUMNS, rows)
    return 0
