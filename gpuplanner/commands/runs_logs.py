"""`gpuplanner runs logs ID [--follow] [--node N] [--stderr]`: a run's job output (stdout, or stderr).

Read from the run's folder on its host through the launcher's connection
(:class:`~gpuplanner.launch.log_streaming.LogReader`); with ``--follow`` it goes on printing what a live
run writes until the run's process ends. When the host cannot be reached (or the run was imported), the
tail the history kept (:mod:`gpuplanner.history.run_logs`) is printed, with one line on stderr saying so.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.commands.hosts import terminal_prompter, with_host_key_trust
from gpuplanner.commands.runs_args import guard, id_arg
from gpuplanner.export.human import human_data_size
from gpuplanner.history.db import open_db
from gpuplanner.history.run_logs import LogTail, load_log_tail
from gpuplanner.history.runs import get_run
from gpuplanner.launch.connections import DISCONNECTS, PERMANENT
from gpuplanner.launch.log_streaming import LogReader
from gpuplanner.launch.manager import RunError, RunManager

FOLLOW_POLL_S = 0.5
READ_SIZE = 1 << 18
NODE_MAX = 4096


def node_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= NODE_MAX:
        raise argparse.ArgumentTypeError(f"a node number from 0 to {NODE_MAX}, not {text[:40]!r}")
    return value


def register_logs(actions: Any) -> None:
    p = actions.add_parser(
        "logs", help="a run's job output (stdout, or --stderr) from its host; --follow tails a live run"
    )
    p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    p.add_argument("run_id", metavar="ID", type=id_arg)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing what the run writes until it ends")
    p.add_argument("--node", type=node_arg, default=0, help="which node of a multi-node run (default 0)")
    p.add_argument("--stderr", action="store_true", help="the standard error output instead of the standard output")
    p.add_argument("--trust-host-key", metavar="SHA256:...", help="accept this host key fingerprint if it is new")
    p.set_defaults(handler=logs_action)


@guard
def logs_action(args: argparse.Namespace) -> int:
    stream = "err" if args.stderr else "out"
    with open_db(args.db, create=False) as db:
        get_run(db, args.run_id)  # "no run with id N"
        stored = load_log_tail(db, args.run_id, args.node, stream)
    manager = RunManager(args.db, passphrase_callback=terminal_prompter())
    try:
        try:
            reader = manager.open_log(args.run_id, node=args.node, stream=stream)
        except RunError as exc:
            if str(exc).startswith("--node:"):
                raise UsageError(str(exc)) from None
            return _stored(args, stored, str(exc))
        printed = [0]
        try:
            with_host_key_trust(args, lambda: reader.read(0, 1))  # connects (asks about a new host key)
            _print(args, reader, printed)
        except DISCONNECTS + PERMANENT as exc:
            if printed[0]:  # part of the file was printed: the history's tail would repeat it
                print(f"gpuplanner runs logs: {reader.host}: {exc}", file=sys.stderr)
                return 1
            return _stored(args, stored, f"{reader.host} cannot be reached ({exc})")
        return 0
    finally:
        manager.close()


def _print(args: argparse.Namespace, reader: LogReader, printed: list[int]) -> None:
    """Print the file from its start (and, with --follow, what it gains until the process ended);
    ``printed[0]`` counts the bytes printed."""
    out = sys.stdout.buffer
    while True:
        data = reader.read(printed[0], READ_SIZE)
        if data:
            out.write(data)
            printed[0] += len(data)
            continue
        out.flush()
        if not args.follow:
            return
        if reader.ended():  # what it wrote before it ended, then stop
            while data := reader.read(printed[0], READ_SIZE):
                out.write(data)
                printed[0] += len(data)
            out.flush()
            return
        time.sleep(FOLLOW_POLL_S)


def _stored(args: argparse.Namespace, stored: LogTail | None, why: str) -> int:
    what = f"run {args.run_id} node {args.node}'s {'stderr' if args.stderr else 'stdout'}"
    if stored is None:
        print(f"gpuplanner runs logs: {why}; no output of {what} is kept in the history", file=sys.stderr)
        return 1
    shown = f"the last {human_data_size(len(stored.data))} of" if stored.cut else "all of"
    print(f"gpuplanner runs logs: {why}; {shown} {what} kept in the history follows", file=sys.stderr)
    sys.stdout.buffer.write(stored.data)
    sys.stdout.buffer.flush()
    return 0
