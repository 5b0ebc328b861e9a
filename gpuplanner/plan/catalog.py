"""The GPU and price catalog: what each card offers and what an hour of it costs.

The shipped data lives in ``resources/catalog/gpus.toml`` and ``resources/catalog/prices.csv``;
the basis of every figure is explained at the top of those files. A user adds to it or overrides it
with files in their config directory (:func:`gpuplanner.paths.config_dir`):

- ``prices.csv``: the same columns as the shipped file. A row with the same provider, region, GPU and
  instance type as a shipped row replaces it; any other row is added.
- ``gpus.toml``: ``[[gpu]]`` tables. A table whose ``name`` (or one of whose aliases) names a known GPU
  overrides only the fields it gives; a new name needs every field.
- ``machines.toml``: the user's own machines, ``[[machine]]`` tables with ``name``, ``gpu``,
  ``gpu_count`` and ``usd_per_gpu_hour``; each becomes an offer from provider ``own``.

Malformed user files raise :class:`CatalogError`, whose message names the file, the line and the field.
This module layers those files into one :class:`Catalog` (shipped < fetched < user's prices < own machines);
the types are in :mod:`gpuplanner.plan.catalog_types` and the file formats in :mod:`gpuplanner.plan.catalog_files`,
both re-exported here for the many callers. Pure: standard library only, no Qt, no network, no database.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from gpuplanner.plan.catalog_files import (
    OWNERSHIP_FIELDS,
    csv_rows,
    offer_row,
    offers_to_csv,
    parse_gpus,
    parse_machines,
    parse_prices,
)
from gpuplanner.plan.catalog_types import (
    ASSUMED,
    INTERCONNECTS,
    OWN_PROVIDER,
    PRICE_COLUMNS,
    TFLOPS_KEYS,
    Catalog,
    CatalogError,
    GpuSpec,
    PriceOffer,
    TflopsTable,
    normalize_name,
    precision_for,
)

# Re-exported: most callers import the catalog's types and file helpers from here.
__all__ = [
    "ASSUMED",
    "Catalog",
    "CatalogError",
    "GpuSpec",
    "INTERCONNECTS",
    "OWNERSHIP_FIELDS",
    "OWN_PROVIDER",
    "PRICE_COLUMNS",
    "PriceOffer",
    "TFLOPS_KEYS",
    "TflopsTable",
    "builtin_catalog",
    "builtin_gpus_path",
    "builtin_prices_path",
    "cached_prices_path",
    "catalog_gpu",
    "csv_rows",
    "load_catalog",
    "merge_newer",
    "merge_offers",
    "normalize_name",
    "offer_row",
    "offers_to_csv",
    "parse_gpus",
    "parse_machines",
    "parse_prices",
    "precision_for",
    "user_files",
]


def merge_offers(base: Iterable[PriceOffer], extra: Iterable[PriceOffer]) -> tuple[PriceOffer, ...]:
    """``extra`` replaces offers of ``base`` with the same :attr:`PriceOffer.key` and adds the rest."""
    merged: dict[tuple[str, str, str, str], PriceOffer] = {}
    for offer in base:
        merged[offer.key] = offer
    for offer in extra:
        merged[offer.key] = offer
    return tuple(merged.values())


def merge_newer(base: Iterable[PriceOffer], extra: Iterable[PriceOffer]) -> tuple[PriceOffer, ...]:
    """Like :func:`merge_offers`, but an offer of ``extra`` replaces one of ``base`` only when it is at least as
    recent (``as_of``): a fetched catalog older than the shipped snapshot does not undo newer shipped prices."""
    merged: dict[tuple[str, str, str, str], PriceOffer] = {}
    for offer in base:
        merged[offer.key] = offer
    for offer in extra:
        current = merged.get(offer.key)
        if current is None or offer.as_of >= current.as_of:
            merged[offer.key] = offer
    return tuple(merged.values())


# --------------------------------------------------------------------------------------------------
# Loading


def builtin_gpus_path() -> Path:
    from gpuplanner.resources import resource_path

    return resource_path("catalog", "gpus.toml")


def builtin_prices_path() -> Path:
    from gpuplanner.resources import resource_path

    return resource_path("catalog", "prices.csv")


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The shipped catalog, parsed once per process."""
    gpus = Catalog(parse_gpus(builtin_gpus_path()), ())
    return Catalog(gpus.gpus, parse_prices(builtin_prices_path(), gpus))


def user_files(config_dir: Path | None = None) -> dict[str, Path]:
    """Where the user's override files live (they need not exist)."""
    if config_dir is None:
        from gpuplanner.paths import config_dir as _config_dir

        config_dir = _config_dir()
    return {
        "prices": config_dir / "prices.csv",
        "gpus": config_dir / "gpus.toml",
        "machines": config_dir / "machines.toml",
    }


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def cached_prices_path(cache_dir: Path | None = None) -> Path:
    """Where ``gpuplanner catalog update`` keeps the fetched offers (``prices.csv`` format)."""
    if cache_dir is None:
        from gpuplanner.paths import cache_dir as _cache_dir

        cache_dir = _cache_dir()
    return cache_dir / "catalog" / "prices.csv"


@functools.lru_cache(maxsize=8)
def _load_cached(files: tuple[tuple[str, str], ...], stamps: tuple[tuple[int, int] | None, ...]) -> Catalog:
    paths = {kind: Path(p) for kind, p in files}
    builtin = builtin_catalog()
    gpus = builtin.gpus
    if stamps[1] is not None:
        gpus = parse_gpus(paths["gpus"], gpus)
    catalog = Catalog(gpus, ())
    # An override keeps its GPU's canonical name, so the shipped offers stay valid as they are.
    # Layers, later wins: shipped snapshot, fetched catalog (cache), the user's prices, own machines.
    offers = builtin.offers
    if stamps[3] is not None:
        try:
            offers = merge_newer(offers, parse_prices(paths["cache"], catalog))
        except CatalogError:
            pass  # a cache is only a cache: planning goes on with the rest; `catalog update` rewrites it
    if stamps[0] is not None:
        offers = merge_offers(offers, parse_prices(paths["prices"], catalog))
    if stamps[2] is not None:
        offers = merge_offers(offers, parse_machines(paths["machines"], catalog))
    return Catalog(gpus, offers)


def load_catalog(config_dir: Path | None = None, cache_dir: Path | None = None) -> Catalog:
    """The shipped catalog, the prices fetched by ``catalog update`` (from ``cache_dir``, default the app's
    cache dir) and the user's overrides from ``config_dir`` (default: the app's config dir); the user's
    files always win.

    Parsing is cached: the shipped files once per process, the others until they change."""
    files = {**user_files(config_dir), "cache": cached_prices_path(cache_dir)}
    order = ("prices", "gpus", "machines", "cache")
    return _load_cached(
        tuple((k, str(files[k])) for k in order),
        tuple(_stamp(files[k]) for k in order),
    )


def catalog_gpu(name: str) -> GpuSpec | None:
    """The catalog GPU a device or catalog name stands for (with the user's overrides); None when the
    catalog knows none or cannot be read, i.e. when the planner cannot use a measurement under ``name``."""
    try:
        return load_catalog().find_gpu(name)
    except CatalogError:
        return None
