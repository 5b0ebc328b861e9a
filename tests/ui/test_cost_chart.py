"""The cost chart at extremes: hour labels never collide, dollars without axis offsets, the under-budget
region readable (dear outliers pinned to the top and counted), the best options labelled, the legend
naming what is drawn."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplanner.plan.compare import compare
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, PricingInputs
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup
from gpuplanner.ui.cost_chart import HEADROOM, CostChart, hour_ticks


def _rows(services: Any, model: str, samples: int, epochs: float, budget: float | None) -> list:
    request = PlanRequest(
        model=from_preset(model),
        setup=TrainSetup(method="lora", micro_batch=4, grad_accum=4, seq_len=1024, precision="bf16-mixed"),
        workload=Workload(samples=samples, epochs=epochs),
        gpu=None,
        pricing=PricingInputs(),
        deadline_hours=None,
        budget_usd=budget,
    )
    return compare(request, services.catalog)


@pytest.mark.parametrize(("lo", "hi", "width"), [(-2.0, 5.0, 300), (-2.0, 5.0, 900), (0.1, 0.4, 600), (-0.5, 1.5, 400)])
def test_hour_labels_never_collide(lo: float, hi: float, width: float) -> None:
    ticks = hour_ticks(lo, hi, width)
    assert len(ticks) >= 2
    px = [(v - lo) / (hi - lo) * width for v, _ in ticks]
    assert min(b - a for a, b in zip(px, px[1:])) >= 40  # room for "10,000" at 8-9 pt
    assert all("e" not in text for _, text in ticks)


def test_huge_run_keeps_the_cheap_options_readable(qtbot: Any, services: Any) -> None:
    rows = _rows(services, "llama-3.1-8b", samples=5_000_000, epochs=50.0, budget=20_000.0)
    chart = CostChart()
    qtbot.addWidget(chart)
    chart.resize(900, 320)
    chart.show()
    chart.set_rows(rows, deadline_hours=2_000.0, budget_usd=20_000.0)
    usable = [r.cost_usd for r in chart.rows_shown if r.usable]
    highest = max(r.cost_usd for r in chart.rows_shown)
    assert chart.y_top is not None and chart.y_top <= max(usable + [20_000.0]) * HEADROOM + 1e-6
    if highest > chart.y_top:  # dear options are pinned at the top and counted, not dropped
        pinned = chart.series["above the scale"].data
        assert len(pinned) == sum(1 for r in chart.rows_shown if r.cost_usd > chart.y_top)
        assert chart.clipped_note.isVisible() and "not to scale" in chart.clipped_note.textItem.toPlainText()
        assert "above the scale" in chart._legend_names
    drawn = tuple(name for name, series in chart.series.items() if len(series.data))
    assert chart._legend_names == drawn  # the legend names exactly what is drawn
    labels = [label.textItem.toPlainText() for label in chart.point_labels]
    best = sorted((r for r in chart.rows_shown if r.usable), key=lambda r: r.rank)[:3]
    assert labels == [str(r.rank) for r in best]
    key = chart.clipped_note.textItem.toPlainText()
    assert all(f"{r.rank}: {r.gpus} x {r.gpu} {r.pricing}" in key for r in best)
    left = chart.getPlotItem().getAxis("left")
    assert not left.autoSIPrefix and all(s.startswith("$") for s in left.tickStrings([1000.0, 20000.0], 1, 1000.0))


def test_tiny_model_short_run(qtbot: Any, services: Any) -> None:
    rows = _rows(services, "gpt2", samples=200, epochs=1.0, budget=None)
    chart = CostChart()
    qtbot.addWidget(chart)
    chart.resize(900, 320)
    chart.show()
    chart.set_rows(rows, deadline_hours=None, budget_usd=None)
    assert chart.rows_shown
    ticks = chart.getPlotItem().getAxis("bottom")._tickLevels[0]
    assert len(ticks) >= 2 and all("e" not in text for _, text in ticks)
    strings = chart.getPlotItem().getAxis("left").tickStrings([0.001, 0.002], 1, 0.001)
    assert strings == ["$0.001", "$0.002"]
