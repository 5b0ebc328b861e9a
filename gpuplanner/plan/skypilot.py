"""Import prices from a SkyPilot catalog ``vms.csv`` into the user's ``prices.csv``.

SkyPilot keeps one ``vms.csv`` per cloud (``~/.sky/catalogs/<version>/<cloud>/vms.csv``). The columns
are the same family everywhere but their order differs per cloud, so rows are read by header name:
``InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region,
AvailabilityZone``. ``Price`` and ``SpotPrice`` are per instance-hour; we divide by the accelerator
count to get the per-GPU-hour prices the catalog uses, and keep the cheapest zone of each region and
instance type. ``GpuInfo`` is a Python literal (a dict, sometimes a bare name); it is read with
:func:`ast.literal_eval` only, never evaluated as code, and used where ``AcceleratorName`` is blank or
ambiguous.

Pure apart from :func:`merge_into_user_prices`, which writes the user's ``prices.csv`` atomically.
"""

from __future__ import annotations

import ast
import csv
import datetime as _dt
import io
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplanner.export.human import human_money
from gpuplanner.plan.catalog import (
    Catalog,
    CatalogError,
    GpuSpec,
    PriceOffer,
    csv_rows,
    load_catalog,
    offers_to_csv,
    parse_prices,
    user_files,
)

# Seconds of warning before a spot VM is reclaimed, by provider (others: unknown).
SPOT_NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
_MAX_GPU_INFO_CHARS = 4096
_MAX_PROBLEMS = 20


