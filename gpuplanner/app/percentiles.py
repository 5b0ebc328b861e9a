"""Which percentile each shown number is, in one wording for the CLI and the window.

Two kinds of percentile appear beside a plan: the likely range (``hours_range``/``cost_range``: P10-P90 of
the speed's error and, on spot, the interruptions; a comparison row's ``p90_cost_usd`` is its top), and a
spot estimate's P50/P90 (``spot.p50_cost_usd``/``spot.p90_cost_usd``: over the simulated interruption
histories at the planned speed, what the spot deadline and budget checks use).
"""

from __future__ import annotations

LIKELY = "P10-P90"
SPOT_PERCENTILES = "over simulated interruptions"


def spot_percentiles(p50: str, p90: str) -> str:
    """ "P50 $77.22, P90 $78.08 over simulated interruptions"."""
    return f"P50 {p50}, P90 {p90} {SPOT_PERCENTILES}"
