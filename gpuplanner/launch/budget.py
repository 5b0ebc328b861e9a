"""A run's budget and the price it is measured in: one check for the CLI, the window and RunManager.

Spend is the price per GPU-hour x GPUs x time. A budget on a host without a price could never be
reached (spend stays $0), so it is refused with a message that says how to fix it. No Qt here: the
launch dialog calls :func:`budget_problem` on its values and shows the answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


class BudgetError(ValueError):
    """A budget that cannot work; the message names the field and says what to do."""


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def budget_problem(
    budget_usd: float | None, price_usd_per_gpu_hour: float | None, host: str | None = None
) -> str | None:
    """Why ``budget_usd`` cannot be used on a host with this price (one line), or None when it can.

    No budget is always fine; a budget must be a positive number of dollars and needs a positive
    price per GPU-hour (the host's, or the run's own)."""
    if budget_usd is None:
        return None
    if not _positive(budget_usd):
        return f"budget: a positive number of US dollars, not {budget_usd!r}"
    if not _positive(price_usd_per_gpu_hour):
        where = f"host {host!r}" if host else "the host"
        what = (
            "has no price per GPU-hour"
            if price_usd_per_gpu_hour is None
            else f"has a price of {price_usd_per_gpu_hour!r} per GPU-hour"
        )
        return (
            f"budget: {where} {what}, so the spend could never reach the budget; set a positive price (the Hosts "
            "pane, `gpuplanner hosts add NAME --price USD`, or `gpuplanner run --price USD`) or launch without a budget"
        )
    return None


def check_budget(budget_usd: float | None, prices: Iterable[tuple[str, float | None]]) -> None:
    """:class:`BudgetError` unless ``budget_usd`` works on every ``(host, price)`` the run may use
    (its host and its fallback hosts)."""
    if budget_usd is None:
        return
    if not _positive(budget_usd):
        raise BudgetError(f"budget: a positive number of US dollars, not {budget_usd!r}")
    for host, price in prices:
        problem = budget_problem(budget_usd, price, host)
        if problem is not None:
            raise BudgetError(problem)
