"""Numbers for people, for the window: the one implementation is :mod:`gpuplanner.export.human` (below
the engine and the CLI, which format through it too)."""

from __future__ import annotations

from gpuplanner.export.human import (
    DASH,
    GIB,
    MIB,
    NO_PRICE,
    human_bytes,
    human_cost,
    human_data_size,
    human_duration,
    human_gib,
    human_hours,
    human_money,
    human_number,
    human_rate,
    money_tick,
    round_for_people,
    significant,
    usd_cell,
)

__all__ = [
    "DASH",
    "GIB",
    "MIB",
    "NO_PRICE",
    "human_bytes",
    "human_data_size",
    "human_cost",
    "human_duration",
    "human_gib",
    "human_hours",
    "human_money",
    "human_number",
    "human_rate",
    "money_tick",
    "round_for_people",
    "significant",
    "usd_cell",
]
