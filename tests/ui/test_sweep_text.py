"""The Sweep pane's estimate report and trial cells: people's units, the CLI's figures, no JSON keys."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from PySide6.QtGui import QPalette

from gpuplanner.cli import main
from gpuplanner.ui.palette import dark_palette, light_palette
from gpuplanner.ui.sweep.sweep_text import (
    MISSED_COLORS,
    TRIAL_HEADERS,
    WARNING_COLORS,
    estimate_html,
    trial_cells,
    trials_text,
)


def plan_document(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    argv = ["sweep", "plan", "--model", "llama-3.2-1b", "--gpu", "A100 80GB", "--samples", "50k", "--epochs", "3"]
    assert main([*argv, *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def words(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def test_a_search_over_its_caps_says_which_cap_stops_it_and_after_how_many_trials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = plan_document(
        capsys, "--trials", "27", "--min-epochs", "1", "--parallel", "4", "--budget-usd", "100", "--max-gpu-hours", "20"
    )
    text = words(estimate_html(document, gpu="A100 80GB"))
    caps = document["caps"]
    assert caps["finishes_under_cap"] is False  # 27 trials of a 1B model on 20 GPU-hours do not fit
    binding = {"budget_usd": "the budget", "max_gpu_hours": "the GPU-hour cap"}[caps["binding"]]
    assert f"{binding} stops it after {caps['trials_within_cap']} of 27 trials" in text
    assert f"{caps['budget_usd_share']:.0%} of the $100.00 budget" in text
    pruned = document["pruned"]
    assert f"${pruned['cost_usd']:,.2f}" in text
    assert trials_text(pruned["trials_finishing"]) in text
    assert "One full trial on 1 x A100 80GB" in text and "prices of " + document["trial_plan"]["prices_as_of"] in text
    for key in ("cost_usd", "gpu_hours", "trials_finishing", "max_gpu_hours", "budget_usd", "successive-halving"):
        assert key not in text


def test_a_search_under_its_cap_says_so_and_no_caps_no_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan_document(capsys, "--trials", "9", "--min-epochs", "1", "--budget-usd", "100000")
    text = words(estimate_html(document))
    assert "it finishes under the cap" in text and "Does not finish" not in text
    free = words(estimate_html(plan_document(capsys, "--trials", "9", "--pruner", "none")))
    assert "cap" not in free and "no pruning" in free and "Pruning saves" not in free


def test_trial_cells_are_in_words() -> None:
    row = (3, "pruned", 9, "gpu-box", 1200, 2.9000001, 3.6, 1 / 3, "lr=5e-05")
    assert trial_cells(row) == ["3", "pruned", "#9", "gpu-box", "1,200", "2.9000", "$3.60", "0.333", "lr=5e-05"]
    assert trial_cells((4, "running", None, None, None, None, 0.0, 0.0, ""))[2:] == [
        "–",
        "–",
        "–",
        "–",
        "$0.00",
        "0",
        "–",
    ]
    assert len(TRIAL_HEADERS) == len(row)
    assert trials_text(27.0) == "27" and trials_text(9.124) == "about 9.1"


def contrast(a: str, b: str) -> float:
    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_warning_and_missed_cap_colours_read_on_both_palettes() -> None:
    bases = [p().color(QPalette.ColorRole.Base).name() for p in (light_palette, dark_palette)]
    for colours in (MISSED_COLORS, WARNING_COLORS):
        for dark, base in enumerate(bases):
            assert contrast(colours[dark], base) >= 4.5, (colours[dark], base)
