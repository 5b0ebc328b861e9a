"""Spend attributed by tag and by month: the sums behind `gpuplanner runs report` and the window's
Spend view.

A run's spend is the history's own figure (:func:`gpuplanner.history.run_cost.run_cost_usd` through
:func:`gpuplanner.history.analytics.summarize`: price x GPUs x the hours the GPUs were held), so the
report adds up exactly what History shows per run. A run counts in the month (UTC, as cloud bills are
dated) in which it started. Runs without a price are counted in ``unpriced_runs`` rather than left out
or taken as $0 (:func:`gpuplanner.history.run_cost.add_costs`), so no run disappears from the sums
unnoticed; a group of unpriced runs only has no cost (``cost_usd`` null, "no price").
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.analytics import RunSummary, summarize
from gpuplanner.history.db import read_snapshot
from gpuplanner.history.run_cost import add_costs
from gpuplanner.history.tags import tags_of

MONTH_PATTERN = re.compile(r"([0-9]{4})-([0-9]{2})")  # ASCII digits only (\d matches "٢٠٢٦")
UNTAGGED = "(none)"  # the group of runs without the grouping key, in text and tables


class MonthError(ValueError):
    pass


def parse_month(text: str) -> str:
    """``YYYY-MM`` checked (month 01-12); raises :class:`MonthError` with the expected form."""
    match = MONTH_PATTERN.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or not 1 <= int(match.group(2)) <= 12:
        raise MonthError(f"expected a month as YYYY-MM (e.g. 2026-11), got {text!r}")
    return text.strip()


def month_of(t: float | None) -> str | None:
    """The UTC month (``YYYY-MM``) of a Unix time."""
    if t is None:
        return None
    return time.strftime("%Y-%m", time.gmtime(t))


@dataclass(frozen=True)
class SpendRow:
    group: str | None  # the value of the grouping tag (None: runs without it; no grouping: None)
    month: str | None
    runs: int
    gpu_hours: float
    cost_usd: float | None  # None: no run of the row has a price
    unpriced_runs: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "month": self.month,
            "runs": self.runs,
            "gpu_hours": round(self.gpu_hours, 6),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "unpriced_runs": self.unpriced_runs,
        }


@dataclass(frozen=True)
class SpendReport:
    by: str | None
    month: str | None
    where: dict[str, str]
    rows: list[SpendRow]
    total: SpendRow
    run_ids: list[int] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        """The stable JSON of `runs report --json` (names in docs/json.md)."""
        return {
            "by": self.by,
            "month": self.month,
            "tags": dict(self.where),
            "rows": [row.as_dict() for row in self.rows],
            "total": self.total.as_dict(),
            "run_ids": list(self.run_ids),
        }

    def columns(self) -> tuple[str, ...]:
        return (self.by or "group", "month", "runs", "gpu_hours", "cost_usd", "unpriced_runs")

    def table(self, *, with_total: bool = True) -> list[tuple[Any, ...]]:
        """Rows for CSV/Markdown/text (money and GPU-hours rounded to cents and 1/10000)."""
        rows = [*self.rows, self.total] if with_total else list(self.rows)
        return [
            (
                ("total" if row is self.total else (row.group if row.group is not None else UNTAGGED)),
                row.month if row.month is not None else "",
                row.runs,
                round(row.gpu_hours, 4),
                None if row.cost_usd is None else round(row.cost_usd, 2),
                row.unpriced_runs,
            )
            for row in rows
        ]


def _row(group: str | None, month: str | None, summaries: list[RunSummary]) -> SpendRow:
    costs = add_costs(s.cost_usd for s in summaries)
    gpu_hours = sum(s.gpu_hours or 0.0 for s in summaries)
    return SpendRow(group, month, costs.runs, gpu_hours, costs.cost_usd, costs.unpriced_runs)


def spend_report(
    db: Database,
    *,
    by: str | None = None,
    month: str | None = None,
    where: Mapping[str, str] | None = None,
    summaries: Mapping[int, RunSummary] | None = None,
) -> SpendReport:
    """Spend per value of the tag ``by`` (None: no tag grouping) and per month, over the runs that carry
    every tag of ``where`` and, with ``month``, started in that month. ``summaries`` (the window's, already
    loaded) saves recomputing them."""
    where = dict(where or {})
    if month is not None:
        month = parse_month(month)
    with read_snapshot(db):
        all_tags = tags_of(db)
        ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id").fetchall()]
        chosen: list[tuple[int, RunSummary, dict[str, str]]] = []
        for run_id in ids:
            tags = all_tags.get(run_id, {})
            if any(tags.get(k) != v for k, v in where.items()):
                continue
            summary = (summaries or {}).get(run_id) or summarize(db, run_id, with_alerts=False)
            if month is not None and month_of(summary.started_at) != month:
                continue
            chosen.append((run_id, summary, tags))
    groups: dict[tuple[str | None, str | None], list[RunSummary]] = {}
    for _, summary, tags in chosen:
        groups.setdefault((tags.get(by) if by else None, month_of(summary.started_at)), []).append(summary)
    rows = [
        _row(group, mon, members)
        for (group, mon), members in sorted(groups.items(), key=lambda item: (item[0][1] or "", item[0][0] or "~"))
    ]
    total = _row(None, month, [summary for _, summary, _ in chosen])
    return SpendReport(by, month, where, rows, total, [run_id for run_id, _, _ in chosen])
