"""The `gpuplanner` command: no arguments opens the window; subcommands serve scripts and CI.

Each subcommand lives in a module of :mod:`gpuplanner.commands` that defines
``register(subparsers)``; the parser it adds sets ``handler`` to a function taking the parsed
arguments and returning an exit code. Bad input raises :class:`UsageError` (or the engine's
:class:`PlanInputError`), which ends the command with exit code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from collections.abc import Sequence

from gpuplanner import __version__
from gpuplanner.commands.errors import UsageError
from gpuplanner.history.db import HistoryError, explain_error
from gpuplanner.plan.setup import PlanInputError

COMMAND_MODULES = (
    "gpuplanner.commands.plan",
    "gpuplanner.commands.runs",
    "gpuplanner.commands.catalog",
    "gpuplanner.commands.hosts",
    "gpuplanner.commands.run",
    "gpuplanner.commands.sweep",
    "gpuplanner.commands.metrics",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's own errors: one line, exit 2, no usage dump to scroll past.
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuplanner", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpuplanner {__version__}")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check this installation headless (window, panes, plots, planner, a tiny training"
        " run) in a temporary data folder; exit 0 when it works",
    )
    parser.add_argument(
        "--theme", dest="window_theme", choices=("light", "dark"), help="window: a palette instead of the system's"
    )
    parser.add_argument(
        "--db", dest="window_db", metavar="FILE", help="window: the history database (default: the data folder's)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `run`, `hosts bench` and `sweep run` hand everything after the first "--" to the trainer untouched (argparse
    # alone mishandles "--" after an option inside a nested subcommand); other commands keep argparse's
    # own meaning of "--".
    passthrough: list[str] = []
    takes_trainer_flags = argv[:1] == ["run"] or argv[:2] in (["hosts", "bench"], ["sweep", "run"])
    if takes_trainer_flags and "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a flag argparse rejected (already reported)
        return exc.code if isinstance(exc.code, int) else 2
    args.passthrough = passthrough
    if getattr(args, "self_test", False):
        from gpuplanner.ui.self_test import run_self_test  # lazily: Qt only loads for the self-test

        return run_self_test()
    handler = getattr(args, "handler", None)
    if handler is None:
        # No subcommand: open the window. The UI (and Qt) is loaded only here, by name, so scripts
        # never pay for it and no module of the layers below depends on gpuplanner.ui.
        window_argv = [*(["--db", args.window_db] if args.window_db else [])]
        window_argv += ["--theme", args.window_theme] if args.window_theme else []
        return int(importlib.import_module("gpuplanner.ui.app").main(window_argv))
    if args.window_theme or args.window_db:
        flag = "--theme" if args.window_theme else "--db"
        print(
            f"gpuplanner: error: {flag} before a command is for the window; give the command's own flags after it",
            file=sys.stderr,
        )
        return 2
    try:
        return int(handler(args) or 0)
    except (UsageError, PlanInputError) as exc:
        print(f"gpuplanner {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    except sqlite3.Error as exc:  # a locked, read-only or full history, whichever command met it
        print(f"gpuplanner {args.command}: error: {explain_error(exc)}", file=sys.stderr)
        return 1
    except HistoryError as exc:  # a history that cannot be opened (read-only folder, another app's file)
        print(f"gpuplanner {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C (e.g. at a passphrase prompt): no traceback
        print(f"gpuplanner {args.command}: interrupted", file=sys.stderr)
        return 130
