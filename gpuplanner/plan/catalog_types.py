"""GPU specs, price offers and the :class:`Catalog` that looks them up by name, with the error a bad
catalog file raises. Reading the files is :mod:`gpuplanner.plan.catalog_files`; layering the shipped, fetched and
user's files is :mod:`gpuplanner.plan.catalog`. Pure: standard library only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuplanner.plan.setup import PlanInputError

TFLOPS_KEYS = ("fp32", "tf32", "fp16", "bf16", "fp8")
INTERCONNECTS = ("nvlink", "pcie", "infinity-fabric")
OWN_PROVIDER = "own"

PRICE_COLUMNS = (
    "provider",
    "region",
    "gpu",
    "gpu_count",
    "instance_type",
    "on_demand_usd_per_gpu_hour",
    "spot_usd_per_gpu_hour",
    "interruptions_per_hour",
    "preemption_notice_s",
    "as_of",
    "source",
    "interruptions_source",
)
# What a spot interruption rate rests on when its row names no source.
ASSUMED = "assumed"

# The planner's precision names (gpuplanner.plan.setup.PRECISIONS) and the raw table keys.
_PRECISION_KEYS = {
    "fp32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16",
    "fp16-mixed": "fp16",
    "bf16": "bf16",
    "bf16-mixed": "bf16",
    "fp8": "fp8",
}


class CatalogError(ValueError):
    """A catalog file that cannot be read. The message names the file, and the line and field where known."""

    def __init__(self, path: Path | str, message: str, *, line: int | None = None, field: str | None = None) -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path = Path(path)
        self.line = line
        self.field = field
        self.message = message


def normalize_name(name: str) -> str:
    """Lookup key of a GPU name: lower case, without spaces, dashes and underscores."""
    return re.sub(r"[\s\-_]+", "", name).lower()


class TflopsTable(Mapping[str, float]):
    """Read-only, hashable mapping of precision key to peak dense TFLOP/s; missing key = unsupported."""

    __slots__ = ("_data",)

    def __init__(self, values: Mapping[str, float] | Iterable[tuple[str, float]] = ()) -> None:
        self._data = dict(values)

    def __getitem__(self, key: str) -> float:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"TflopsTable({self._data!r})"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Memory in GiB as CUDA reports it; TFLOP/s are dense peaks; bandwidths in GB/s."""

    name: str
    aliases: tuple[str, ...]
    memory_gib: float
    marketing_memory_gb: float
    tflops: Mapping[str, float]
    bandwidth_gbs: float
    interconnect: str
    interconnect_gbs: float
    pcie_gen: int
    bf16: bool
    default_mfu: float
    tdp_w: float
    architecture: str
    compute_capability: str
    source: str

    def peak_tflops(self, precision: str) -> float:
        """Peak dense TFLOP/s for a planner precision (``fp32``, ``fp16-mixed``, ``bf16-mixed``, ``bf16``)
        or a raw key (``tf32``, ``fp16``, ``fp8``). ``fp32`` is the plain FP32 rate; pass ``tf32`` for
        the TF32 tensor-core rate. Raises :class:`PlanInputError` where the card lacks the unit."""
        key = _PRECISION_KEYS.get(precision)
        if key is None:
            allowed = ", ".join(_PRECISION_KEYS)
            raise PlanInputError("precision", f"{precision!r} is not one of {allowed}")
        if key == "bf16" and not self.bf16:
            raise PlanInputError("precision", f"{self.name} has no bf16 support; use fp16-mixed or fp32 on this GPU")
        value = self.tflops.get(key)
        if not value:
            raise PlanInputError("precision", f"{self.name} has no {key} tensor-core rate in the catalog")
        return float(value)

    def lookup_keys(self) -> tuple[str, ...]:
        """Every lookup key of this GPU (normalized name and aliases)."""
        return tuple(dict.fromkeys(normalize_name(n) for n in (self.name, *self.aliases)))


