"""`gpuplanner catalog`: list the GPUs and prices the planner knows, and import SkyPilot prices.

gpuplanner catalog gpus [--json]
gpuplanner catalog prices [--gpu NAME] [--json | --csv]
gpuplanner catalog import-skypilot VMS_CSV --provider NAME [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuplanner.commands.errors import UsageError
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


def _usage_error(message: str) -> Exception:
    return UsageError(message)


def _load() -> Catalog:
    try:
        return load_catalog()
    except CatalogError as exc:
        raise _usage_error(str(exc)) from None


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
    catalog = _load()
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


def _prices(args: argparse.Namespace) -> int:
    if args.json and args.csv:
        raise _usage_error("--json, --csv: choose one output format")
    catalog = _load()
    offers = catalog.offers_for(args.gpu) if args.gpu else catalog.offers
    offers = tuple(sorted(offers, key=lambda o: (o.gpu, o.on_demand_usd, o.provider, o.region, o.instance_type)))
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
        "Spot $/GPU-h",
        "Int./h",
        "Notice s",
        "As of",
    ]
    rows = []
    for o in offers:
        r = offer_row(o)
        rows.append(
            [
                o.gpu,
                o.provider,
                o.region,
                o.instance_type,
                str(o.gpu_count),
                f"{o.on_demand_usd:.3f}",
                f"{o.spot_usd:.3f}" if o.spot_usd is not None else "-",
                r["interruptions_per_hour"] or "-",
                r["preemption_notice_s"] or "-",
                o.as_of,
            ]
        )
    print(_table(headers, rows, right={4, 5, 6, 7, 8}))
    return 0


_PROVIDER = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")


def _import_skypilot(args: argparse.Namespace) -> int:
    from gpuplanner.plan.skypilot import import_vms_csv, merge_into_user_prices

    provider = args.provider.strip().lower()
    if not _PROVIDER.match(provider) or provider == OWN_PROVIDER:
        raise _usage_error(
            "--provider: a cloud name of letters, digits, '.', '_' or '-' such as aws, gcp or azure "
            f"('{OWN_PROVIDER}' is kept for machines.toml)"
        )
    path = Path(args.vms_csv)
    if not path.is_file():
        raise _usage_error(f"VMS_CSV: no such file: {path}")
    catalog = _load()
    try:
        result = import_vms_csv(path, provider, catalog)
        merged = merge_into_user_prices(result.offers, catalog=catalog) if result.offers else None
    except CatalogError as exc:
        raise _usage_error(str(exc)) from None
    report = result.report
    if args.json:
        document = report.to_dict()
        document["merge"] = merged.to_dict() if merged else None
        document["offers"] = [offer_dict(o) for o in result.offers]
        print(json.dumps(document, indent=2))
        return 0
    print(f"read {report.rows} rows from {path}")
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
    for problem in report.problems:
        print(f"  {problem}")
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

    prices = sub.add_parser("prices", help="list the price offers (per GPU-hour)")
    prices.add_argument("--gpu", metavar="NAME", help="only this GPU (any alias, e.g. h100, 'NVIDIA A10G')")
    prices.add_argument("--json", action="store_true", help="print one JSON document")
    prices.add_argument("--csv", action="store_true", help="print CSV in the prices.csv format")
    prices.set_defaults(handler=_prices)

    skypilot = sub.add_parser(
        "import-skypilot",
        help="merge a SkyPilot vms.csv into your prices.csv",
        description="Read a SkyPilot catalog vms.csv (e.g. ~/.sky/catalogs/v7/aws/vms.csv) and merge its "
        "GPU prices, per GPU-hour, into the prices.csv in your config directory.",
    )
    skypilot.add_argument("vms_csv", metavar="VMS_CSV", help="path of the vms.csv")
    skypilot.add_argument("--provider", required=True, metavar="NAME", help="provider name for the rows, e.g. aws")
    skypilot.add_argument("--json", action="store_true", help="print one JSON document")
    skypilot.set_defaults(handler=_import_skypilot)

    def _help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(handler=_help)
