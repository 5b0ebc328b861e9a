"""Refresh the shipped price snapshot (resources/catalog/prices.csv) from SkyPilot's public catalog files.

    git clone https://github.com/skypilot-org/skypilot-catalog /tmp/skypilot-catalog
    .venv/bin/python tools/refresh_shipped_catalog.py --repo /tmp/skypilot-catalog            # rewrite
    .venv/bin/python tools/refresh_shipped_catalog.py --repo /tmp/skypilot-catalog --check    # list only

For each cloud of ``catalogs/v7/<cloud>/vms.csv`` (aws, gcp, azure, lambda, runpod) the file is read the way
``gpuplanner catalog update`` reads it (:func:`gpuplanner.plan.skypilot.parse_vms_text`: per-GPU prices,
the cheapest zone, the board from the instance type, GCP accelerators with their host machine), and each
shipped row of that provider whose region and instance type the catalog has takes the catalog's prices. The
row is dated by the date of the file's last commit (``git log -1 --format=%cs -- <file>``) and its source
names the file and the commit. The row keeps its provider, region, instance, GPU count and its spot
interruption rate (SkyPilot publishes none). Rows the catalog does not have, and the rows of providers
SkyPilot does not cover, keep their own prices and dates. Only the cells of changed rows are rewritten, so a
diff shows exactly what moved. Repeatable: the same clone gives the same file.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

from gpuplanner.plan.catalog import builtin_catalog
from gpuplanner.plan.skypilot import parse_vms_text

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "resources" / "catalog" / "prices.csv"
CLOUDS = ("aws", "gcp", "azure", "lambda", "runpod")
REPO_URL = "https://github.com/skypilot-org/skypilot-catalog"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _money(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}".rstrip("0").rstrip(".")


def refresh(repo: Path, text: str) -> tuple[str, list[str]]:
    """The shipped CSV ``text`` with the rows SkyPilot's catalog in ``repo`` covers refreshed, and one line per
    changed row."""
    catalog = builtin_catalog()
    rows = list(csv.DictReader(io.StringIO(text)))
    fieldnames = list(rows[0].keys()) if rows else []
    changes: list[str] = []
    for cloud in CLOUDS:
        relative = f"catalogs/v7/{cloud}/vms.csv"
        path = repo / relative
        if not path.is_file():
            changes.append(f"{cloud}: no {relative} in {repo}; its rows keep their dates")
            continue
        committed = _git(repo, "log", "-1", "--format=%cs", "--", relative)
        commit = _git(repo, "log", "-1", "--format=%H", "--", relative)
        source = f"SkyPilot catalog v7 {cloud}/vms.csv ({REPO_URL} at {commit[:12]}, committed {committed})"
        imported = parse_vms_text(path.read_text(encoding="utf-8-sig"), relative, cloud, catalog, as_of=committed)
        offers = {(o.region, o.instance_type, o.gpu_count): o for o in imported.offers}
        for row in rows:
            if row["provider"] != cloud:
                continue
            offer = offers.get((row["region"], row["instance_type"], int(row["gpu_count"])))
            if offer is None or row["as_of"] > committed:
                continue
            before = (row["on_demand_usd_per_gpu_hour"], row["spot_usd_per_gpu_hour"], row["as_of"])
            row["gpu"] = offer.gpu
            row["on_demand_usd_per_gpu_hour"] = _money(offer.on_demand_usd)
            row["spot_usd_per_gpu_hour"] = _money(offer.spot_usd)
            if offer.spot_usd is None:
                row["interruptions_per_hour"] = row["preemption_notice_s"] = row["interruptions_source"] = ""
            row["as_of"], row["source"] = committed, source
            after = (row["on_demand_usd_per_gpu_hour"], row["spot_usd_per_gpu_hour"], row["as_of"])
            if after != before:
                changes.append(f"{cloud} {row['region']} {row['instance_type']}: {before} -> {after}")
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue(), changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of skypilot-org/skypilot-catalog")
    parser.add_argument("--check", action="store_true", help="list the changes, write nothing (exit 1 if any)")
    args = parser.parse_args(argv)
    text, changes = refresh(args.repo, SHIPPED.read_text(encoding="utf-8"))
    for line in changes:
        print(line)
    if args.check:
        return 1 if text != SHIPPED.read_text(encoding="utf-8") else 0
    SHIPPED.write_text(text, encoding="utf-8")
    print(f"wrote {SHIPPED} ({len(changes)} lines above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
