"""`gpuplanner catalog update`, the pure part: fetched SkyPilot catalogs become the cached price layer.

The fetching (network) lives in :mod:`gpuplanner.catalog_fetch`; this module gets the fetched texts with
their dates and:

- parses each cloud's ``vms.csv`` strictly (:func:`gpuplanner.plan.skypilot.parse_vms_text`): a cut-short
  file is rejected whole, with a message naming the file and the row, and the cloud keeps what the cache
  held before; a malformed row inside an otherwise whole file is skipped and counted (its line reported);
- dates every offer with the catalog's own date (never the download day, unless the catalog has none, and
  then the source says so);
- keeps the spot interruption rates the shipped snapshot has for the same instance type (SkyPilot
  publishes none), with their source;
- writes the cache (``<cache>/catalog/prices.csv`` plus ``update.json`` with the per-cloud dates)
  atomically;
- reports what changed against the catalog before the update: new offers and price changes above
  :data:`CHANGE_THRESHOLD`.

Layers at load time (:func:`gpuplanner.plan.catalog.load_catalog`): shipped snapshot, then this cache
(where at least as recent), then the user's ``prices.csv`` and ``machines.toml``, which always win.
Pure: standard library only, no network.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplanner.paths import exclusive_lock
from gpuplanner.plan.catalog import (
    Catalog,
    CatalogError,
    PriceOffer,
    builtin_catalog,
    cached_prices_path,
    merge_newer,
    offers_to_csv,
    parse_prices,
)
from gpuplanner.plan.price_dates import STALE_AFTER_DAYS, age_days
from gpuplanner.plan.skypilot import ImportReport, atomic_write, parse_vms_text

DEFAULT_BASE_URL = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v7"
BASE_URL_ENV = "GPUPLANNER_CATALOG_URL"
DEFAULT_CLOUDS = ("aws", "gcp", "azure", "lambda", "runpod")
# Price changes above this share are reported.
CHANGE_THRESHOLD = 0.10
STATE_FILE = "update.json"


def base_url(override: str | None = None) -> str:
    """The catalog base URL: ``override`` (``--url``), else ``$GPUPLANNER_CATALOG_URL``, else SkyPilot's."""
    url = override or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url.rstrip("/")


def cloud_url(base: str, cloud: str) -> str:
    return f"{base.rstrip('/')}/{cloud}/vms.csv"


@dataclass(frozen=True)
class FetchedCatalog:
    """One cloud's ``vms.csv`` as downloaded, with the catalog's own date and what that date rests on."""

    cloud: str
    url: str
    text: str
    as_of: str  # ISO date
    date_basis: str  # "Last-Modified header", "git commit date", or "download date (the catalog gave none)"


@dataclass
class CloudResult:
    cloud: str
    url: str
    status: str  # updated | kept-newer-cache | rejected | failed
    as_of: str | None = None
    date_basis: str | None = None
    offers: int = 0
    message: str = ""
    stale_days: int | None = None
    malformed: int = 0  # rows skipped as malformed
    gpu_only: int = 0  # accelerator rows without their host machine's price: not rentable, skipped
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "malformed_rows": self.malformed,
            "gpu_only": self.gpu_only,
            "problems": list(self.problems),
            "cloud": self.cloud,
            "url": self.url,
            "status": self.status,
            "as_of": self.as_of,
            "date_basis": self.date_basis,
            "offers": self.offers,
            "message": self.message,
            "stale_days": self.stale_days,
        }


@dataclass(frozen=True)
class PriceChange:
    offer: PriceOffer
    pricing: str  # on-demand | spot
    old_usd: float
    new_usd: float

    @property
    def change_pct(self) -> float:
        return (self.new_usd / self.old_usd - 1.0) * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.offer.provider,
            "region": self.offer.region,
            "gpu": self.offer.gpu,
            "instance_type": self.offer.instance_type,
            "pricing": self.pricing,
            "old_usd_per_gpu_hour": self.old_usd,
            "new_usd_per_gpu_hour": self.new_usd,
            "change_pct": round(self.change_pct, 1),
        }


@dataclass
class UpdateReport:
    clouds: list[CloudResult] = field(default_factory=list)
    new_offers: list[PriceOffer] = field(default_factory=list)
    changes: list[PriceChange] = field(default_factory=list)
    cache_path: Path | None = None
    written: bool = False

    @property
    def ok(self) -> bool:
        return all(c.status in ("updated", "kept-newer-cache") for c in self.clouds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "written": self.written,
            "cache": str(self.cache_path) if self.cache_path else None,
            "clouds": [c.to_dict() for c in self.clouds],
            "new_offers": [
                {
                    "provider": o.provider,
                    "region": o.region,
                    "gpu": o.gpu,
                    "gpu_count": o.gpu_count,
                    "instance_type": o.instance_type,
                    "on_demand_usd_per_gpu_hour": o.on_demand_usd,
                    "spot_usd_per_gpu_hour": o.spot_usd,
                    "as_of": o.as_of,
                }
                for o in self.new_offers
            ],
            "price_changes": [c.to_dict() for c in self.changes],
        }


