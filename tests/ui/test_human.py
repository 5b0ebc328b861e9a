"""Numbers for people: durations, sizes and money as the window and the reports print them."""

from __future__ import annotations

import math

import pytest

from gpuplanner.ui.human import human_bytes, human_duration, human_gib, human_hours, human_money, human_number


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.2, "under 1 s"),
        (0.6, "1 s"),
        (45.2, "45 s"),
        (12 * 60 + 10, "12 min"),
        (72 * 60, "1 h 12 min"),
        (3 * 3600, "3 h"),
        (3 * 86400 + 4 * 3600 + 100, "3 d 4 h"),
        (None, "–"),
        (math.inf, "–"),
    ],
)
def test_durations(seconds: float | None, text: str) -> None:
    assert human_duration(seconds) == text


def test_hours_and_sizes() -> None:
    assert human_hours(1.2) == "1 h 12 min"
    assert human_bytes(31.2 * 1024**3) == "31.2 GiB"
    assert human_bytes(300 * 1024**2) == "300 MiB"
    assert human_gib(79.1) == "79.1 GiB"


@pytest.mark.parametrize(
    ("usd", "text"),
    [
        (1234.567, "$1,234.57"),
        (0.456, "$0.46"),
        (0.0456, "$0.0456"),
        (1.115e-05, "$0.0000112"),
        (0, "$0.00"),
        (-2.5, "-$2.50"),
        (float("nan"), "–"),
    ],
)
def test_money(usd: float, text: str) -> None:
    assert human_money(usd) == text


def test_numbers_never_use_exponents() -> None:
    assert human_number(1.115e-05) == "0.0000112"
    assert human_number(12345.6) == "12,346"
    assert human_number(2.5) == "2.5"
    assert human_number(3.0) == "3"
    assert human_number(7) == "7"
    assert "e" not in human_number(3.2e-9)
