"""Reading and writing catalog files: ``gpus.toml`` tables, ``prices.csv`` rows and ``machines.toml`` (own
machines, at a fixed or an amortised price), each checked with errors naming the file, line and field.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gpuplanner.plan.catalog_types import (
    INTERCONNECTS,
    OWN_PROVIDER,
    PRICE_COLUMNS,
    TFLOPS_KEYS,
    Catalog,
    CatalogError,
    GpuSpec,
    PriceOffer,
    TflopsTable,
)
from gpuplanner.plan.setup import PlanInputError

_REQUIRED_PRICE_COLUMNS = PRICE_COLUMNS[:6] + ("as_of",)
# The fields of a [[gpu]] table and their types; a new GPU needs all but the optional ones.

_GPU_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "aliases": list,
    "memory_gib": (int, float),
    "marketing_memory_gb": (int, float),
    "bandwidth_gbs": (int, float),
    "interconnect": str,
    "interconnect_gbs": (int, float),
    "pcie_gen": int,
    "bf16": bool,
    "default_mfu": (int, float),
    "tdp_w": (int, float),
    "architecture": str,
    "compute_capability": str,
    "source": str,
}
_OPTIONAL_GPU_FIELDS = {"aliases", "tdp_w", "architecture", "compute_capability", "source", "marketing_memory_gb"}


class _TomlLines:
    """Best-effort line numbers for ``[[array]]`` tables and their keys (tomllib gives none)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def table_line(self, array: str, index: int) -> int | None:
        pattern = re.compile(rf"^\s*\[\[\s*{re.escape(array)}\s*\]\]")
        seen = -1
        for number, line in enumerate(self.lines, start=1):
            if pattern.match(line):
                seen += 1
                if seen == index:
                    return number
        return None

    def key_line(self, array: str, index: int, key: str) -> int | None:
        start = self.table_line(array, index)
        if start is None:
            return None
        key_pattern = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*=")
        for number in range(start + 1, len(self.lines) + 1):
            line = self.lines[number - 1]
            if re.match(r"^\s*\[", line):
                break
            if key_pattern.match(line):
                return number
        return start


def _read_toml(path: Path) -> tuple[dict[str, Any], _TomlLines]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogError(path, f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise CatalogError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(match.group(1)) if match else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message) or "invalid TOML"
        raise CatalogError(path, f"invalid TOML: {message}", line=line) from None
    return data, _TomlLines(text)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _gpu_from_table(
    table: Mapping[str, Any],
    base: GpuSpec | None,
    path: Path,
    lines: _TomlLines,
    index: int,
) -> GpuSpec:
    def fail(field: str, message: str) -> CatalogError:
        return CatalogError(path, message, line=lines.key_line("gpu", index, field), field=field)

    known = set(_GPU_FIELDS) | {f"tflops_{k}" for k in TFLOPS_KEYS}
    for key in table:
        if key not in known:
            allowed = ", ".join(sorted(known))
            raise fail(key, f"unknown field; allowed: {allowed}")
    for key, value in table.items():
        if key.startswith("tflops_"):
            if not _number(value) or value < 0:
                raise fail(key, f"must be a number of at least 0, got {value!r}")
            continue
        expected = _GPU_FIELDS[key]
        if expected in ((int, float),):
            if not _number(value) or value <= 0:
                raise fail(key, f"must be a positive number, got {value!r}")
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise fail(key, f"must be a whole number of at least 1, got {value!r}")
        elif expected is list:
            if not isinstance(value, list) or not all(isinstance(a, str) and a.strip() for a in value):
                raise fail(key, "must be a list of non-empty strings")
        elif not isinstance(value, expected):
            raise fail(key, f"must be {'true or false' if expected is bool else 'a string'}, got {value!r}")
        elif isinstance(value, str) and not value.strip():
            raise fail(key, "must not be empty")
    if "interconnect" in table and table["interconnect"] not in INTERCONNECTS:
        raise fail("interconnect", f"must be one of {', '.join(INTERCONNECTS)}, got {table['interconnect']!r}")
    if "default_mfu" in table and not 0 < table["default_mfu"] <= 1:
        raise fail("default_mfu", f"must be between 0 and 1, got {table['default_mfu']!r}")

    tflops_given = {k[len("tflops_") :]: float(v) for k, v in table.items() if k.startswith("tflops_")}
    if base is not None:
        tflops = {**dict(base.tflops), **tflops_given}
        merged: dict[str, Any] = {
            "name": base.name,
            "aliases": base.aliases,
            "memory_gib": base.memory_gib,
            "marketing_memory_gb": base.marketing_memory_gb,
            "bandwidth_gbs": base.bandwidth_gbs,
            "interconnect": base.interconnect,
            "interconnect_gbs": base.interconnect_gbs,
            "pcie_gen": base.pcie_gen,
            "bf16": base.bf16,
            "default_mfu": base.default_mfu,
            "tdp_w": base.tdp_w,
            "architecture": base.architecture,
            "compute_capability": base.compute_capability,
            "source": base.source,
        }
        for key, value in table.items():
            if key == "aliases":
                merged["aliases"] = tuple(dict.fromkeys((*base.aliases, *value)))
            elif key != "name" and not key.startswith("tflops_"):
                merged[key] = value
    else:
        missing = [k for k in _GPU_FIELDS if k not in table and k not in _OPTIONAL_GPU_FIELDS]
        if "tflops_fp32" not in table:
            missing.append("tflops_fp32")
        if missing:
            line = lines.table_line("gpu", index)
            raise CatalogError(path, f"a new GPU needs the field(s) {', '.join(missing)}", line=line, field=missing[0])
        tflops = tflops_given
        merged = dict(table)
        merged["aliases"] = tuple(table.get("aliases", ()))
        merged.setdefault("marketing_memory_gb", table["memory_gib"])
        merged.setdefault("tdp_w", 0.0)
        merged.setdefault("architecture", "")
        merged.setdefault("compute_capability", "")
        merged.setdefault("source", str(path))
    tflops = {k: v for k, v in tflops.items() if v > 0}
    if not merged["bf16"]:
        tflops.pop("bf16", None)
    if "fp32" not in tflops:
        raise fail("tflops_fp32", "every GPU needs a positive tflops_fp32")
    return GpuSpec(
        name=str(merged["name"]).strip(),
        aliases=tuple(str(a).strip() for a in merged["aliases"]),
        memory_gib=float(merged["memory_gib"]),
        marketing_memory_gb=float(merged["marketing_memory_gb"]),
        tflops=TflopsTable((k, tflops[k]) for k in TFLOPS_KEYS if k in tflops),
        bandwidth_gbs=float(merged["bandwidth_gbs"]),
        interconnect=str(merged["interconnect"]),
        interconnect_gbs=float(merged["interconnect_gbs"]),
        pcie_gen=int(merged["pcie_gen"]),
        bf16=bool(merged["bf16"]),
        default_mfu=float(merged["default_mfu"]),
        tdp_w=float(merged["tdp_w"]),
        architecture=str(merged["architecture"]),
        compute_capability=str(merged["compute_capability"]),
        source=str(merged["source"]),
    )


