"""Which cells of the History pane's Compare table to highlight (Qt-free): a metric whose runs differ is
marked, and where lower or higher is better the best and the worst run are told apart from the rest, so
the eye goes to what changed between runs instead of reading two columns line by line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# Where the better run is the one with the lower value (cost, time, waste) or the higher (speed, use)
LOWER_BETTER = frozenset(
    {
        "price_usd_per_gpu_hour",
        "hours",
        "wall_hours",
        "gpu_hours",
        "cost_usd",
        "cost_per_effective_gpu_hour_usd",
        "cost_per_sample_usd",
        "cost_per_million_tokens_usd",
        "idle_gpu_hours",
        "data_wait_pct",
        "interruptions",
        "final_loss",
    }
)
HIGHER_BETTER = frozenset({"avg_util_pct", "avg_sm_active_pct", "tokens_per_s"})
MARK_WORDS = {
    "best": "the best of the runs compared",
    "worst": "the worst of the runs compared",
    "differs": "differs between the runs compared",
}


# the Compare tab's words for rows whose History labels read badly beside a duration ("Hours: 2 min")
SHOWN_LABELS = {"Hours": "Time held", "Wall hours": "Wall time"}


def same_precision(values: Sequence[Any], texts: Sequence[str]) -> list[str]:
    """A compared metric's cells with one number of decimals across the runs (0.0200 beside 0.0298, not
    0.02): enough for three significant figures of the smallest, two at least for values under 1,000.
    Cells that are not plain numbers as shown (durations, "no price", whole numbers) are left as they are."""
    numbers = [_number(v) for v in values]
    if any(n is None or isinstance(v, int) for n, v in zip(numbers, values)):
        return list(texts)
    plain = [t.replace(",", "").replace(".", "", 1).lstrip("-").isdigit() for t in texts]
    if not all(plain):
        return list(texts)
    small = [abs(n) for n in numbers if n is not None and n != 0 and abs(n) < 1000]
    if not small:
        return list(texts)
    decimals = min(6, max(2, max(2 - math.floor(math.log10(v)) for v in small)))
    return [f"{n:,.{decimals}f}" if abs(n) < 1000 else f"{n:,.0f}" for n in numbers if n is not None]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def compare_marks(
    attrs: Sequence[str], rows: Sequence[Sequence[Any]], texts: Sequence[Sequence[str]]
) -> list[list[str]]:
    """Per metric ``attrs[i]`` (values ``rows[i]``, one per run, shown as ``texts[i]``), one mark per run:
    "" (the runs agree, as shown), "differs", or "best"/"worst" on a metric with a better direction whose
    values are all numbers (ties share the mark)."""
    out: list[list[str]] = []
    for attr, values, shown in zip(attrs, rows, texts):
        marks = [""] * len(values)
        if len(set(shown)) > 1:
            numbers = [_number(v) for v in values]
            direction = -1 if attr in LOWER_BETTER else 1 if attr in HIGHER_BETTER else 0
            if direction and all(n is not None for n in numbers):
                good = max(n * direction for n in numbers if n is not None)
                bad = min(n * direction for n in numbers if n is not None)
                for i, n in enumerate(numbers):
                    assert n is not None
                    marks[i] = "best" if n * direction == good else "worst" if n * direction == bad else "differs"
            else:
                marks = ["differs"] * len(values)
        out.append(marks)
    return out


# cell backgrounds (light, dark palettes): green for the best, red for the worst, amber for a difference
MARK_TINTS = {
    False: {"best": "#d4efd4", "worst": "#f6d5d5", "differs": "#fbefc4"},
    True: {"best": "#1f4a2a", "worst": "#5a2326", "differs": "#4d4320"},
}
