"""The `gpuplanner runs` actions' shared parts: argument types, output and alert flags, the error guard
every action runs under, and the text, CSV, Markdown or JSON tables they print."""

from __future__ import annotations

import argparse
import datetime
import math
import sqlite3
import sys
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.export.human import NO_PRICE
from gpuplanner.history import export as export_mod
from gpuplanner.history import jsonsafe
from gpuplanner.history.alert_rules import SPECS, AlertSettings, SettingsError
from gpuplanner.history.db import HistoryError
from gpuplanner.history.run_cost import unpriced_figure


def output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", dest="fmt", action="store_const", const="json", help="print one JSON document")
    group.add_argument("--csv", dest="fmt", action="store_const", const="csv", help="print CSV")
    group.add_argument("--markdown", dest="fmt", action="store_const", const="markdown", help="print a Markdown table")


ID_MAX = (1 << 63) - 1  # SQLite's largest integer: no id is larger


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def id_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= ID_MAX:
        raise argparse.ArgumentTypeError(f"an ID is a positive whole number up to {ID_MAX}, not {_shown(text)}")
    return value


def count_arg(text: str) -> int:
    """A whole number from 1 up to SQLite's largest integer (--limit, --gpus)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= ID_MAX:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {ID_MAX}, not {_shown(text)}")
    return value


def nonnegative_arg(text: str) -> float:
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


def alert_flags(parser: argparse.ArgumentParser) -> None:
    defaults = AlertSettings()
    group = parser.add_argument_group("alert settings (the window's Alert settings hold the same)")
    for name, flag in ALERT_FLAGS.items():
        spec = SPECS[name]
        group.add_argument(
            flag,
            dest=f"alert_{name}",
            type=nonnegative_arg,
            default=getattr(defaults, name),
            metavar=spec.unit.split()[0].upper().replace("%", "PCT"),
            help=f"{spec.help.replace('%', '%%')} (default {getattr(defaults, name):g} {spec.unit.replace('%', '%%')})",
        )


def alert_settings(args: argparse.Namespace) -> AlertSettings:
    try:
        return AlertSettings(**{name: getattr(args, f"alert_{name}") for name in ALERT_FLAGS})
    except SettingsError as exc:
        raise UsageError(f"{ALERT_FLAGS[exc.field]}: {exc.message}") from None


def guard(fn: Any) -> Any:
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


def time_text(t: float | None) -> str:
    if t is None:
        return ""
    try:
        return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a corrupt record)
        return f"(bad time {t:.6g})"


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 1e15:
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"  # never 1.828e+04
    return str(value)


def _cell(row: dict[str, Any], column: str) -> str:
    """One cell of a text table of runs: "no price" for a cost the run cannot have without a price."""
    value = row.get(column)
    if "price_usd_per_gpu_hour" in row and unpriced_figure(column, value, row["price_usd_per_gpu_hour"]):
        return NO_PRICE
    return time_text(value) if column.endswith("_at") else fmt_value(value)


def print_rows(fmt: str | None, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
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