def parse_gpus(path: Path, base: Iterable[GpuSpec] = ()) -> tuple[GpuSpec, ...]:
    """Read a ``gpus.toml``; entries naming a GPU in ``base`` override it, others are added."""
    data, lines = _read_toml(path)
    tables = data.get("gpu", [])
    extra = [k for k in data if k != "gpu"]
    if extra:
        raise CatalogError(path, "only [[gpu]] tables are allowed at the top level", field=extra[0])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise CatalogError(path, "write each GPU as a [[gpu]] table", field="gpu")
    result = list(base)
    for index, table in enumerate(tables):
        name = table.get("name")
        if not isinstance(name, str) or not name.strip():
            raise CatalogError(
                path, "every [[gpu]] table needs a name", line=lines.key_line("gpu", index, "name"), field="name"
            )
        probe = Catalog(tuple(result), ())
        target = probe.find_gpu(name)
        if target is None:
            for alias in table.get("aliases", []) if isinstance(table.get("aliases"), list) else []:
                if isinstance(alias, str) and (target := probe.find_gpu(alias)) is not None:
                    break
        spec = _gpu_from_table(table, target, path, lines, index)
        if target is not None:
            result[result.index(target)] = spec
        else:
            result.append(spec)
    return tuple(result)


def _optional_float(value: str | None, path: Path, line: int, field: str, *, allow_zero: bool = False) -> float | None:
    if value is None or not value.strip():
        return None
    try:
        number = float(value)
    except ValueError:
        raise CatalogError(path, f"not a number: {value!r}", line=line, field=field) from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "more than 0"
        raise CatalogError(path, f"must be {bound}, got {value!r}", line=line, field=field)
    return number


def _iso_date(value: str, path: Path, line: int) -> str:
    text = value.strip()
    try:
        _dt.date.fromisoformat(text)
    except ValueError:
        raise CatalogError(
            path, f"must be an ISO date like 2025-06-15, got {value!r}", line=line, field="as_of"
        ) from None
    return text


