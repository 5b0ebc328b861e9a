"""Band widths that hold their share of a left-out source's rows (issue 24, item 3).

``planner_accuracy.band_widths`` sets each regime's P10-P90 half-width from the leave-one-source-out
errors of the sources it is given. With a few sources per regime (three pre-training sources), the quantile
of the others' errors is narrower than the errors of the source left out: the band held 72% of a left-out
source's rows on average against the 80% it is set for. This module widens every regime's band by one
factor, computed from the same left-out errors: the smallest factor with which, each source in turn judged
against the widths set from the others, the band holds ``share`` of a source's rows on average. The factor
used to judge a source is computed without it (``planner_accuracy.loso``), so the coverage the benchmark
prints is itself left out. Nothing is typed in: the factor moves with the errors whenever the step model is
refitted. One factor for all regimes, because a regime with three sources cannot fit one of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

# the factor is searched in these steps, up to this much
STEP = 0.05
MOST = 5.0

Errors = Mapping[str, Sequence[tuple[Any, float]]]  # source -> [(row, |log(predicted / published)|)]
WidthsOf = Callable[[Sequence[tuple[Any, float]]], dict[str, float]]
WidthFor = Callable[[Any, dict[str, float], Iterable[str]], float]


def covered(
    errors: Sequence[tuple[Any, float]],
    widths: dict[str, float],
    factor: float,
    fitted: Iterable[str],
    width_for: WidthFor,
) -> float:
    """Share of ``errors``' rows inside their band, ``factor`` x the widths (a % either side)."""
    gens = list(fitted)
    inside = [e <= math.log1p(factor * width_for(row, widths, gens) / 100.0) for row, e in errors]
    return sum(inside) / len(inside)


def inflation(
    errors: Errors, fitted: Mapping[str, Iterable[str]], widths_of: WidthsOf, width_for: WidthFor, share: float
) -> float:
    """The smallest factor (>= 1) with which the bands set from every other source hold ``share`` of each
    source's rows, on average over the sources of ``errors``."""
    sources = sorted(errors)
    if len(sources) < 2:
        return 1.0
    widths = {s: widths_of([e for o in sources if o != s for e in errors[o]]) for s in sources}
    factor = 1.0
    while factor < MOST:
        mean = sum(covered(errors[s], widths[s], factor, fitted[s], width_for) for s in sources) / len(sources)
        if mean >= share - 1e-12:
            return factor
        factor = round(factor + STEP, 10)
    return MOST


def calibrated_widths(
    errors: Errors, fitted: Mapping[str, Iterable[str]], widths_of: WidthsOf, width_for: WidthFor, share: float
) -> dict[str, float]:
    """Every regime's width from all of ``errors`` (``widths_of``), times the :func:`inflation` they give."""
    factor = inflation(errors, fitted, widths_of, width_for, share)
    return {regime: factor * width for regime, width in widths_of([e for v in errors.values() for e in v]).items()}