@dataclass(frozen=True)
class PriceOffer:
    """One way to rent (or own) a GPU: one instance type with ``gpu_count`` GPUs in a region.

    Prices are per GPU-hour in US dollars (``*_per_instance`` give the instance's hourly price); a rented
    instance is billed whole. ``as_of`` is the date the price was published (ISO), ``source`` where it comes
    from, ``interruptions_source`` what the spot interruption rate rests on (empty: see
    :attr:`interruptions_basis`)."""

    provider: str
    region: str
    gpu: str
    gpu_count: int
    instance_type: str
    on_demand_usd: float
    spot_usd: float | None
    interruptions_per_hour: float | None
    notice_s: float | None
    as_of: str
    source: str
    own: bool = False
    interruptions_source: str = ""

    @property
    def on_demand_usd_per_instance(self) -> float:
        return self.on_demand_usd * self.gpu_count

    @property
    def spot_usd_per_instance(self) -> float | None:
        return None if self.spot_usd is None else self.spot_usd * self.gpu_count

    @property
    def region_label(self) -> str:
        """The region, or ``any`` where the provider prices all regions alike."""
        return self.region if self.region.strip() else "any"

    @property
    def interruptions_basis(self) -> str:
        """What the spot interruption rate rests on: the row's ``interruptions_source``, else the offer's
        source where a rate is given, else ``assumed`` (the planner's default rate applies)."""
        if self.interruptions_per_hour is None:
            return ASSUMED
        return self.interruptions_source or self.source

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity for overrides: provider, region, GPU and instance type (case-insensitive)."""
        return (
            self.provider.lower(),
            self.region.lower(),
            normalize_name(self.gpu),
            self.instance_type.strip().lower(),
        )

    def price(self, spot: bool) -> float | None:
        return self.spot_usd if spot else self.on_demand_usd


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[GpuSpec, ...]
    offers: tuple[PriceOffer, ...]

    @functools.cached_property
    def _index(self) -> dict[str, GpuSpec]:
        index: dict[str, GpuSpec] = {}
        # Names win over aliases; among aliases, the first GPU that claims one keeps it.
        for spec in self.gpus:
            index[normalize_name(spec.name)] = spec
        for spec in self.gpus:
            for key in spec.lookup_keys():
                index.setdefault(key, spec)
        return index

    def find_gpu(self, name: str) -> GpuSpec | None:
        """The GPU called ``name`` (case, spaces, dashes and underscores ignored; aliases and the names
        NVML reports, with or without an ``NVIDIA``/``Tesla``/``GeForce`` prefix), or None."""
        key = normalize_name(name)
        index = self._index
        if key in index:
            return index[key]
        for prefix in ("nvidia", "tesla", "geforce", "nvidiageforce", "nvidiatesla"):
            if key.startswith(prefix) and key[len(prefix) :] in index:
                return index[key[len(prefix) :]]
        return None

    def gpu(self, name: str) -> GpuSpec:
        spec = self.find_gpu(name)
        if spec is None:
            known = ", ".join(g.name for g in self.gpus)
            raise PlanInputError("gpu", f"unknown GPU {name!r}; known: {known}")
        return spec

    @functools.cached_property
    def _offers_by_gpu(self) -> dict[str, tuple[PriceOffer, ...]]:
        grouped: dict[str, list[PriceOffer]] = {}
        for offer in self.offers:
            grouped.setdefault(offer.gpu, []).append(offer)
        return {name: tuple(offers) for name, offers in grouped.items()}

    def offers_for(self, gpu: str) -> tuple[PriceOffer, ...]:
        """Every offer of a GPU (raises :class:`PlanInputError` for an unknown GPU)."""
        spec = self.gpu(gpu)
        return self._offers_by_gpu.get(spec.name, ())

    def best_offer(self, gpu: str, spot: bool, gpus: int | None = None) -> PriceOffer | None:
        """The cheapest offer per GPU-hour: on-demand, or spot among the offers that have spot.

        With ``gpus``, only instances that hold at least that many GPUs count. Ties go to the
        provider, region and instance type in alphabetical order, so the answer is stable."""
        candidates = [
            o for o in self.offers_for(gpu) if o.price(spot) is not None and (gpus is None or o.gpu_count >= gpus)
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda o: (o.price(spot), o.provider, o.region, o.instance_type))

    def providers(self) -> tuple[str, ...]:
        return tuple(sorted({o.provider for o in self.offers}))

    def price_dates(self) -> tuple[str, str] | None:
        """The oldest and the newest ``as_of`` date among the rented offers (own machines left out), or
        None when there are none."""
        dates = sorted(o.as_of for o in self.offers if not o.own)
        return (dates[0], dates[-1]) if dates else None


def precision_for(gpu: GpuSpec, precision: str) -> tuple[str, str | None]:
    """The precision a plan on ``gpu`` uses for the requested one, and a note when it differs: a GPU without
    bf16 (V100, T4) trains in fp16 mixed precision (with loss scaling) instead of bf16."""
    if precision in ("bf16-mixed", "bf16") and not gpu.bf16:
        return "fp16-mixed", f"{gpu.name} has no bf16: planned with fp16-mixed (loss scaling) instead of {precision}"
    return precision, None
