"""A run's cost: the one definition the history, ``runs show``/``list``/``report``, History, the Spend
view, the unit economics and a search's look-back read.

A run costs its price per GPU-hour x its GPUs x the hours its records span (:mod:`trainer.spend`, the
clock the trainer enforces a budget on, prices the same span). A run without a price has an unknown
cost: None here, JSON ``null``, "no price" in text (:data:`gpuplanner.export.human.NO_PRICE`), never
$0, and counted in ``unpriced_runs`` wherever costs are summed (:func:`add_costs`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainer.spend import cost_for_hours

# A run summary's figures that are unknown without a price (None in JSON, "no price" in text).
COST_KEYS = frozenset(
    {
        "price_usd_per_gpu_hour",
        "cost_usd",
        "cost_per_effective_gpu_hour_usd",
        "cost_per_effective_gpu_hour_sm_usd",
        "cost_per_sample_usd",
        "cost_per_million_tokens_usd",
        "billed_cost_usd",
        "idle_cost_usd",
    }
)


def run_cost_usd(price_usd_per_gpu_hour: float | None, gpus: int, hours: float) -> float | None:
    """The cost of ``gpus`` GPUs held ``hours`` at the run's price; None without a price."""
    return cost_for_hours(price_usd_per_gpu_hour, gpus, hours)


def known_price(price_usd_per_gpu_hour: float | None) -> float | None:
    """A price a trainer's ``run_start`` record gives, as the history keeps it: trainers before the spend
    clock had one home wrote 0.0 when they were given no price, so 0 there means "no price" (a free host
    is priced on the host or with ``runs import --price 0``, which the run row keeps first)."""
    return price_usd_per_gpu_hour if price_usd_per_gpu_hour else None


@dataclass(frozen=True)
class CostTotal:
    """Costs summed: ``cost_usd`` over the priced runs (None when none had a price) and the runs left
    out of it for want of a price."""

    runs: int
    cost_usd: float | None
    unpriced_runs: int


def add_costs(costs: Iterable[float | None]) -> CostTotal:
    """The total of several runs' costs, unpriced runs counted rather than taken as $0."""
    runs = unpriced = 0
    total: float | None = None
    for cost in costs:
        runs += 1
        if cost is None:
            unpriced += 1
        else:
            total = (total or 0.0) + cost
    return CostTotal(runs, total, unpriced)


def unpriced_figure(key: str, value: object, price_usd_per_gpu_hour: float | None) -> bool:
    """Whether ``value`` of the summary figure ``key`` is missing because the run has no price (text
    shows "no price" there, not a dash or $0)."""
    return value is None and price_usd_per_gpu_hour is None and key in COST_KEYS


__all__ = ["COST_KEYS", "CostTotal", "add_costs", "known_price", "run_cost_usd", "unpriced_figure"]
