"""`gpuplanner runs report` (spend by tag and month) and `gpuplanner runs tag` (tag a run afterwards);
the ``--tag key=value`` flag that `run`, `sweep run` and `runs report` share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpuplanner.app.spend_report import REPORT_FORMATS, render_report
from gpuplanner.commands.errors import UsageError
from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.history.spend import MonthError, parse_month, spend_report
from gpuplanner.history.tags import TagError, parse_tag, parse_tags, set_tags


def add_tag_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{what} (repeatable, e.g. --tag project=search --tag owner=ana)",
    )


def tags_from_args(values: list[str] | None, flag: str = "--tag") -> dict[str, str]:
    """The ``--tag`` values as a dict; a bad one is a :class:`UsageError` naming the flag."""
    try:
        return parse_tags(values)
    except TagError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def register_actions(actions: Any) -> None:
    """`runs report` and `runs tag`, added to `gpuplanner runs`."""
    p = actions.add_parser(
        "report",
        help="spend (GPU-hours and $) summed by a tag and by month, as text, CSV, Markdown or JSON",
        description="Sum the spend of runs by the value of one tag (--by) and by month (UTC, the month a run "
        "started). Runs without a price are counted in unpriced_runs.",
    )
    p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    p.add_argument("--by", metavar="KEY", help="group by this tag's value (e.g. project); default: by month only")
    p.add_argument("--month", metavar="YYYY-MM", help="only runs that started in this month (UTC)")
    add_tag_flag(p, "only runs with this tag")
    fmt = p.add_mutually_exclusive_group()
    for name in REPORT_FORMATS[1:]:
        fmt.add_argument(f"--{name}", dest="fmt", action="store_const", const=name, help=f"print {name}")
    p.add_argument("--format", dest="fmt", choices=REPORT_FORMATS, help="the output format (default text)")
    p.add_argument("--out", metavar="FILE", help="write the report to this file instead of stdout")
    p.set_defaults(handler=_report)

    p = actions.add_parser("tag", help="add, change or remove tags of a run")
    p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    p.add_argument("run_id", metavar="ID", type=int)
    p.add_argument("tags", metavar="KEY=VALUE", nargs="*", help="tags to add or change")
    p.add_argument("--remove", action="append", default=[], metavar="KEY", help="remove this tag (repeatable)")
    p.set_defaults(handler=_tag)


def _report(args: argparse.Namespace) -> int:
    where = tags_from_args(args.tag)
    month = None
    if args.month is not None:
        try:
            month = parse_month(args.month)
        except MonthError as exc:
            raise UsageError(f"--month: {exc}") from None
    if args.by is not None:
        try:
            parse_tag(f"{args.by}=x")
        except TagError as exc:
            raise UsageError(f"--by: {exc}") from None
    out = Path(args.out) if args.out else None
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        raise UsageError(f"--out: {out} is a folder or its folder does not exist; give a file name")
    try:
        with open_db(args.db) as db:
            report = spend_report(db, by=args.by, month=month, where=where)
    except HistoryError as exc:
        print(f"gpuplanner runs: error: {exc}", file=sys.stderr)
        return 1
    text = render_report(report, args.fmt or "text")
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _tag(args: argparse.Namespace) -> int:
    tags = tags_from_args(args.tags, "KEY=VALUE")
    if not tags and not args.remove:
        raise UsageError("KEY=VALUE: give at least one tag to set (or --remove KEY)")
    try:
        with open_db(args.db, create=False) as db:
            set_tags(db, args.run_id, tags, remove=args.remove)
    except HistoryError as exc:
        print(f"gpuplanner runs: error: {exc}", file=sys.stderr)
        return 1
    return 0
