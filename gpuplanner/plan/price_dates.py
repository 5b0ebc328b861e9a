"""How old the prices behind a plan or a comparison are, and the words every output uses for it.

A price is dated by the ``as_of`` of the catalog offer it came from (the day the provider or the fetched
catalog published it). A plan's prices are as old as the oldest offer it uses; past
:data:`STALE_AFTER_DAYS` the plan warns. Pure: standard library only.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

# Past this many days a plan warns that its prices may no longer hold.
STALE_AFTER_DAYS = 90


def today() -> _dt.date:
    return _dt.date.today()


def age_days(as_of: str, on: _dt.date | None = None) -> int | None:
    """Whole days from ``as_of`` (ISO date) to ``on`` (default today); None for an empty or bad date."""
    try:
        date = _dt.date.fromisoformat(as_of.strip())
    except (ValueError, AttributeError):
        return None
    return ((on or today()) - date).days


def oldest(dates: Iterable[str | None]) -> str | None:
    """The oldest of the valid ISO dates given, or None."""
    valid = []
    for value in dates:
        if value and age_days(value) is not None:
            valid.append(value.strip())
    return min(valid) if valid else None


def describe_age(as_of: str | None, on: _dt.date | None = None) -> str:
    """``prices as of 2025-06-15 (526 days old)``; for no date, says the prices are the user's own."""
    if not as_of:
        return "prices given by you (no catalog date)"
    days = age_days(as_of, on)
    if days is None:
        return f"prices as of {as_of}"
    if days <= 0:
        return f"prices as of {as_of} (today)" if days == 0 else f"prices as of {as_of} (dated in the future)"
    return f"prices as of {as_of} ({days} day{'s' if days != 1 else ''} old)"


def stale_warning(as_of: str | None, on: _dt.date | None = None) -> str | None:
    """A warning when prices dated ``as_of`` are older than :data:`STALE_AFTER_DAYS`, else None."""
    if not as_of:
        return None
    days = age_days(as_of, on)
    if days is None or days <= STALE_AFTER_DAYS:
        return None
    return (
        f"prices are {days} days old (as of {as_of}, older than {STALE_AFTER_DAYS} days): "
        "run `gpuplanner catalog update` or check the provider's page"
    )
