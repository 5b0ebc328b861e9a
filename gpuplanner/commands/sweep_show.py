"""`gpuplanner sweep show STUDY`: look back at a search (cost per trial, cumulative spend against the cap,
best metric against spend, outcome counts, the best trial as a ready-to-launch command), as text, JSON,
CSV or Markdown. The one-page PDF comes from the window (History > Searches), which owns the PDF layout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.export.human import NO_PRICE, human_cost, human_money
from gpuplanner.export.tables import to_csv, to_json, to_markdown, to_text
from gpuplanner.history.db import resolve_db_path
from gpuplanner.sweep.lookback import (
    TRIAL_COLUMNS,
    SearchReview,
    describe_time,
    load_review,
    params_text,
    study_names,
    trial_table,
)

FORMATS = ("text", "json", "csv", "markdown")


def register_show(actions: Any) -> None:
    p = actions.add_parser(
        "show",
        help="look back at a search: cost per trial, spend against the cap, best metric against spend",
        description="Look back at a search run with `gpuplanner sweep run`: every trial's cost and outcome, the "
        "cumulative spend over time against the cap, the best metric against the spend, and the best trial's "
        "configuration as a `gpuplanner run` command. Without STUDY: the searches known.",
    )
    p.add_argument("study", nargs="?", metavar="STUDY", help="the study name (`sweep run --study`)")
    p.add_argument("--db", metavar="FILE", help="history database (default: $GPUPLANNER_DB or the data directory's)")
    out = p.add_mutually_exclusive_group()
    for name in FORMATS[1:]:
        out.add_argument(f"--{name}", dest="format", action="store_const", const=name, help=f"print {name}")
    p.add_argument("--out", metavar="FILE", help="write to this file instead of stdout")
    p.set_defaults(handler=run_sweep_show, format="text")


def summary_lines(review: SearchReview) -> list[str]:
    c = review.counts
    caps = []
    if review.budget_usd is not None:
        caps.append(
            f"{human_money(review.spent_usd, 4)} of {human_money(review.budget_usd)} ({review.spent_usd / review.budget_usd:.0%})"
        )
    else:
        caps.append(NO_PRICE if review.unpriced else f"{human_money(review.spent_usd, 4)}")
    if review.unpriced_trials and not review.unpriced:
        caps[-1] += f" ({review.unpriced_trials} trial(s) without a price, not in it)"
    if review.max_gpu_hours is not None:
        caps.append(f"{review.spent_gpu_hours:,.6f} of {review.max_gpu_hours:,g} GPU-hours")
    lines = [
        f"search {review.study}: {review.stop_reason or 'no stop recorded (running, or never finished)'}",
        f"spent {', '.join(caps)}",
        f"{c['trials']} trials: {c['finished']} finished, {c['pruned']} pruned, {c['stopped']} stopped by the cap, "
        f"{c['failed']} failed, {c['running']} running",
    ]
    if review.best is not None:
        b = review.best
        lines.append(
            f"best: trial {b.number} (run {b.run_id}), {review.metric} {b.value:.4f}, cost {human_cost(b.spend_usd, 4)}: "
            f"{params_text(b.params)}"
        )
        lines.append(f"run it in full: {review.best_command}")
    if review.best_curve:
        steps = "; ".join(f"{human_money(s, 4)} -> {v:.4f} (trial {n})" for s, v, n in review.best_curve)
        lines.append(f"best {review.metric} against spend: {steps}")
    if review.spend_curve:
        first, last = review.spend_curve[0][0], review.spend_curve[-1][0]
        lines.append(
            f"spend over time: {describe_time(first)} to {describe_time(last)}, {len(review.spend_curve)} points "
            "(--json: spend_curve)"
        )
    return lines


def render(review: SearchReview, fmt: str) -> str:
    if fmt == "json":
        return to_json(review.document())
    if fmt == "csv":
        return to_csv(TRIAL_COLUMNS, trial_table(review))
    if fmt == "markdown":
        head = [f"# Search {review.study}", ""] + [f"- {line}" for line in summary_lines(review)] + [""]
        return "\n".join(head) + "\n" + to_markdown(TRIAL_COLUMNS, trial_table(review))
    return to_text(TRIAL_COLUMNS, trial_table(review)) + "\n" + "\n".join(summary_lines(review)) + "\n"


def run_sweep_show(args: argparse.Namespace) -> int:
    db_path = resolve_db_path(args.db)
    if args.study is None:
        names = study_names(db_path)
        print("\n".join(names) if names else f"no searches beside {db_path} yet")
        return 0
    review = load_review(db_path, args.study)
    text = render(review, args.format)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise UsageError(f"--out: {out} is a folder or its folder does not exist; give a file name")
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}", file=sys.stderr)
    return 0
