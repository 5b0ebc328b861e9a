"""`gpuplanner runs`: the run history (list, show, logs, alerts, compare, delete, import, export, compact).

This module builds the parser; the actions that read the history are in :mod:`gpuplanner.commands.runs_view`, those
that change or move it in :mod:`gpuplanner.commands.runs_data`, their shared flags and printing in
:mod:`gpuplanner.commands.runs_args`.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.commands.runs_args import alert_flags, count_arg, id_arg, nonnegative_arg, output_flags
from gpuplanner.commands.runs_data import (
    TENSORBOARD,
    compact_action,
    delete_action,
    delete_bench_action,
    export_action,
    import_action,
)
from gpuplanner.commands.runs_logs import register_logs
from gpuplanner.commands.runs_view import alerts_action, compare_action, list_action, measured_action, show_action
from gpuplanner.commands.spend import add_tag_flag
from gpuplanner.commands.spend import register_actions as register_spend_actions
from gpuplanner.history import export as export_mod


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="the run history: list, show, compare, import, export runs; measured speeds",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    parser.set_defaults(handler=_no_action)

    p = actions.add_parser("list", help="runs, newest first")
    output_flags(p)
    p.add_argument("--limit", type=count_arg, default=None, help="show at most this many runs")
    p.add_argument("--status", help="only runs with this status (running, finished, preempted, stopped, ...)")
    add_tag_flag(p, "only runs with this tag")
    p.set_defaults(handler=list_action)

    p = actions.add_parser("show", help="one run's derived metrics, planned against actual, alerts")
    output_flags(p)
    p.add_argument("run_id", metavar="ID", type=id_arg)
    alert_flags(p)
    p.set_defaults(handler=show_action)

    p = actions.add_parser(
        "alerts", help="one run's alerts, each with a diagnosis and its expected saving (stored with the run)"
    )
    output_flags(p)
    p.add_argument("run_id", metavar="ID", type=id_arg)
    alert_flags(p)
    p.set_defaults(handler=alerts_action)

    p = actions.add_parser("compare", help="several runs side by side")
    output_flags(p)
    p.add_argument("run_ids", metavar="ID", type=id_arg, nargs="+")
    p.set_defaults(handler=compare_action)

    p = actions.add_parser(
        "measured",
        help="the speeds the planner takes from the history (finished runs and "
        "trainer bench results), one row per GPU, model, method, arithmetic "
        "and sequence length",
    )
    output_flags(p)
    p.add_argument("--gpu", help="only this GPU type")
    p.add_argument("--model", help="only this model name")
    p.set_defaults(handler=measured_action)

    p = actions.add_parser("delete-bench", help="forget a trainer bench result (see `runs measured`)")
    output_flags(p)
    p.add_argument("bench_id", metavar="BENCH_ID", type=id_arg)
    p.set_defaults(handler=delete_bench_action)

    p = actions.add_parser("delete", help="delete a run and all its telemetry")
    output_flags(p)
    p.add_argument("run_id", metavar="ID", type=id_arg)
    p.set_defaults(handler=delete_action)

    p = actions.add_parser("import", help="ingest a run directory or events.jsonl (again: only what is new)")
    output_flags(p)
    p.add_argument("path", metavar="RUN_DIR_OR_EVENTS_FILE")
    p.add_argument("--price", type=nonnegative_arg, help="price in $ per GPU-hour the run paid")
    p.add_argument("--spot", action="store_true", help="the price is a spot price")
    p.add_argument("--gpus", type=count_arg, help="number of GPUs the run used")
    p.add_argument("--gpu-type", help="GPU type, e.g. 'H100 SXM' (used for calibration)")
    p.add_argument(
        "--relabel",
        action="store_true",
        help="allow --gpu-type to change the GPU type of a run already in the history (recorded as relabelled)",
    )
    p.add_argument("--host", help="host name the run ran on")
    p.add_argument("--model", help="model name (used for calibration; default: from the run's config)")
    p.add_argument("--name", help="a name for the run")
    p.add_argument("--plan", type=id_arg, metavar="PLAN_ID", help="saved plan the run came from")
    p.add_argument("--follow", action="store_true", help="keep reading while the file grows, until run_end")
    p.set_defaults(handler=import_action)

    p = actions.add_parser(
        "export", help="a run's summary, steps and GPU samples, or its curves as TensorBoard event files"
    )
    p.add_argument("--db", help="history database file")
    p.add_argument("run_id", metavar="ID", type=id_arg)
    p.add_argument("--format", choices=(*export_mod.FORMATS, TENSORBOARD), default="json")
    p.add_argument(
        "--out", help="write to this file instead of stdout (tensorboard: the folder for the event file, needed)"
    )
    p.set_defaults(handler=export_action)

    p = actions.add_parser("compact", help="downsample old GPU samples to 1-minute rows and tidy the file")
    output_flags(p)
    p.add_argument(
        "--older-than-days", type=nonnegative_arg, default=7.0, help="keep raw samples this long (default 7)"
    )
    p.set_defaults(handler=compact_action)

    register_logs(actions)
    register_spend_actions(actions)  # report, tag


def _no_action(args: argparse.Namespace) -> int:
    raise UsageError(
        "ACTION: one of list, show, logs, alerts, compare, delete, import, export, compact, measured, delete-bench, report, tag"
    )