def csv_rows(reader: Any, path: Path | str) -> Iterator[tuple[int, Any]]:
    """``(line number, row)`` of a csv reader; a CSV syntax error becomes a :class:`CatalogError`."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CatalogError(path, f"bad CSV: {exc}", line=reader.line_num) from None
        yield reader.line_num, row


def parse_prices(path: Path, gpus: Catalog | None = None, *, text: str | None = None) -> tuple[PriceOffer, ...]:
    """Read a ``prices.csv`` by its header. With ``gpus``, GPU names resolve to canonical names and
    unknown GPUs are an error."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CatalogError(path, f"not UTF-8 text ({exc.reason})") from None
        except OSError as exc:
            raise CatalogError(path, f"cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise CatalogError(path, f"bad CSV: {exc}", line=1) from None
    if header is None:
        return ()
    names = [h.strip().lower() for h in header]
    missing = [c for c in _REQUIRED_PRICE_COLUMNS if c not in names]
    if missing:
        raise CatalogError(path, f"the header lacks the column(s) {', '.join(missing)}", line=1, field=missing[0])
    unknown = [n for n in names if n and n not in PRICE_COLUMNS]
    if unknown:
        raise CatalogError(path, f"unknown column; allowed: {', '.join(PRICE_COLUMNS)}", line=1, field=unknown[0])
    offers: list[PriceOffer] = []
    for line, cells in csv_rows(reader, path):
        if not any(c.strip() for c in cells):
            continue
        if cells[0].lstrip().startswith("#"):
            continue
        if len(cells) > len(names):
            raise CatalogError(path, f"{len(cells)} cells but the header has {len(names)} columns", line=line)
        row = {n: (cells[i].strip() if i < len(cells) else "") for i, n in enumerate(names)}
        for column in ("provider", "region", "gpu", "instance_type"):
            if not row[column]:
                raise CatalogError(path, "must not be empty", line=line, field=column)
        gpu_name = row["gpu"]
        if gpus is not None:
            spec = gpus.find_gpu(gpu_name)
            if spec is None:
                known = ", ".join(g.name for g in gpus.gpus)
                raise CatalogError(path, f"unknown GPU {gpu_name!r}; known: {known}", line=line, field="gpu")
            gpu_name = spec.name
        try:
            count = int(row["gpu_count"])
        except ValueError:
            count = 0
        if count < 1:
            raise CatalogError(
                path, f"must be a whole number of at least 1, got {row['gpu_count']!r}", line=line, field="gpu_count"
            )
        on_demand = _optional_float(row["on_demand_usd_per_gpu_hour"], path, line, "on_demand_usd_per_gpu_hour")
        if on_demand is None:
            raise CatalogError(path, "must not be empty", line=line, field="on_demand_usd_per_gpu_hour")
        provider = row["provider"].lower()
        offers.append(
            PriceOffer(
                provider=provider,
                region=row["region"],
                gpu=gpu_name,
                gpu_count=count,
                instance_type=row["instance_type"],
                on_demand_usd=on_demand,
                spot_usd=_optional_float(row.get("spot_usd_per_gpu_hour"), path, line, "spot_usd_per_gpu_hour"),
                interruptions_per_hour=_optional_float(
                    row.get("interruptions_per_hour"), path, line, "interruptions_per_hour", allow_zero=True
                ),
                notice_s=_optional_float(
                    row.get("preemption_notice_s"), path, line, "preemption_notice_s", allow_zero=True
                ),
                as_of=_iso_date(row["as_of"], path, line),
                source=row.get("source", "") or str(path.name),
                own=provider == OWN_PROVIDER,
                interruptions_source=row.get("interruptions_source", ""),
            )
        )
    return tuple(offers)


def parse_machines(path: Path, gpus: Catalog) -> tuple[PriceOffer, ...]:
    """Read ``machines.toml``: ``[[machine]]`` tables with name, gpu, gpu_count and either usd_per_gpu_hour or
    the inputs of an amortised price (:data:`OWNERSHIP_FIELDS`: purchase_usd, lifetime_years,
    electricity_usd_per_kwh, utilisation, optional power_w (default: the GPUs' board power plus the host),
    idle_power_w, upkeep_usd_per_year, residual_usd)."""
    data, lines = _read_toml(path)
    extra = [k for k in data if k != "machine"]
    if extra:
        raise CatalogError(path, "only [[machine]] tables are allowed at the top level", field=extra[0])
    tables = data.get("machine", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise CatalogError(path, "write each machine as a [[machine]] table", field="machine")
    as_of = _dt.date.fromtimestamp(path.stat().st_mtime).isoformat()
    offers = []
    allowed = ("name", "gpu", "gpu_count", "usd_per_gpu_hour", "region", "notes", *OWNERSHIP_FIELDS)
    for index, table in enumerate(tables):

        def fail(field: str, message: str, index: int = index) -> CatalogError:
            return CatalogError(path, message, line=lines.key_line("machine", index, field), field=field)

        for key in table:
            if key not in allowed:
                raise fail(key, f"unknown field; allowed: {', '.join(allowed)}")
        for key in ("name", "gpu", "gpu_count"):
            if key not in table:
                raise CatalogError(path, "missing", line=lines.table_line("machine", index), field=key)
        name, gpu, count = table["name"], table["gpu"], table["gpu_count"]
        if not isinstance(name, str) or not name.strip():
            raise fail("name", "must be a non-empty string")
        if not isinstance(gpu, str):
            raise fail("gpu", "must be a GPU name as a string")
        spec = gpus.find_gpu(gpu)
        if spec is None:
            raise fail("gpu", f"unknown GPU {gpu!r}; known: {', '.join(g.name for g in gpus.gpus)}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise fail("gpu_count", f"must be a whole number of at least 1, got {count!r}")
        source = str(path)
        if "usd_per_gpu_hour" in table:
            price = table["usd_per_gpu_hour"]
            if not _number(price) or price < 0:
                raise fail("usd_per_gpu_hour", f"must be a number of at least 0, got {price!r}")
        elif "purchase_usd" in table:
            amortised = _amortised(table, spec, count, fail)
            price, source = amortised.usd_per_gpu_hour, f"{amortised.describe()} ({path})"
        else:
            raise CatalogError(
                path,
                "missing: give usd_per_gpu_hour, or purchase_usd, lifetime_years, electricity_usd_per_kwh and "
                "utilisation for an amortised price",
                line=lines.table_line("machine", index),
                field="usd_per_gpu_hour",
            )
        region = table.get("region", "local")
        if not isinstance(region, str):
            raise fail("region", "must be a string")
        offers.append(
            PriceOffer(
                provider=OWN_PROVIDER,
                region=region,
                gpu=spec.name,
                gpu_count=count,
                instance_type=name.strip(),
                on_demand_usd=float(price),
                spot_usd=None,
                interruptions_per_hour=None,
                notice_s=None,
                as_of=as_of,
                source=source,
                own=True,
            )
        )
    return tuple(offers)


# Fields of a [[machine]] table that give its amortised price (gpuplanner.plan.ownership) instead of a fixed one.
OWNERSHIP_FIELDS = (
    "purchase_usd",
    "lifetime_years",
    "power_w",
    "electricity_usd_per_kwh",
    "utilisation",
    "idle_power_w",
    "upkeep_usd_per_year",
    "residual_usd",
)


def _amortised(table: Mapping[str, Any], spec: GpuSpec, count: int, fail: Any) -> Any:
    from gpuplanner.plan.ownership import OwnHardware, amortised_price, estimated_power_w

    for key in ("lifetime_years", "electricity_usd_per_kwh", "utilisation"):
        if key not in table:
            raise fail("purchase_usd", f"an amortised price also needs {key}")
    for key in OWNERSHIP_FIELDS:
        if key in table and not _number(table[key]):
            raise fail(key, f"must be a number, got {table[key]!r}")
    power = table.get("power_w")
    if power is None:
        power = estimated_power_w(count, spec.tdp_w)
    try:
        hardware = OwnHardware(
            purchase_usd=float(table["purchase_usd"]),
            lifetime_years=float(table["lifetime_years"]),
            power_w=float(power),
            electricity_usd_per_kwh=float(table["electricity_usd_per_kwh"]),
            utilisation=float(table["utilisation"]),
            gpus=count,
            idle_power_w=float(table.get("idle_power_w", 0.0)),
            upkeep_usd_per_year=float(table.get("upkeep_usd_per_year", 0.0)),
            residual_usd=float(table.get("residual_usd", 0.0)),
        )
    except PlanInputError as exc:
        raise fail(exc.field.replace("-", "_"), exc.message) from None
    return amortised_price(hardware)


# --------------------------------------------------------------------------------------------------
# Writing


def offer_row(offer: PriceOffer) -> dict[str, str]:
    """One offer as a ``prices.csv`` row."""

    def fmt(value: float | None) -> str:
        if value is None:
            return ""
        return f"{value:.6g}" if not float(value).is_integer() else str(int(value))

    return {
        "provider": offer.provider,
        "region": offer.region,
        "gpu": offer.gpu,
        "gpu_count": str(offer.gpu_count),
        "instance_type": offer.instance_type,
        "on_demand_usd_per_gpu_hour": fmt(offer.on_demand_usd),
        "spot_usd_per_gpu_hour": fmt(offer.spot_usd),
        "interruptions_per_hour": fmt(offer.interruptions_per_hour),
        "preemption_notice_s": fmt(offer.notice_s),
        "as_of": offer.as_of,
        "source": offer.source,
        "interruptions_source": offer.interruptions_source,
    }


def offers_to_csv(offers: Iterable[PriceOffer]) -> str:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=PRICE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for offer in offers:
        writer.writerow(offer_row(offer))
    return out.getvalue()
