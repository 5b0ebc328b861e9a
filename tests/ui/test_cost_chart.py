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
from gpuplanner.ui.plan.cost_chart import HEADROOM, CostChart, hour_ticks


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
        title = chart.getPlotItem().titleLabel.text.replace("<br>", " · ")  # on as many lines as the width needs
        assert "not to scale" in chart.key and chart.key in title
        assert "above the scale" in chart._legend_names
    drawn = tuple(name for name, series in chart.series.items() if len(series.data))
    assert chart._legend_names == drawn  # the legend names exactly what is drawn
    labels = [label.textItem.toPlainText() for label in chart.point_labels]
    best = sorted((r for r in chart.rows_shown if r.usable), key=lambda r: r.rank)[:3]
    assert labels == [str(r.rank) for r in best]
    key = chart.key
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


def test_new_rows_paint_the_chart_once(qtbot: Any, services: Any) -> None:
    """A recalculation (new costs and hours, the same kinds of points) paints the chart once: the view box's
    new range is applied before the paint, as a change made during a paint makes Qt paint the plot area a
    second time (that was most of a recalculation's cost)."""
    from PySide6.QtCore import QEvent, QObject

    first = _rows(services, "llama-3.1-8b", samples=100_000, epochs=1.0, budget=None)
    second = _rows(services, "llama-3.1-8b", samples=400_000, epochs=3.0, budget=None)
    chart = CostChart()
    qtbot.addWidget(chart)
    chart.resize(900, 320)
    chart.show()
    qtbot.waitExposed(chart)
    for rows in (first, second):  # the cost axis widens once for the dearer costs' labels
        chart.set_rows(rows, deadline_hours=None, budget_usd=None)
        qtbot.wait(100)
    width = chart.getPlotItem().getAxis("left").width()

    class Paints(QObject):
        count = 0

        def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt naming)
            if event.type() == QEvent.Type.Paint:
                self.count += 1
            return False

    paints = Paints()
    chart.viewport().installEventFilter(paints)
    for rows in (first, second, first):
        before = paints.count
        chart.set_rows(rows, deadline_hours=None, budget_usd=None)
        qtbot.wait(150)  # the paint, and time for any second one
        assert paints.count - before == 1
        assert chart.getPlotItem().getAxis("left").width() == width  # the plot area stays where it was
    chart.viewport().removeEventFilter(paints)


def test_cost_axis_draws_labelled_ticks_only(qtbot: Any) -> None:  # qtbot: a QApplication for the axis item
    """Every tick of the cost axis is a grid line across the plot: only the labelled level is drawn."""
    from gpuplanner.ui.plan.cost_chart import MoneyAxis

    levels = MoneyAxis(orientation="left").tickSpacing(0.0, 12_000.0, 300)
    assert len(levels) == 1


def _scene_points(chart: CostChart) -> list[Any]:
    from PySide6.QtCore import QPointF

    view = chart.getPlotItem().getViewBox()
    points = []
    for series in chart.series.values():
        xs, ys = series.getData()
        points += [view.mapViewToScene(QPointF(float(x), float(y))) for x, y in zip(xs, ys)]
    return points


@pytest.mark.parametrize(
    ("model", "samples", "epochs", "budget", "deadline"),
    [
        ("llama-3.1-8b", 50_000, 1.0, 40.0, 12.0),
        ("llama-3.1-8b", 5_000_000, 50.0, 20_000.0, 2_000.0),
        ("gpt2", 200, 1.0, None, None),
    ],
)
def test_legend_and_labels_hide_no_point_and_stay_inside(
    qtbot: Any, services: Any, model: str, samples: int, epochs: float, budget: float | None, deadline: float | None
) -> None:
    """At the chart's size in a 1280x800 window: the legend is outside the plot area (it covers no point),
    every rank label lies inside the view (the cheapest option's label too), and no two labels overlap."""
    rows = _rows(services, model, samples=samples, epochs=epochs, budget=budget)
    chart = CostChart()
    qtbot.addWidget(chart)
    chart.resize(790, 220)
    chart.show()
    chart.set_rows(rows, deadline_hours=deadline, budget_usd=budget)
    qtbot.wait(50)
    view = chart.getPlotItem().getViewBox().sceneBoundingRect()
    legend = chart.legend.sceneBoundingRect()
    assert legend.width() > 0 and not legend.intersects(view)
    assert not any(legend.contains(p) for p in _scene_points(chart))
    labels = [label.sceneBoundingRect() for label in chart.point_labels if label.isVisible()]
    assert labels
    for rect in labels:
        assert view.contains(rect), (rect, view)
    for i, a in enumerate(labels):
        assert not any(a.intersects(b) for b in labels[i + 1 :])
    left = chart.getPlotItem().getAxis("left")
    values = [v for _, level in left.tickValues(*chart.y_range, view.height()) for v in level]
    assert values and min(values) >= 0.0 and max(values) <= chart.y_top * (1 + 1e-9)  # no tick in the margins
