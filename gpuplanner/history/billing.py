"""Billed time: what the host of a launched run costs from launch until the run ended and, where the
host has one, its after-run command (a cloud CLI that stops the instance) finished. Idle time before the
first record (connecting, uploading, starting) and after the last one (until the instance stops) is
paid for too, so it shows as cost here next to the time the run's records span.

The launcher writes one ``billed`` event per launch-to-end span (a resume by hand starts a new one;
automatic restarts stay in one span): ``launched_at``, ``ended_at``, ``billed_s``, ``gpus``,
``price_usd_per_gpu_hour``, ``billed_usd`` and, with an after-run command, ``after_run`` (its command,
exit status, seconds and the end of its output). Slurm runs are billed from ``sacct`` instead
(``slurm_job`` events of ended jobs: ``billed_s``, ``spend_usd``, ``spend_source``), which
:func:`billed_of` reads when a run has no ``billed`` events; ``billed_source`` says which it used.
"""

from __future__ import annotations

import json
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.run_cost import add_costs
from trainer.spend import spend_usd

BILLED = "billed"


def billed_span(
    launched_at: float, ended_at: float, gpus: int, price: float | None, after_run: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``billed`` event's detail for one span (``ended_at`` includes the after-run command)."""
    billed_s = max(0.0, ended_at - launched_at)
    cost = spend_usd(price, gpus, billed_s)
    detail: dict[str, Any] = {
        "launched_at": launched_at,
        "ended_at": ended_at,
        "billed_s": round(billed_s, 3),
        "gpus": gpus,
        "price_usd_per_gpu_hour": price,
        "billed_usd": None if cost is None else round(cost, 6),
    }
    if after_run is not None:
        detail["after_run"] = after_run
    return detail


def billed_of(db: Database, run_id: int, record_hours: float | None = None) -> dict[str, Any] | None:
    """The run's billed hours and cost over all its spans, ``idle_billed_hours``: billed hours not
    covered by the run's records (``record_hours``, the summary's ``hours``), and ``idle_cost_usd``, what
    those hours cost; None when never billed."""
    spans = []
    for (text,) in db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = ? ORDER BY t", [run_id, BILLED]
    ).fetchall():
        try:
            detail = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(detail, dict) and isinstance(detail.get("billed_s"), (int, float)):
            spans.append(detail)
    source = "launcher"
    if not spans:  # a Slurm run: what each ended job was billed (sacct, or scontrol without accounting)
        spans = _slurm_spans(db, run_id)
        source = spans[0]["spend_source"] if spans else source
    if not spans:
        return None
    hours = sum(float(s["billed_s"]) for s in spans) / 3600.0
    cost = add_costs(
        s.get("billed_usd") if isinstance(s.get("billed_usd"), (int, float)) else None for s in spans
    ).cost_usd
    idle = max(0.0, hours - record_hours) if record_hours is not None else None
    return {
        "billed_hours": hours,
        "billed_cost_usd": cost,
        "idle_billed_hours": idle,
        # what the idle hours cost: the billed cost's share of them (billed minus training, at the billed rate)
        "idle_cost_usd": cost * idle / hours if cost is not None and idle is not None and hours > 0 else None,
        "billed_spans": len(spans),
        "billed_source": source,
        "after_run": next((s["after_run"] for s in reversed(spans) if "after_run" in s), None),
    }


def _slurm_spans(db: Database, run_id: int) -> list[dict[str, Any]]:
    """The ``slurm_job`` events of jobs that ended with their billed time, as billed spans."""
    spans = []
    for (text,) in db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'slurm_job' ORDER BY t", [run_id]
    ).fetchall():
        try:
            detail = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(detail, dict) and isinstance(detail.get("billed_s"), (int, float)):
            spend = detail.get("spend_usd")
            spans.append(
                {
                    "billed_s": float(detail["billed_s"]),
                    "billed_usd": spend if isinstance(spend, (int, float)) else None,
                    "spend_source": str(detail.get("spend_source") or "slurm"),
                }
            )
    return spans
