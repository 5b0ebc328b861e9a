"""The band's widening factor (tests/benchmarks/band_calibration.py): the smallest that makes bands set from
the other sources hold the share of each left-out source's rows, by hand on made-up errors."""

from __future__ import annotations

import math

import pytest

from tests.benchmarks import band_calibration as bc

REGIME = "fine-tuning"


def _widths_of(errors):
    """Half-width (% either side) = the largest error given, one regime (a stand-in for band_widths)."""
    return {REGIME: math.expm1(max(e for _, e in errors)) * 100.0}


def _width_for(row, widths, fitted):
    return widths[REGIME]


def _errors(*per_source: list[float]) -> dict[str, list[tuple[str, float]]]:
    return {
        f"s{i}": [(f"s{i}r{j}", math.log1p(pct / 100.0)) for j, pct in enumerate(values)]
        for i, values in enumerate(per_source)
    }


FITTED = {f"s{i}": () for i in range(3)}


def test_no_widening_when_the_others_bands_already_hold_the_share() -> None:
    errors = _errors([10.0, 10.0], [10.0, 10.0], [10.0, 10.0])
    assert bc.inflation(errors, FITTED, _widths_of, _width_for, 0.8) == 1.0
    assert bc.calibrated_widths(errors, FITTED, _widths_of, _width_for, 0.8)[REGIME] == pytest.approx(10.0)


def test_the_factor_is_the_smallest_that_holds_the_share_by_hand() -> None:
    # s0's rows are off by 30%; s1 and s2 by 10% and 21%. Left out, s0 is judged against +/-21% (the others'
    # largest): inside only from a factor of 30 / 21 = 1.43, the 1.45 step; s1 and s2 are inside at 1.0
    # (bands +/-30%). Mean coverage at 1.0 is 2/3, at 1.45 it is 1: the factor for a share of 0.8 is 1.45.
    errors = _errors([30.0], [10.0], [21.0])
    factor = bc.inflation(errors, FITTED, _widths_of, _width_for, 0.8)
    assert factor == 1.45
    assert bc.calibrated_widths(errors, FITTED, _widths_of, _width_for, 0.8)[REGIME] == pytest.approx(1.45 * 30.0)
    # a share two sources of three already reach needs no widening
    assert bc.inflation(errors, FITTED, _widths_of, _width_for, 0.6) == 1.0
