"""Numbers for people: durations as "1 h 12 min", sizes in GiB, money to cents (3 significant figures when tiny),
prices per hour, and "no price" for a cost that is unknown.

The one implementation: the window (through :mod:`gpuplanner.ui.human`), the engine's sentences
(``compare``'s recommendation) and the CLI's text all format through these, so one value reads the same
everywhere and never as "1.115e-05", "$0.00 in 0.0 h" or a raw byte count.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

GIB = 1024**3
MIB = 1024**2
DASH = "–"
NO_PRICE = "no price"  # a cost or price that is unknown because no price was given: never "$0"


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures in fixed-point notation (no exponent)."""
    if value == 0:
        return "0"
    places = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    # round the shortest decimal form half up, as a person would ("1.115e-05" -> 0.0000112)
    exact = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{exact:,.{places}f}"


def round_for_people(value: float | None, places: int = 2) -> float | None:
    """``value`` rounded to ``places`` decimals, or to 3 significant figures where that would leave nothing
    of it (a $0.0000112 run is not a $0.00 one); None for a missing or non-finite value."""
    if not _finite(value):
        return None
    assert value is not None
    if value == 0 or abs(value) >= 10.0**-places:
        return round(value, places)
    return float(significant(value, 3))


def human_number(value: float | None) -> str:
    """A plain number: thousands separated, two decimals at most, tiny values to 3 significant figures."""
    if not _finite(value):
        return DASH
    assert value is not None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1 or value == 0:
        text = f"{value:,.2f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    text = significant(value, 3)
    return text.rstrip("0").rstrip(".") if "." in text else text


def human_money(usd: float | None, places: int | None = 2) -> str:
    """Dollars: to the cent (``places`` decimals: 0 for whole dollars, 3 or 4 for prices and small
    spends), or to 3 significant figures below 10 cents ("$0.0000112"); ``places=None``: as given, with
    no trailing zeros ("$2.5", a price a person typed)."""
    if not _finite(usd):
        return DASH
    assert usd is not None
    sign = "-" if usd < 0 else ""
    amount = abs(usd)
    if places is None:
        text = f"{amount:,.6f}".rstrip("0").rstrip(".")
        return f"{sign}${text}" if text != "0" or amount == 0 else f"{sign}${significant(amount, 3)}"
    if amount >= 0.1 or amount == 0:
        return f"{sign}${amount:,.{places}f}"
    return f"{sign}${significant(amount, 3)}"


def money_tick(usd: float, places: int) -> str:
    """A dollar axis tick: always ``places`` decimals, so the ticks of one axis line up."""
    sign = "-" if usd < 0 else ""
    return f"{sign}${abs(usd):,.{places}f}"


def human_cost(usd: float | None, places: int | None = 2) -> str:
    """A cost that is unknown without a price: :data:`NO_PRICE` for None, never $0 (see
    :mod:`gpuplanner.history.run_cost`)."""
    return NO_PRICE if usd is None else human_money(usd, places)


def usd_cell(usd: float | None) -> str:
    """Dollars to the cent without the sign, for a table column headed in dollars (``cost_usd``);
    :data:`NO_PRICE` for None."""
    return NO_PRICE if usd is None else f"{usd:,.2f}"


def human_rate(usd: float | None, unit: str = "GPU-h", places: int | None = 2) -> str:
    """A price per unit of time: "$2.50/GPU-h", "$20.00/instance-h"; :data:`NO_PRICE` for None."""
    return NO_PRICE if usd is None else f"{human_money(usd, places)}/{unit}"


def human_duration(seconds: float | None) -> str:
    """A duration: "45 s", "12 min", "1 h 12 min", "3 d 4 h"."""
    if not _finite(seconds):
        return DASH
    assert seconds is not None
    sign = "-" if seconds < 0 else ""
    total = abs(seconds)
    if 0 < total < 0.5:
        return f"{sign}under 1 s"  # never a bare "0 s" for something that takes time
    if total < 60:
        return f"{sign}{total:.0f} s"
    minutes = round(total / 60)
    if minutes < 60:
        return f"{sign}{minutes} min"
    if total < 86400:
        hours, rest = divmod(minutes, 60)
        return f"{sign}{hours} h" + (f" {rest} min" if rest else "")
    hours_total = round(total / 3600)
    days, hours = divmod(hours_total, 24)
    return f"{sign}{days:,} d" + (f" {hours} h" if hours else "")


def human_clock(seconds: float) -> str:
    """A duration to the second, for a figure that counts up while shown (a queue wait): "42 s",
    "2m 05s", "1h 02m"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def human_hours(hours: float | None) -> str:
    """A duration given in hours."""
    return DASH if not _finite(hours) else human_duration(float(hours) * 3600.0)  # type: ignore[arg-type]


def human_bytes(count: float | None) -> str:
    """A size in GiB (MiB below one GiB)."""
    if not _finite(count):
        return DASH
    assert count is not None
    if abs(count) >= GIB:
        return f"{count / GIB:,.1f} GiB"
    return f"{count / MIB:,.0f} MiB"


def human_data_size(count: int) -> str:
    """A size of text or data down to the byte (a log's output): bytes, KiB, then :func:`human_bytes`."""
    if count < 1024:
        return f"{count} byte{'' if count == 1 else 's'}"
    if count < MIB:
        return f"{count / 1024:,.0f} KiB"
    return human_bytes(count)


def human_gib(gib: float | None) -> str:
    """A size already in GiB."""
    return DASH if not _finite(gib) else human_bytes(float(gib) * GIB)  # type: ignore[arg-type]


def human_gpus(count: int) -> str:
    """A number of GPUs in words: "1 GPU", "8 GPUs"."""
    return f"{count:,} GPU" + ("" if count == 1 else "s")