# ------------------------------------------------------------------------------------------ cache state


def cache_folder(cache_dir: Path | None = None) -> Path:
    return cached_prices_path(cache_dir).parent


def read_state(cache_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """Per cloud, what the cache holds: ``{"aws": {"url", "as_of", "date_basis", "fetched_at", "offers"}}``.
    An unreadable state file counts as an empty cache."""
    path = cache_folder(cache_dir) / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    clouds = data.get("clouds") if isinstance(data, dict) else None
    return {k: v for k, v in clouds.items() if isinstance(v, dict)} if isinstance(clouds, dict) else {}


def read_cached_offers(catalog: Catalog, cache_dir: Path | None = None) -> tuple[PriceOffer, ...]:
    """The offers in the cache (none when it is missing or unreadable: the next update rewrites it)."""
    path = cached_prices_path(cache_dir)
    if not path.exists():
        return ()
    try:
        return parse_prices(path, catalog)
    except CatalogError:
        return ()


# ------------------------------------------------------------------------------------------ parsing


# AWS's Spot Instance Advisor: per region and instance type, the band of the share of spot instances AWS
# reclaimed during the trailing month (<5%, 5-10%, 10-15%, 15-20%, >20%).
SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
SPOT_ADVISOR_ENV = "GPUPLANNER_SPOT_ADVISOR_URL"
HOURS_PER_MONTH = 365.25 * 24 / 12
# The open-ended top band (">20%") is taken as this monthly share; the others at their upper bound.
TOP_BAND_SHARE = 0.40


def spot_advisor_url(override: str | None, catalog_base: str) -> str:
    """``override``, else ``$GPUPLANNER_SPOT_ADVISOR_URL``, else AWS's feed for the default catalog, else the
    copy a mirror keeps next to its catalogs (``<base>/aws/spot-advisor-data.json``)."""
    if override or os.environ.get(SPOT_ADVISOR_ENV):
        return str(override or os.environ.get(SPOT_ADVISOR_ENV))
    if catalog_base.rstrip("/") == DEFAULT_BASE_URL:
        return SPOT_ADVISOR_URL
    return f"{catalog_base.rstrip('/')}/aws/spot-advisor-data.json"


@dataclass(frozen=True)
class AdvisorBand:
    label: str  # e.g. "15-20%"
    monthly_share: float  # the share of instances reclaimed in a month this band stands for

    @property
    def per_hour(self) -> float:
        """Interruptions per hour of one instance: the constant hazard that reclaims ``monthly_share`` of
        instances in a month."""
        return -math.log(1.0 - self.monthly_share) / HOURS_PER_MONTH


def parse_spot_advisor(text: str, name: str) -> dict[tuple[str, str], AdvisorBand]:
    """``(region, instance type) -> band`` for Linux from AWS's ``spot-advisor-data.json``; raises
    :class:`CatalogError` naming the file and the key when it is not that format."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CatalogError(name, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ranges"), list):
        raise CatalogError(name, "not an AWS Spot Instance Advisor file: no 'ranges' list", field="ranges")
    bands: dict[int, AdvisorBand] = {}
    for entry in data["ranges"]:
        try:
            index, label, top = int(entry["index"]), str(entry["label"]), float(entry["max"])
        except (KeyError, TypeError, ValueError):
            raise CatalogError(name, f"a range without index, label and max: {entry!r:.80}", field="ranges") from None
        share = TOP_BAND_SHARE if top >= 100 else top / 100.0
        if not 0 < share < 1:
            raise CatalogError(name, f"range {label!r} has max {top!r}", field="ranges")
        bands[index] = AdvisorBand(label, share)
    advisor = data.get("spot_advisor")
    if not isinstance(advisor, dict):
        raise CatalogError(name, "not an AWS Spot Instance Advisor file: no 'spot_advisor' table", field="spot_advisor")
    result: dict[tuple[str, str], AdvisorBand] = {}
    for region, systems in advisor.items():
        linux = systems.get("Linux") if isinstance(systems, dict) else None
        if not isinstance(linux, dict):
            continue
        for instance, facts in linux.items():
            rate = facts.get("r") if isinstance(facts, dict) else None
            band = bands.get(rate) if isinstance(rate, int) else None
            if band is not None:
                result[(region, instance.lower())] = band
    if not result:
        raise CatalogError(name, "no Linux interruption bands in the file", field="spot_advisor")
    return result


def with_advisor_interruptions(
    offers: Iterable[PriceOffer], advisor: Mapping[tuple[str, str], AdvisorBand], as_of: str
) -> list[PriceOffer]:
    """AWS spot offers take the interruption rate of their region's and instance type's advisor band."""
    result = []
    for offer in offers:
        band = advisor.get((offer.region, offer.instance_type.lower())) if offer.provider == "aws" else None
        if offer.spot_usd is not None and band is not None:
            offer = replace(
                offer,
                interruptions_per_hour=round(band.per_hour, 6),
                interruptions_source=(
                    f"AWS Spot Instance Advisor {as_of}: {band.label} of instances reclaimed per month in "
                    f"{offer.region}, taken as {band.monthly_share:.0%}"
                ),
            )
        result.append(offer)
    return result


def with_shipped_interruptions(offers: Iterable[PriceOffer], shipped: Iterable[PriceOffer]) -> list[PriceOffer]:
    """Offers whose spot price has no interruption rate take the rate (and notice and its source) the shipped
    snapshot gives for the same provider, instance type and GPU, in any region."""
    known: dict[tuple[str, str, str], PriceOffer] = {}
    for offer in shipped:
        if offer.interruptions_per_hour is not None:
            known.setdefault((offer.provider, offer.instance_type.lower(), offer.gpu), offer)
    result = []
    for offer in offers:
        match = known.get((offer.provider, offer.instance_type.lower(), offer.gpu))
        if offer.spot_usd is not None and offer.interruptions_per_hour is None and match is not None:
            basis = match.interruptions_basis
            offer = replace(
                offer,
                interruptions_per_hour=match.interruptions_per_hour,
                notice_s=offer.notice_s if offer.notice_s is not None else match.notice_s,
                interruptions_source=f"{basis} (shipped snapshot {match.as_of})",
            )
        result.append(offer)
    return result


def parse_fetched(fetched: FetchedCatalog, catalog: Catalog, shipped: Sequence[PriceOffer]) -> list[PriceOffer]:
    """The offers of one fetched catalog; raises :class:`CatalogError` naming the URL and row when it is
    cut short."""
    return parse_fetched_report(fetched, catalog, shipped)[0]


def parse_fetched_report(
    fetched: FetchedCatalog, catalog: Catalog, shipped: Sequence[PriceOffer]
) -> tuple[list[PriceOffer], ImportReport]:
    """:func:`parse_fetched` with the import's report (rows skipped as malformed or GPU only, by line)."""
    source = f"SkyPilot catalog {fetched.cloud}/vms.csv ({fetched.url}; dated by {fetched.date_basis})"
    result = parse_vms_text(
        fetched.text, fetched.url, fetched.cloud, catalog, as_of=fetched.as_of, source=source, strict=True
    )
    return with_shipped_interruptions(result.offers, shipped), result.report


# ------------------------------------------------------------------------------------------ changes


def _changed(old: float | None, new: float | None) -> bool:
    return old is not None and new is not None and old > 0 and abs(new / old - 1.0) > CHANGE_THRESHOLD


def diff_offers(
    before: Iterable[PriceOffer], after: Iterable[PriceOffer]
) -> tuple[list[PriceOffer], list[PriceChange]]:
    """New offers (by provider, region, GPU and instance type) and price changes above the threshold."""
    old = {o.key: o for o in before}
    new_offers, changes = [], []
    for offer in after:
        previous = old.get(offer.key)
        if previous is None:
            new_offers.append(offer)
            continue
        if _changed(previous.on_demand_usd, offer.on_demand_usd):
            changes.append(PriceChange(offer, "on-demand", previous.on_demand_usd, offer.on_demand_usd))
        if _changed(previous.spot_usd, offer.spot_usd):
            assert previous.spot_usd is not None and offer.spot_usd is not None
            changes.append(PriceChange(offer, "spot", previous.spot_usd, offer.spot_usd))
    return new_offers, changes


# ------------------------------------------------------------------------------------------ update


def apply_update(
    fetched: Sequence[FetchedCatalog],
    failures: Mapping[str, tuple[str, str]] | None = None,
    *,
    advisor: tuple[Mapping[tuple[str, str], AdvisorBand], str] | None = None,
    catalog: Catalog | None = None,
    cache_dir: Path | None = None,
    today: _dt.date | None = None,
    replace_newer: bool = False,
) -> UpdateReport:
    """Merge fetched catalogs into the cache and report. ``failures`` maps a cloud to ``(url, message)`` for
    downloads that failed (the cloud keeps its cached offers). A cloud whose file is rejected also keeps
    them; a cloud whose catalog is older than the one cached keeps the cached one. ``advisor`` (the parsed
    AWS Spot Instance Advisor and its date) gives AWS spot offers their interruption rates. The cache is
    rewritten only when some cloud was updated, and only with a text that parses back whole. ``replace_newer``
    (``--replace``) lets an older catalog replace the cached one: a cache dated wrongly ahead (a mirror's copy
    day) is corrected by the right, older date."""
    with exclusive_lock(cache_folder(cache_dir) / ".update.lock"):  # updates take turns: none loses a cloud
        return _apply_update(
            fetched,
            failures,
            advisor=advisor,
            catalog=catalog,
            cache_dir=cache_dir,
            today=today,
            replace_newer=replace_newer,
        )


def _apply_update(
    fetched: Sequence[FetchedCatalog],
    failures: Mapping[str, tuple[str, str]] | None,
    *,
    advisor: tuple[Mapping[tuple[str, str], AdvisorBand], str] | None,
    catalog: Catalog | None,
    cache_dir: Path | None,
    today: _dt.date | None,
    replace_newer: bool = False,
) -> UpdateReport:
    base = builtin_catalog()
    if catalog is None:
        catalog = Catalog(base.gpus, ())
    shipped = base.offers
    cache_path = cached_prices_path(cache_dir)
    report = UpdateReport(cache_path=cache_path)
    state = read_state(cache_dir)
    cached = read_cached_offers(catalog, cache_dir)
    before = merge_newer(shipped, cached)
    updated: dict[str, list[PriceOffer]] = {}
    for cloud, (url, message) in (failures or {}).items():
        report.clouds.append(CloudResult(cloud, url, "failed", message=message))
    for item in fetched:
        result = CloudResult(item.cloud, item.url, "updated", as_of=item.as_of, date_basis=item.date_basis)
        report.clouds.append(result)
        previous = state.get(item.cloud, {})
        try:
            parsed = parse_fetched_report(item, catalog, shipped)
            offers = parsed[0]
            result.malformed, result.gpu_only = parsed[1].malformed, parsed[1].gpu_only
            result.problems = [p for p in parsed[1].problems if "malformed" in p or "GPU only" in p]
            if advisor is not None:
                offers = with_advisor_interruptions(offers, advisor[0], advisor[1])
        except CatalogError as exc:
            result.status = "rejected"
            kept = f"; the cache keeps its prices from {previous['as_of']}" if previous.get("as_of") else ""
            result.message = f"rejected whole: {exc}{kept}"
            continue
        days = age_days(item.as_of, today)
        if days is not None and days > STALE_AFTER_DAYS:
            result.stale_days = days
        if previous.get("as_of") and str(previous["as_of"]) > item.as_of:
            if not replace_newer:
                result.status = "kept-newer-cache"
                result.message = (
                    f"the cache holds prices from {previous['as_of']}, newer than this catalog's {item.as_of} "
                    "(`--replace` puts this older catalog in its place)"
                )
                continue
            result.message = f"replaced the cache's prices dated {previous['as_of']} (--replace)"
        result.offers = len(offers)
        updated[item.cloud] = offers
        state[item.cloud] = {
            "url": item.url,
            "as_of": item.as_of,
            "date_basis": item.date_basis,
            "fetched_at": (today or _dt.date.today()).isoformat(),
            "offers": len(offers),
        }
    if not updated:
        return report
    kept_offers = [o for o in cached if o.provider not in updated]
    new_cache = kept_offers + [o for offers in updated.values() for o in offers]
    text = offers_to_csv(new_cache)
    try:  # what is written must read back whole, or one bad row would hide every fetched price
        parse_prices(cache_path, catalog, text=text)
    except CatalogError as exc:
        for result in report.clouds:
            if result.cloud in updated:
                result.status, result.offers = "rejected", 0
                result.message = f"rejected: the new cache would not read back ({exc}); nothing was written"
        return report
    after = merge_newer(shipped, new_cache)
    report.new_offers, report.changes = diff_offers(before, after)
    folder = cache_folder(cache_dir)
    atomic_write(cache_path, text)
    atomic_write(folder / STATE_FILE, json.dumps({"version": 1, "clouds": state}, indent=2, sort_keys=True) + "\n")
    report.written = True
    return report
