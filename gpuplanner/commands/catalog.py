"""`gpuplanner catalog`: list the GPUs and prices the planner knows, and import SkyPilot prices.

gpuplanner catalog gpus [--json]
gpuplanner catalog prices [--gpu NAME] [--json | --csv]
gpuplanner catalog import-skypilot VMS_CSV --provider NAME [--json]
gpuplanner catalog update [--cloud NAME ...] [--url BASE] [--timeout S] [--json]
gpuplanner catalog tco --gpu NAME --gpus N --purchase-usd USD --lifetime-years Y --electricity-usd-per-kwh P
                       --utilisation U [--power-w W] [--idle-power-w W] [--upkeep-usd-per-year USD]
                       [--residual-usd USD] [--save NAME] [--json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuplanner.app.machines import MachineSaveError, machine_fields, save_machine
from gpuplanner.commands.errors import UsageError
from gpuplanner.export.human import human_gpus, human_money
from gpuplanner.plan.catalog import (
    OWN_PROVIDER,
    Catalog,
    CatalogError,
    GpuSpec,
    PriceOffer,
    load_catalog,
    offer_row,
    offers_to_csv,
    user_files,
)
from gpuplanner.plan.price_dates import (
    describe_age,
    describe_offer_ages,
    offer_ages,
    stale_offers_warning,
)


def usage_error(message: str) -> Exception:
    return UsageError(message)


def load_or_usage_error() -> Catalog:
    try:
        return load_catalog()
    except CatalogError as exc:
        raise usage_error(str(exc)) from None


def gpu_dict(spec: GpuSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "aliases": list(spec.aliases),
        "memory_gib": spec.memory_gib,
        "marketing_memory_gb": spec.marketing_memory_gb,
        "tflops": dict(spec.tflops),
        "bandwidth_gbs": spec.bandwidth_gbs,
        "interconnect": spec.interconnect,
        "interconnect_gbs": spec.interconnect_gbs,
        "pcie_gen": spec.pcie_gen,
        "bf16": spec.bf16,
        "default_mfu": spec.default_mfu,
        "tdp_w": spec.tdp_w,
        "architecture": spec.architecture,
        "compute_capability": spec.compute_capability,
        "source": spec.source,
    }


def offer_dict(offer: PriceOffer) -> dict[str, Any]:
    return {
        "provider": offer.provider,
        "region": offer.region,
        "gpu": offer.gpu,
        "gpu_count": offer.gpu_count,
        "instance_type": offer.instance_type,
        "on_demand_usd_per_gpu_hour": offer.on_demand_usd,
        "spot_usd_per_gpu_hour": offer.spot_usd,
        "interruptions_per_hour": offer.interruptions_per_hour,
        "preemption_notice_s": offer.notice_s,
        "as_of": offer.as_of,
        "source": offer.source,
        "own": offer.own,
        "region_label": offer.region_label,
        "on_demand_usd_per_instance_hour": round(offer.on_demand_usd_per_instance, 6),
        "spot_usd_per_instance_hour": (
            round(offer.spot_usd_per_instance, 6) if offer.spot_usd_per_instance is not None else None
        ),
        "interruptions_source": offer.interruptions_basis if offer.spot_usd is not None else None,
    }


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def _gpus(args: argparse.Namespace) -> int:
    catalog = load_or_usage_error()
    if args.json:
        print(json.dumps([gpu_dict(g) for g in catalog.gpus], indent=2))
        return 0
    headers = ["GPU", "Memory GiB", "FP32", "TF32", "FP16", "BF16", "FP8", "Mem GB/s", "Link", "Link GB/s", "MFU"]
    rows = [
        [
            g.name,
            _num(g.memory_gib),
            _num(g.tflops.get("fp32")),
            _num(g.tflops.get("tf32")),
            _num(g.tflops.get("fp16")),
            _num(g.tflops.get("bf16")),
            _num(g.tflops.get("fp8")),
            f"{g.bandwidth_gbs:.0f}",
            g.interconnect,
            f"{g.interconnect_gbs:.0f}",
            f"{g.default_mfu:.2f}",
        ]
        for g in catalog.gpus
    ]
    print(_table(headers, rows, right=set(range(1, 11)) - {8}))
    print("TFLOP/s are dense peaks; '-' means the card has no such unit. Memory as CUDA reports it.")
    return 0


def _summary(offers: Sequence[PriceOffer], as_json: bool) -> int:
    """How old the offers are: the share older than a year (a release ships at most a quarter so), and the
    offers older than 90 days per provider."""
    ages = offer_ages((o.provider, o.as_of) for o in offers if not o.own)
    if as_json:
        print(json.dumps(ages.to_dict(), indent=2))
        return 0
    print(describe_offer_ages(ages))
    print(
        f"{ages.over_a_year} of {ages.total} offers ({ages.over_a_year_share:.0%}) are older than a year "
        f"(newest {ages.newest}, oldest {ages.oldest})"
    )
    warning = stale_offers_warning(ages)
    if warning:
        print(f"warning: {warning}")
    return 0


def _prices(args: argparse.Namespace) -> int:
    if args.json and args.csv:
        raise usage_error("--json, --csv: choose one output format")
    if args.summary and args.csv:
        raise usage_error("--summary, --csv: choose one output format")
    catalog = load_or_usage_error()
    offers = catalog.offers_for(args.gpu) if args.gpu else catalog.offers
    offers = tuple(sorted(offers, key=lambda o: (o.gpu, o.on_demand_usd, o.provider, o.region, o.instance_type)))
    if args.summary:
        return _summary(offers, args.json)
    if args.json:
        print(json.dumps([offer_dict(o) for o in offers], indent=2))
        return 0
    if args.csv:
        sys.stdout.write(offers_to_csv(offers))
        return 0
    if not offers:
        print("no prices for this GPU; add one in " + str(user_files()["prices"]))
        return 0
    headers = [
        "GPU",
        "Provider",
        "Region",
        "Instance",
        "GPUs",
        "On-demand $/GPU-h",
        "$/instance-h",
        "Spot $/GPU-h",
        "$/instance-h",
        "Int./h",
        "Int. source",
        "Notice s",
        "As of",
        "Source",
    ]
    rows = []
    for o in offers:
        r = offer_row(o)
        spot_instance = o.spot_usd_per_instance
        rows.append(
            [
                o.gpu,
                o.provider,
                o.region_label,
                o.instance_type,
                str(o.gpu_count),
                f"{o.on_demand_usd:.3f}",
                f"{o.on_demand_usd_per_instance:.2f}",
                f"{o.spot_usd:.3f}" if o.spot_usd is not None else "-",
                f"{spot_instance:.2f}" if spot_instance is not None else "-",
                r["interruptions_per_hour"] or "-",
                o.interruptions_basis if o.spot_usd is not None else "-",
                r["preemption_notice_s"] or "-",
                o.as_of,
                o.source,
            ]
        )
    print(_table(headers, rows, right={4, 5, 6, 7, 8, 9, 11}))
    dates = Catalog(catalog.gpus, offers).price_dates()
    if dates:
        print(f"{describe_age(dates[0]).capitalize()} (oldest offer); newest {dates[1]}. Prices per GPU-hour in USD;")
        print("an instance is billed whole. `gpuplanner catalog update` fetches current prices.")
    return 0


PROVIDER_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")


def _import_skypilot(args: argparse.Namespace) -> int:
    from gpuplanner.plan.catalog import builtin_catalog
    from gpuplanner.plan.catalog_update import with_shipped_interruptions
    from gpuplanner.plan.skypilot import import_vms_csv, merge_into_user_prices

    provider = args.provider.strip().lower()
    if not PROVIDER_PATTERN.match(provider) or provider == OWN_PROVIDER:
        raise usage_error(
            "--provider: a cloud name of letters, digits, '.', '_' or '-' such as aws, gcp or azure "
            f"('{OWN_PROVIDER}' is kept for machines.toml)"
        )
    path = Path(args.vms_csv)
    if not path.is_file():
        raise usage_error(f"VMS_CSV: no such file: {path}")
    as_of = args.as_of
    if as_of is None:  # the day SkyPilot wrote its copy of the catalog, not today
        as_of = _dt.date.fromtimestamp(path.stat().st_mtime).isoformat()
    else:
        try:
            _dt.date.fromisoformat(as_of)
        except ValueError:
            raise usage_error(f"--as-of: an ISO date like 2026-11-20, got {as_of!r}") from None
    catalog = load_or_usage_error()
    try:
        result = import_vms_csv(path, provider, catalog, as_of=as_of)
        offers = with_shipped_interruptions(result.offers, builtin_catalog().offers)
        result = replace(result, offers=tuple(offers))
        merged = merge_into_user_prices(result.offers, catalog=catalog) if result.offers else None
    except CatalogError as exc:
        raise usage_error(str(exc)) from None
    report = result.report
    if args.json:
        document = report.to_dict()
        document["merge"] = merged.to_dict() if merged else None
        document["offers"] = [offer_dict(o) for o in result.offers]
        print(json.dumps(document, indent=2))
        return 0
    print(f"read {report.rows} rows from {path}")
    if args.as_of is None:
        print(
            f"dated {as_of}, the file's modification day (a SkyPilot vms.csv carries no date of its own): "
            "give --as-of DATE if it was copied later than SkyPilot wrote it"
        )
    print(f"imported {report.imported} offers for provider {provider!r}", end="")
    if merged:
        print(f" into {merged.path} ({merged.added} added, {merged.replaced} replaced, {merged.total} in the file)")
    else:
        print(" (nothing written)")
    print(
        f"skipped: {report.skipped_no_accelerator} without accelerators, {report.skipped_no_price} without a price, "
        f"{report.skipped_fractional} with a fraction of a GPU, {report.skipped_unknown} with an unknown accelerator"
    )
    if report.unknown_accelerators:
        names = ", ".join(f"{n} ({c})" for n, c in sorted(report.unknown_accelerators.items()))
        print(f"unknown accelerators (add them in gpus.toml to import them): {names}")
    if report.bad_gpu_info:
        print(f"{report.bad_gpu_info} rows had an unreadable GpuInfo cell (AcceleratorName used instead)")
    if report.malformed or report.gpu_only:
        print(
            f"skipped {report.malformed} malformed rows and {report.gpu_only} GPU-only rows "
            "(an accelerator without its host machine's price: not rentable)"
        )
    for problem in report.problems:
        print(f"  {problem}")
    return 0


def _update_action(args: argparse.Namespace) -> int:
    from gpuplanner.commands.catalog_updating import update  # its own module (it imports this one's helpers)

    return update(args)


def _save_machine(name: str, fields: dict[str, Any], catalog: Catalog) -> Path:
    try:
        return save_machine(name, fields, catalog)
    except MachineSaveError as exc:
        raise usage_error(f"--save: {exc}") from None


def _tco(args: argparse.Namespace) -> int:
    from gpuplanner.plan.ownership import HOST_OVERHEAD_W, OwnHardware, amortised_price, estimated_power_w
    from gpuplanner.plan.setup import PlanInputError

    catalog = load_or_usage_error()
    spec = catalog.find_gpu(args.gpu)
    if spec is None:
        raise usage_error(f"--gpu: unknown GPU {args.gpu!r}; known: {', '.join(g.name for g in catalog.gpus)}")
    if args.gpus < 1:
        raise usage_error(f"--gpus: a whole number of at least 1, got {args.gpus}")
    power_estimated = args.power_w is None
    power = estimated_power_w(args.gpus, spec.tdp_w) if power_estimated else args.power_w
    try:
        price = amortised_price(
            OwnHardware(
                purchase_usd=args.purchase_usd,
                lifetime_years=args.lifetime_years,
                power_w=power,
                electricity_usd_per_kwh=args.electricity_usd_per_kwh,
                utilisation=args.utilisation,
                gpus=args.gpus,
                idle_power_w=args.idle_power_w,
                upkeep_usd_per_year=args.upkeep_usd_per_year,
                residual_usd=args.residual_usd,
            )
        )
    except PlanInputError as exc:
        raise usage_error(str(exc)) from None
    rented = [o for o in catalog.offers_for(spec.name) if not o.own]
    cloud = min(rented, key=lambda o: (o.on_demand_usd, o.provider, o.instance_type), default=None)
    saved = None
    if args.save:
        name = args.save.strip()
        if not name:
            raise usage_error("--save: a machine name, e.g. workstation")
        saved = _save_machine(name, machine_fields(name, spec.name, price, power_estimated), catalog)
    if args.json:
        document = price.to_dict()
        document.update(
            {
                "gpu": spec.name,
                "power_estimated": power_estimated,
                "cheapest_cloud_on_demand": offer_dict(cloud) if cloud else None,
                "saved_to": str(saved) if saved else None,
            }
        )
        print(json.dumps(document, indent=2))
        return 0
    hw = price.hardware
    print(f"Amortised price of {hw.gpus} x {spec.name} you own")
    print(
        f"  capital      {human_money(price.capital_usd_per_hour, 3):>9}/h  ({human_money(hw.purchase_usd, 0)} less {human_money(hw.residual_usd, 0)} "
        f"resale over {price.training_hours:,.0f} training hours: {hw.lifetime_years:g} years at {hw.utilisation:.0%})"
    )
    how = (
        f"estimated: {hw.gpus} x {spec.tdp_w:,.0f} W board power + {HOST_OVERHEAD_W:,.0f} W host"
        if power_estimated
        else "given"
    )
    print(
        f"  energy       {human_money(price.energy_usd_per_hour, 3):>9}/h  ({hw.power_w:,.0f} W, {how}, at {human_money(hw.electricity_usd_per_kwh, None)}/kWh)"
    )
    if hw.idle_power_w:
        print(
            f"  idle energy  {human_money(price.idle_energy_usd_per_hour, 3):>9}/h  ({hw.idle_power_w:,.0f} W while not training)"
        )
    if hw.upkeep_usd_per_year:
        print(
            f"  upkeep       {human_money(price.upkeep_usd_per_hour, 3):>9}/h  ({human_money(hw.upkeep_usd_per_year, 0)} a year)"
        )
    print(
        f"  total        {human_money(price.usd_per_machine_hour, 3):>9} per machine-hour = {human_money(price.usd_per_gpu_hour, 3)} per GPU-hour"
    )
    if cloud is not None:
        print(
            f"cheapest cloud on demand for {spec.name}: {human_money(cloud.on_demand_usd, 3)}/GPU-h "
            f"({cloud.provider} {cloud.instance_type}, {human_gpus(cloud.gpu_count)}, {describe_age(cloud.as_of)})"
        )
    if saved:
        print(f"saved as machine {args.save.strip()!r} in {saved}: plans and compare now include it (provider own)")
    else:
        print("add --save NAME to keep it as an own machine in machines.toml")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "catalog",
        help="list the GPU and price catalog, import SkyPilot prices",
        description="The GPUs and prices the planner uses (shipped data plus your overrides).",
    )
    sub = parser.add_subparsers(dest="catalog_command", metavar="SUBCOMMAND", parser_class=type(parser))

    gpus = sub.add_parser("gpus", help="list the GPUs with their specs")
    gpus.add_argument("--json", action="store_true", help="print one JSON document")
    gpus.set_defaults(handler=_gpus)

    prices = sub.add_parser(
        "prices", aliases=["list"], help="list the price offers (per GPU-hour) with their dates and sources"
    )
    prices.add_argument("--gpu", metavar="NAME", help="only this GPU (any alias, e.g. h100, 'NVIDIA A10G')")
    prices.add_argument("--json", action="store_true", help="print one JSON document")
    prices.add_argument("--csv", action="store_true", help="print CSV in the prices.csv format")
    prices.add_argument(
        "--summary",
        action="store_true",
        help="only how old the offers are: the share older than a year, and per provider those older than 90 days",
    )
    prices.set_defaults(handler=_prices)

    skypilot = sub.add_parser(
        "import-skypilot",
        help="merge a SkyPilot vms.csv into your prices.csv",
        description="Read a SkyPilot catalog vms.csv (e.g. ~/.sky/catalogs/v7/aws/vms.csv) and merge its "
        "GPU prices, per GPU-hour, into the prices.csv in your config directory.",
    )
    skypilot.add_argument("vms_csv", metavar="VMS_CSV", help="path of the vms.csv")
    skypilot.add_argument("--provider", required=True, metavar="NAME", help="provider name for the rows, e.g. aws")
    skypilot.add_argument(
        "--as-of", metavar="DATE", help="the catalog's date (ISO; default: the file's modification day)"
    )
    skypilot.add_argument("--json", action="store_true", help="print one JSON document")
    skypilot.set_defaults(handler=_import_skypilot)

    update = sub.add_parser(
        "update",
        help="fetch current prices from SkyPilot's hosted catalogs into your cache",
        description="Download SkyPilot's public price catalogs (one vms.csv per cloud), keep each catalog's own "
        "date, and store the offers in your cache folder. Your prices.csv always wins. Offline, nothing changes. "
        "Exit 0 when every cloud updated, 1 when offline or when a file was rejected or failed.",
    )
    update.add_argument(
        "--cloud",
        action="append",
        metavar="NAME",
        help="a cloud to fetch (repeat for more; default: aws, gcp, azure, lambda, runpod)",
    )
    update.add_argument(
        "--url",
        metavar="BASE",
        help="base URL holding <cloud>/vms.csv (default: $GPUPLANNER_CATALOG_URL or SkyPilot's catalog v7 on GitHub)",
    )
    update.add_argument(
        "--spot-advisor-url",
        metavar="URL",
        help="AWS Spot Instance Advisor JSON for AWS spot interruption rates (default: $GPUPLANNER_SPOT_ADVISOR_URL, "
        "AWS's feed with the default catalog, or <BASE>/aws/spot-advisor-data.json with --url)",
    )
    update.add_argument(
        "--as-of",
        metavar="DATE",
        help="the catalogs' date (ISO) where they carry none of their own, e.g. for a mirror or a copy "
        "(default: the server's Last-Modified, else the download day)",
    )
    update.add_argument(
        "--replace",
        action="store_true",
        help="let an older catalog replace a cached one dated newer (to correct a wrong date)",
    )
    update.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds per download (default 30)")
    update.add_argument("--json", action="store_true", help="print one JSON document")
    update.set_defaults(handler=_update_action)

    tco = sub.add_parser(
        "tco",
        help="amortised price per GPU-hour of hardware you own",
        description="Total cost of ownership as a price per GPU-hour: purchase price (less resale) over the "
        "training hours of its lifetime, plus electricity, idle power and upkeep. --save keeps it as an own "
        "machine in machines.toml, so plans and compare rank it beside cloud offers.",
    )
    tco.add_argument("--gpu", required=True, metavar="NAME", help="the GPU model (any catalog name or alias)")
    tco.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs in the machine (default 1)")
    tco.add_argument("--purchase-usd", type=float, required=True, metavar="USD", help="what the machine cost")
    tco.add_argument("--lifetime-years", type=float, required=True, metavar="Y", help="years until replaced")
    tco.add_argument("--electricity-usd-per-kwh", type=float, required=True, metavar="USD", help="price of a kWh")
    tco.add_argument(
        "--utilisation", type=float, required=True, metavar="SHARE", help="share of hours spent training (0.5 = half)"
    )
    tco.add_argument(
        "--power-w", type=float, metavar="W", help="draw while training (default: board power of the GPUs + 250 W)"
    )
    tco.add_argument("--idle-power-w", type=float, default=0.0, metavar="W", help="draw while idle (default 0)")
    tco.add_argument(
        "--upkeep-usd-per-year", type=float, default=0.0, metavar="USD", help="hosting, repairs (default 0)"
    )
    tco.add_argument(
        "--residual-usd", type=float, default=0.0, metavar="USD", help="resale value at the end (default 0)"
    )
    tco.add_argument("--save", metavar="NAME", help="add it to machines.toml as an own machine with this name")
    tco.add_argument("--json", action="store_true", help="print one JSON document")
    tco.set_defaults(handler=_tco)

    def _help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(handler=_help)
