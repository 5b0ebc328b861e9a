"""How old the prices behind a plan or a comparison are, and the words every output uses for it.

A price is dated by the ``as_of`` of the catalog offer it came from (the day the provider or the fetched
catalog published it). A plan's prices are as old as the oldest offer it uses; past
:data:`STALE_AFTER_DAYS` the plan warns. Pure: standard library only.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass

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


def stale_warning(as_of: str | None, on: _dt.date | None = None, providers: Iterable[str] = ()) -> str | None:
    """A warning when prices dated ``as_of`` are older than :data:`STALE_AFTER_DAYS`, else None. Where every
    one of ``providers`` (those of the stale prices) is one `catalog update` does not fetch, the warning says
    to check their pages instead: an update could not clear it."""
    if not as_of:
        return None
    days = age_days(as_of, on)
    if days is None or days <= STALE_AFTER_DAYS:
        return None
    named = sorted({p for p in providers if p})
    if named and not any(p in UPDATED_PROVIDERS for p in named):
        cure = f"check the pricing page of {', '.join(named)} (`gpuplanner catalog update` does not fetch it)"
    else:
        cure = "run `gpuplanner catalog update` or check the provider's page"
    return f"prices are {days} days old (as of {as_of}, older than {STALE_AFTER_DAYS} days): {cure}"


# A year, for the share of offers a release may ship that old (see `catalog prices --summary`).
YEAR_DAYS = 365
# The clouds `gpuplanner catalog update` fetches (SkyPilot's catalogs); others are refreshed by hand.
UPDATED_PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod")


@dataclass(frozen=True)
class OfferAges:
    """How old a set of dated offers is: how many, how many past :data:`STALE_AFTER_DAYS` per provider,
    how many past a year, and the newest and oldest dates."""

    total: int
    stale_by_provider: dict[str, int]
    over_a_year: int
    newest: str | None
    oldest: str | None

    @property
    def stale(self) -> int:
        return sum(self.stale_by_provider.values())

    @property
    def over_a_year_share(self) -> float:
        return self.over_a_year / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "offers": self.total,
            "older_than_90_days": self.stale,
            "older_than_90_days_by_provider": dict(self.stale_by_provider),
            "older_than_a_year": self.over_a_year,
            "older_than_a_year_share": round(self.over_a_year_share, 4),
            "newest": self.newest,
            "oldest": self.oldest,
        }


def offer_ages(dated: Iterable[tuple[str, str | None]], on: _dt.date | None = None) -> OfferAges:
    """:class:`OfferAges` of ``(provider, as_of)`` pairs, one per offer; undated ones (the user's) are left out."""
    total = over_year = 0
    stale: dict[str, int] = {}
    dates: list[str] = []
    for provider, as_of in dated:
        days = age_days(as_of or "", on)
        if days is None:
            continue
        total += 1
        dates.append(str(as_of).strip())
        if days > STALE_AFTER_DAYS:
            stale[provider] = stale.get(provider, 0) + 1
        if days > YEAR_DAYS:
            over_year += 1
    ordered = dict(sorted(stale.items(), key=lambda kv: (-kv[1], kv[0])))
    return OfferAges(total, ordered, over_year, max(dates) if dates else None, min(dates) if dates else None)


def _by_provider(ages: OfferAges) -> str:
    return ", ".join(f"{provider} {count}" for provider, count in ages.stale_by_provider.items())


def describe_offer_ages(ages: OfferAges) -> str:
    """``Prices as of 2026-11-20 to 2025-06-15: 12 of 40 offers older than 90 days (aws 5, vultr 1)``: how many
    offers are stale and whose, not only the oldest row of the table."""
    if not ages.total:
        return "Prices given by you (no catalog date)"
    span = ages.newest if ages.newest == ages.oldest else f"{ages.newest} to {ages.oldest}"
    if not ages.stale:
        return f"Prices as of {span}: none of {ages.total} offers older than {STALE_AFTER_DAYS} days"
    return (
        f"Prices as of {span}: {ages.stale} of {ages.total} offers older than {STALE_AFTER_DAYS} days "
        f"({_by_provider(ages)})"
    )


def stale_offers_warning(ages: OfferAges) -> str | None:
    """A warning naming the providers with offers past :data:`STALE_AFTER_DAYS`, and what refreshes each:
    `catalog update` for the clouds it fetches, the provider's page for the others. None when none are."""
    if not ages.stale:
        return None
    fetched = [p for p in ages.stale_by_provider if p in UPDATED_PROVIDERS]
    others = [p for p in ages.stale_by_provider if p not in UPDATED_PROVIDERS]
    cures = []
    if fetched:
        cures.append(f"run `gpuplanner catalog update` for {', '.join(fetched)}")
    if others:
        cures.append(f"check the pricing pages of {', '.join(others)} (the update does not fetch them)")
    return f"prices of {ages.stale} offers are older than {STALE_AFTER_DAYS} days ({_by_provider(ages)}): " + "; ".join(
        cures
    )