@dataclass
class ImportReport:
    """What an import read, kept and skipped."""

    path: str
    provider: str
    rows: int = 0
    imported: int = 0
    skipped_no_accelerator: int = 0
    skipped_no_price: int = 0
    skipped_fractional: int = 0
    bad_gpu_info: int = 0
    spot_dropped: int = 0
    malformed: int = 0
    gpu_only: int = 0
    unknown_accelerators: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def skipped_unknown(self) -> int:
        return sum(self.unknown_accelerators.values())

    def note(self, line: int, message: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(f"line {line}: {message}")

    def skip_malformed(self, line: int, message: str) -> None:
        """A row that does not read (a price that is no number, cells missing mid-file): skipped, counted and
        named by its line; the rest of the file still counts."""
        self.malformed += 1
        self.note(line, f"malformed row skipped: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "provider": self.provider,
            "rows": self.rows,
            "imported": self.imported,
            "skipped": {
                "no_accelerator": self.skipped_no_accelerator,
                "no_price": self.skipped_no_price,
                "fractional_gpu": self.skipped_fractional,
                "unknown_accelerator": self.skipped_unknown,
            },
            "unknown_accelerators": dict(sorted(self.unknown_accelerators.items())),
            "bad_gpu_info": self.bad_gpu_info,
            "spot_dropped": self.spot_dropped,
            "malformed_rows": self.malformed,
            "gpu_only": self.gpu_only,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class SkyPilotImport:
    offers: tuple[PriceOffer, ...]
    report: ImportReport


@dataclass(frozen=True)
class MergeResult:
    path: Path
    added: int
    replaced: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "added": self.added, "replaced": self.replaced, "total": self.total}


def parse_gpu_info(text: str) -> tuple[str | None, float | None]:
    """Accelerator name and per-GPU memory (MiB) from a ``GpuInfo`` cell; raises ValueError if malformed.

    Accepts a dict like ``{'Gpus': [{'Name': 'A10G', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 24576}}]}``
    or a bare name (``'T4'`` or ``T4``)."""
    text = text.strip()
    if not text:
        return None, None
    if len(text) > _MAX_GPU_INFO_CHARS:
        raise ValueError("GpuInfo cell is too long")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if text.replace("-", "").replace("_", "").isalnum():
            return text, None  # a bare accelerator name, unquoted
        raise ValueError(f"GpuInfo is not a Python literal: {text[:60]!r}") from None
    if isinstance(value, str):
        return (value.strip() or None), None
    if not isinstance(value, dict):
        raise ValueError(f"GpuInfo is a {type(value).__name__}, expected a dict")
    gpus = value.get("Gpus")
    if not isinstance(gpus, list) or not gpus or not isinstance(gpus[0], dict):
        raise ValueError("GpuInfo has no 'Gpus' list")
    first = gpus[0]
    name = first.get("Name")
    memory = first.get("MemoryInfo", {})
    size = memory.get("SizeInMiB") if isinstance(memory, dict) else None
    name = name.strip() if isinstance(name, str) and name.strip() else None
    try:
        size = float(size) if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0 else None
    except OverflowError:  # an integer of hundreds of digits
        size = math.inf
    if size is not None and not math.isfinite(size):  # 1e999 reads as infinity
        raise ValueError("GpuInfo memory size is not a finite number")
    return name, size


_MAX_GPUS_PER_INSTANCE = 1024  # clouds sell 1-16; more is a corrupt cell


def _cell(row: dict[str, str], column: str) -> str:
    return (row.get(column) or "").strip()


def _price(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _resolve(catalog: Catalog, name: str, memory_mib: float | None) -> GpuSpec | None:
    spec = catalog.find_gpu(name)
    if memory_mib is None:
        return spec
    memory_gib = memory_mib / 1024
    if spec is None or abs(spec.marketing_memory_gb - memory_gib) > 0.2 * spec.marketing_memory_gb:
        # "A100" with 80 GiB in GpuInfo is an A100-80GB: try the name with the memory size.
        sized = catalog.find_gpu(f"{name}-{round(memory_gib)}GB")
        if sized is not None:
            return sized
    return spec


# Board variants the instance type names (PCIe or SXM). The accelerator column says only "H100" or "A100"; the
# instance type says which board: Lambda's ``gpu_1x_h100_pcie`` is an H100 PCIe, ``gpu_1x_h100_sxm5`` an SXM.
_PCIE_TOKENS = ("pcie",)
_SXM_TOKENS = ("sxm", "sxm2", "sxm4", "sxm5", "sxm6")
# Instance types that name no board but are sold as one (Lambda's instance-types API: "1x A100 (40 GB PCIe)",
# and the 2x and 4x sizes, are PCIe boards; its 8x A100 is SXM4).
_BOARD_BY_INSTANCE = {
    ("lambda", "gpu_1x_a100"): "pcie",
    ("lambda", "gpu_2x_a100"): "pcie",
    ("lambda", "gpu_4x_a100"): "pcie",
    ("lambda", "gpu_8x_a100"): "sxm",
}


def instance_board(provider: str, instance: str) -> str | None:
    """``"pcie"``, ``"sxm"`` or None: the board an instance type names (its own tokens, else a known type)."""
    tokens = instance.lower().replace("-", "_").replace(".", "_").split("_")
    if any(t in _PCIE_TOKENS for t in tokens):
        return "pcie"
    if any(t in _SXM_TOKENS for t in tokens):
        return "sxm"
    return _BOARD_BY_INSTANCE.get((provider, instance.lower()))


def board_variant(catalog: Catalog, spec: GpuSpec, board: str | None) -> GpuSpec:
    """The catalog GPU of ``spec``'s model and memory on ``board`` (e.g. H100 SXM -> H100 PCIe), where the
    catalog has one; else ``spec``."""
    if board is None:
        return spec
    is_pcie = spec.name.endswith(" PCIe")
    if board == "pcie" and not is_pcie:
        base = spec.name.removesuffix(" SXM")
        found = catalog.find_gpu(f"{base} PCIe")
    elif board == "sxm" and is_pcie:
        found = catalog.find_gpu(spec.name.removesuffix(" PCIe"))
    else:
        return spec
    if found is None or abs(found.marketing_memory_gb - spec.marketing_memory_gb) > 0.2 * spec.marketing_memory_gb:
        return spec
    return found


def instance_memory_variant(catalog: Catalog, spec: GpuSpec, accelerator: str, instance: str) -> GpuSpec:
    """``spec`` in the memory size the instance type names (``gpu_8x_a100_80gb_sxm4`` is an A100 80GB even
    where its accelerator column says ``A100``), where the catalog has that size; else ``spec``."""
    for token in instance.lower().replace("-", "_").replace(".", "_").split("_"):
        if token.endswith("gb") and token[:-2].isdigit():
            size = int(token[:-2])
            if abs(spec.marketing_memory_gb - size) > 0.2 * size:
                sized = catalog.find_gpu(f"{accelerator}-{size}GB")
                if sized is not None:
                    return sized
    return spec


# GCP sells these accelerators only inside their own machine family: the catalog lists the accelerator's price
# (a row without an InstanceType) and the machine's (a row without an accelerator) apart, and a rentable offer
# is their sum in the same zone. Accelerator name (as in SkyPilot's catalog) -> {GPUs: host machine type}.
GCP_HOSTS: dict[str, dict[int, str]] = {
    "A100": {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g", 16: "a2-megagpu-16g"},
    "A100-80GB": {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"},
    "H100": {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"},
    "H100-MEGA": {8: "a3-megagpu-8g"},
    "H200": {8: "a3-ultragpu-8g"},
    "B200": {8: "a4-highgpu-8g"},
    "L4": {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
}


def gcp_host(accelerator: str, count: int) -> str | None:
    """The GCP machine type an accelerator-only row needs, or None where it attaches to any VM (T4, V100)."""
    return GCP_HOSTS.get(accelerator.strip(), {}).get(count)


def import_vms_csv(
    path: Path | str,
    provider: str,
    catalog: Catalog | None = None,
    *,
    as_of: str | None = None,
) -> SkyPilotImport:
    """Read a SkyPilot ``vms.csv`` into per-GPU-hour offers from ``provider`` (e.g. ``"aws"``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(path, f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise CatalogError(path, f"cannot read: {exc.strerror or exc}") from None
    return parse_vms_text(text, path, provider, catalog, as_of=as_of)


# Prices per GPU-hour are kept (and cached) to the millionth of a dollar.
PRICE_DECIMALS = 6

_REQUIRED_VMS_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")


def _strict_price(text: str, column: str) -> str | None:
    """In strict mode a price cell is empty or a positive finite number; else what is wrong with it."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        return f"{column} must be a positive number of dollars, got {text[:20]!r}"
    return None


def parse_vms_text(
    text: str,
    name: Path | str,
    provider: str,
    catalog: Catalog | None = None,
    *,
    as_of: str | None = None,
    source: str | None = None,
    strict: bool = False,
) -> SkyPilotImport:
    """Offers from the text of a SkyPilot ``vms.csv`` (``name`` names it in messages: a path or a URL).

    Lenient by default (rows without a usable price are counted and skipped). ``strict`` (for catalogs
    fetched over the network) rejects the whole file when it is cut short (its last row has fewer cells than
    the header or no line end, or it has no rows); a malformed row elsewhere (cells missing, a price that is
    not a positive number) is skipped, counted and named by its line.

    Board variants come from the instance type (:func:`instance_board`), one offer per instance; GCP
    accelerator-only rows of the a2/a3/a4/g2 families are priced with their host machine from the same
    zone, or, where the catalog has no such machine, counted as GPU only and skipped."""
    provider = provider.strip().lower()
    if catalog is None:
        catalog = load_catalog()
    if as_of is None:
        as_of = _dt.date.today().isoformat()
    label = name if isinstance(name, str) else str(name)
    report = ImportReport(path=label, provider=provider)
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""), strict=strict)
    try:
        header = [h.strip() for h in (next(reader, None) or [])]
    except csv.Error as exc:
        raise CatalogError(name, f"bad CSV: {exc}", line=1) from None
    for column in _REQUIRED_VMS_COLUMNS:
        if column not in header:
            raise CatalogError(
                name, "this does not look like a SkyPilot vms.csv: a column is missing", line=1, field=column
            )

    rows = [(line, cells) for line, cells in csv_rows(reader, name) if any(c.strip() for c in cells)]
    last_line = rows[-1][0] if rows else 0
    # GCP: the price of each host machine by (region, zone, machine type), for accelerator-only rows.
    hosts: dict[tuple[str, str, str], tuple[float | None, float | None]] = {}
    for _line, cells in rows:
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        if _cell(row, "InstanceType") and not _cell(row, "AcceleratorName"):
            key = (_cell(row, "Region"), _cell(row, "AvailabilityZone"), _cell(row, "InstanceType"))
            hosts[key] = (_price(_cell(row, "Price")), _price(_cell(row, "SpotPrice")))

    # (region, instance type, gpu) -> [count, cheapest on-demand, cheapest spot]
    best: dict[tuple[str, str, str], list[Any]] = {}
    for line, cells in rows:
        if strict and len(cells) != len(header):
            if line == last_line:  # the last row stops mid-way: a download cut short
                raise CatalogError(
                    name,
                    f"the row has {len(cells)} cells but the header has {len(header)}: the file is cut short or malformed",
                    line=line,
                )
            report.rows += 1
            report.skip_malformed(line, f"{len(cells)} cells, the header has {len(header)}")
            continue
        row = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}
        report.rows += 1
        accelerator = _cell(row, "AcceleratorName")
        count_text = _cell(row, "AcceleratorCount")
        info_name, info_mib = None, None
        info_text = _cell(row, "GpuInfo")
        if info_text:
            try:
                info_name, info_mib = parse_gpu_info(info_text)
            except ValueError as exc:
                report.bad_gpu_info += 1
                report.note(line, f"ignored GpuInfo: {exc}")
        accelerator = accelerator or (info_name or "")
        try:
            count = float(count_text) if count_text else 0.0
        except ValueError:
            if strict:
                report.skip_malformed(line, f"AcceleratorCount is not a number: {count_text[:20]!r}")
                continue
            count = 0.0
        if strict:
            problem = _strict_price(_cell(row, "Price"), "Price") or _strict_price(_cell(row, "SpotPrice"), "SpotPrice")
            if problem:
                report.skip_malformed(line, problem)
                continue
        if not accelerator or not math.isfinite(count) or count <= 0:
            report.skipped_no_accelerator += 1
            continue
        if count > _MAX_GPUS_PER_INSTANCE:
            report.skipped_no_accelerator += 1
            report.note(line, f"AcceleratorCount {count_text[:20]} is more GPUs than an instance has")
            continue
        if count < 1 or not count.is_integer():
            report.skipped_fractional += 1
            continue
        spec = _resolve(catalog, accelerator, info_mib)
        if spec is None:
            report.unknown_accelerators[accelerator] = report.unknown_accelerators.get(accelerator, 0) + 1
            continue
        price = _price(_cell(row, "Price"))
        if price is None:
            report.skipped_no_price += 1
            continue
        spot = _price(_cell(row, "SpotPrice"))
        region = _cell(row, "Region")
        if not region:
            report.skipped_no_price += 1
            report.note(line, "no Region")
            continue
        gpus = int(count)
        instance = _cell(row, "InstanceType")
        if not instance:
            host = gcp_host(accelerator, gpus) if provider == "gcp" else None
            if host is not None:
                host_on_demand, host_spot = hosts.get((region, _cell(row, "AvailabilityZone"), host), (None, None))
                if host_on_demand is None:
                    # the accelerator cannot be rented without its machine: GPU only, not a rentable offer
                    report.gpu_only += 1
                    report.note(
                        line, f"{gpus}x {accelerator} in {region}: no {host} price to rent it with; GPU only, skipped"
                    )
                    continue
                instance = host
                price += host_on_demand
                spot = spot + host_spot if spot is not None and host_spot is not None else None
            else:
                instance = f"{gpus}x {accelerator} (accelerator only)"
        spec = instance_memory_variant(catalog, spec, accelerator, instance)
        spec = board_variant(catalog, spec, instance_board(provider, instance))
        key = (region, instance, spec.name)
        entry = best.setdefault(key, [gpus, math.inf, math.inf])
        entry[1] = min(entry[1], price / gpus)
        if spot is not None:
            entry[2] = min(entry[2], spot / gpus)
    if strict and rows and report.malformed == report.rows:
        raise CatalogError(name, f"every one of its {report.rows} rows is malformed; not a price catalog")
    if strict and report.rows == 0:
        raise CatalogError(name, "the file has a header but no rows: an empty or cut-short catalog")
    if strict and text.strip() and not text.endswith(("\n", "\r")):
        # A download cut inside its last cell still parses ("2.49" read as "2.4"); a catalog written by
        # SkyPilot ends every row, the last one included, with a line end.
        raise CatalogError(name, "the last row has no line end: the file is cut short")

    offers = []
    if source is None:
        source = f"SkyPilot catalog {Path(label).name}"
    for (region, instance, gpu_name), (gpus, on_demand, spot) in sorted(best.items()):
        if round(on_demand, PRICE_DECIMALS) <= 0:
            # Positive but under $0.000001 per GPU-hour: it would be written (and priced) as $0.
            report.skipped_no_price += 1
            if len(report.problems) < _MAX_PROBLEMS:
                report.problems.append(
                    f"{instance} in {region}: {human_money(on_demand)} per GPU-hour rounds to $0; skipped"
                )
            continue
        spot_usd: float | None = spot if math.isfinite(spot) else None
        if spot_usd is not None and round(spot_usd, PRICE_DECIMALS) <= 0:
            report.spot_dropped += 1
            spot_usd = None
        if spot_usd is not None and spot_usd >= on_demand:
            report.spot_dropped += 1
            spot_usd = None
        offers.append(
            PriceOffer(
                provider=provider,
                region=region,
                gpu=gpu_name,
                gpu_count=gpus,
                instance_type=instance,
                on_demand_usd=round(on_demand, PRICE_DECIMALS),
                spot_usd=round(spot_usd, PRICE_DECIMALS) if spot_usd is not None else None,
                interruptions_per_hour=None,
                notice_s=SPOT_NOTICE_S.get(provider) if spot_usd is not None else None,
                as_of=as_of,
                source=source,
            )
        )
    report.imported = len(offers)
    return SkyPilotImport(tuple(offers), report)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def merge_into_user_prices(
    offers: tuple[PriceOffer, ...] | list[PriceOffer],
    config_dir: Path | None = None,
    catalog: Catalog | None = None,
) -> MergeResult:
    """Merge offers into ``<config_dir>/prices.csv``: same provider, region, GPU and instance type
    replaces the row, anything else is appended. The file is replaced atomically; a malformed existing
    file raises :class:`CatalogError` and is left untouched."""
    path = user_files(config_dir)["prices"]
    if catalog is None:
        catalog = load_catalog(config_dir)
    existing = parse_prices(path, catalog) if path.exists() else ()
    rows = {offer.key: offer for offer in existing}
    added = replaced = 0
    for offer in offers:
        if offer.key in rows:
            replaced += 1
        else:
            added += 1
        rows[offer.key] = offer
    atomic_write(path, offers_to_csv(rows.values()))
    return MergeResult(path=path, added=added, replaced=replaced, total=len(rows))
