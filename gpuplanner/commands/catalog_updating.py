"""`gpuplanner catalog update`: download SkyPilot's catalogs (and AWS's Spot Instance Advisor), merge them
into the price cache and say what changed. The parser is in :mod:`gpuplanner.commands.catalog`."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from typing import Any

from gpuplanner.commands.catalog import OWN_PROVIDER, PROVIDER_PATTERN, load_or_usage_error, usage_error
from gpuplanner.export.human import human_money
from gpuplanner.plan.catalog import Catalog, CatalogError, PriceOffer, user_files
from gpuplanner.plan.catalog_update import CHANGE_THRESHOLD
from gpuplanner.plan.price_dates import STALE_AFTER_DAYS, describe_age


def _offer_words(offer: PriceOffer) -> str:
    return f"{offer.provider} {offer.region_label} {offer.gpu} {offer.instance_type} ({offer.gpu_count} GPUs)"


def update(args: argparse.Namespace) -> int:
    from gpuplanner.catalog_fetch import LAST_MODIFIED, Offline, fetch_all
    from gpuplanner.plan.catalog_update import DEFAULT_CLOUDS, apply_update, base_url

    base = base_url(args.url)
    if not base.startswith(("http://", "https://")):
        raise usage_error(f"--url: an http:// or https:// address, got {base!r}")
    advisor_url = args.spot_advisor_url
    if advisor_url is not None and not advisor_url.startswith(("http://", "https://")):
        # never a file:// or other scheme: a rejected "advisor file" would echo part of a local file
        raise usage_error(f"--spot-advisor-url: an http:// or https:// address, got {advisor_url!r}")
    clouds = tuple(dict.fromkeys(c.strip().lower() for c in (args.cloud or DEFAULT_CLOUDS)))
    for cloud in clouds:
        if not PROVIDER_PATTERN.match(cloud) or cloud == OWN_PROVIDER:
            raise usage_error(f"--cloud: a SkyPilot cloud name such as {', '.join(DEFAULT_CLOUDS)}, got {cloud!r}")
    if not args.timeout > 0:
        raise usage_error(f"--timeout: a positive number of seconds, got {args.timeout!r}")
    as_of = args.as_of
    if as_of is not None:
        try:
            _dt.date.fromisoformat(as_of)
        except ValueError:
            raise usage_error(f"--as-of: an ISO date like 2026-11-20, got {as_of!r}") from None
    catalog = load_or_usage_error()
    try:
        fetched, failures = fetch_all(base, clouds, timeout=args.timeout, as_of=as_of)
    except Offline as exc:
        if args.json:
            print(json.dumps({"ok": False, "offline": str(exc), "written": False}, indent=2))
        else:
            print(f"gpuplanner catalog update: offline: {exc}; the price catalog is unchanged", file=sys.stderr)
        return 1
    advisor, advisor_info = None, None
    if any(f.cloud == "aws" for f in fetched):
        advisor, advisor_info = _spot_advisor(args, base)
    try:
        report = apply_update(
            fetched, failures, advisor=advisor, catalog=Catalog(catalog.gpus, ()), replace_newer=args.replace
        )
    except OSError as exc:
        raise usage_error(f"cannot write the price cache: {exc}") from None
    if args.json:
        document = report.to_dict()
        document["spot_advisor"] = advisor_info
        print(json.dumps(document, indent=2))
        return 0 if report.ok else 1
    for cloud in report.clouds:
        if cloud.status in ("updated", "kept-newer-cache"):
            line = f"{cloud.cloud}: {describe_age(cloud.as_of)} (from the {cloud.date_basis})"
            line += f", {cloud.offers} offers" if cloud.status == "updated" else f": kept, {cloud.message}"
            if cloud.status == "updated" and cloud.message:
                line += f"; {cloud.message}"
            if cloud.stale_days is not None:
                line += f"; STALE: older than {STALE_AFTER_DAYS} days"
        else:
            line = f"{cloud.cloud}: {cloud.status}: {cloud.message}"
        print(line)
        if cloud.status == "updated" and cloud.date_basis == LAST_MODIFIED:
            print(
                f"  {cloud.cloud}: dated by the server's Last-Modified header, not by the catalog: a mirror or a copy "
                "dates it by the day it was copied; give the catalog's date with --as-of DATE"
            )
        if cloud.malformed or cloud.gpu_only:
            print(
                f"  {cloud.cloud}: skipped {cloud.malformed} malformed rows and {cloud.gpu_only} GPU-only rows "
                "(an accelerator without its host machine's price: not rentable)"
            )
            for problem in cloud.problems:
                print(f"    {problem}")
    if advisor_info is not None:
        print(f"aws spot interruptions: {advisor_info['message']}")
    if report.written:
        print(f"new offers: {len(report.new_offers)}")
        for offer in report.new_offers[:_LISTED]:
            print(f"  {_offer_words(offer)}: {human_money(offer.on_demand_usd, 3)}/GPU-h on demand")
        if len(report.new_offers) > _LISTED:
            print(f"  ... and {len(report.new_offers) - _LISTED} more (`gpuplanner catalog prices` lists all)")
        print(f"price changes above {CHANGE_THRESHOLD:.0%}: {len(report.changes)}")
        for change in report.changes[:_LISTED]:
            print(
                f"  {_offer_words(change.offer)} {change.pricing}: {human_money(change.old_usd, 3)} -> {human_money(change.new_usd, 3)}/GPU-h "
                f"({change.change_pct:+.1f}%)"
            )
        if len(report.changes) > _LISTED:
            print(f"  ... and {len(report.changes) - _LISTED} more")
        print(f"cache: {report.cache_path} (your {user_files()['prices']} still wins where it has an offer)")
    else:
        print("nothing changed")
    return 0 if report.ok else 1


_LISTED = 20


def _spot_advisor(args: argparse.Namespace, base: str) -> tuple[Any, dict[str, Any]]:
    """AWS's Spot Instance Advisor bands and their date, or None, with a note for the report. Its failure
    never stops the update: AWS spot offers then keep the shipped (or assumed) rates."""
    from gpuplanner.catalog_fetch import FetchError, Offline, fetch_dated
    from gpuplanner.plan.catalog_update import parse_spot_advisor, spot_advisor_url

    url = spot_advisor_url(args.spot_advisor_url, base)
    info: dict[str, Any] = {"url": url, "as_of": None, "status": "failed"}
    try:
        text, as_of, basis = fetch_dated(url, timeout=args.timeout)
        bands = parse_spot_advisor(text, url)
    except (Offline, FetchError) as exc:
        info["message"] = f"the Spot Instance Advisor is not available ({exc}); shipped or assumed rates kept"
        return None, info
    except CatalogError as exc:
        info["status"] = "rejected"
        info["message"] = f"the Spot Instance Advisor file was rejected ({exc}); shipped or assumed rates kept"
        return None, info
    info.update(
        {
            "as_of": as_of,
            "status": "used",
            "message": f"AWS Spot Instance Advisor, {describe_age(as_of)} (from the {basis}), {len(bands)} bands",
        }
    )
    return (bands, as_of), info
