"""History details: planned against actual in people's units with both GPUs (flagged when they differ),
numbers without exponents."""

from __future__ import annotations

from gpuplanner.ui.history_model import format_value
from gpuplanner.ui.history_pane import HistoryPane

GIB = 1024**3


def test_planned_against_actual_reads_as_people_write() -> None:
    planned = {
        "hours": {"planned": 1.2, "actual": 1.5, "diff_pct": 25.0},
        "cost_usd": {"planned": 2.9876, "actual": 3.6, "diff_pct": 20.5},
        "peak_mem_bytes": {"planned": 40 * GIB, "actual": 38.5 * GIB, "diff_pct": -3.75},
        "tokens_per_s": {"planned": None, "actual": None, "diff_pct": None},
    }
    html = HistoryPane.planned_html(planned, "1 x H100 SXM", "2 x A100 80GB")
    assert "1 h 12 min" in html and "1 h 30 min" in html and "$2.99" in html and "$3.60" in html
    assert "40.0 GiB" in html and "38.5 GiB" in html and "+25.0 %" in html
    assert "different GPU" in html and "Tokens/s" not in html  # nothing to compare: no row
    same = HistoryPane.planned_html(planned, "1 x H100 SXM", "1 x H100 SXM")
    assert "different GPU" not in same and ">same<" in same


def test_no_exponents() -> None:
    assert format_value(1.115e-05) == "0.0000112"
    assert format_value(0.5) == "0.5"
    assert format_value(12345.0) == "12,345"
