"""Issue 29 item 3: a chart with nothing to draw shows its message alone, never empty $0-$1 axes under it
(the Plan chart, the Runs plots, the History run and overlay plots, the search plots of Sweep and History)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pyqtgraph as pg

from gpuplanner.app.run_series import OverlaySeries, RunSeries
from gpuplanner.ui.widgets.empty_chart import axes_shown

AXES = ("left", "bottom")


def axes_visible(item: pg.PlotItem) -> bool:
    """Whether the plot shows its axes; hidden means none of them drawn (a top-row live plot has no bottom
    axis of its own when shown)."""
    shown = axes_shown(item)
    assert item.getAxis("left").isVisible() == shown
    assert shown or not any(item.getAxis(name).isVisible() for name in AXES)
    return shown


def label_inside(label: pg.TextItem, item: pg.PlotItem) -> bool:
    view = item.getViewBox()
    return view.mapRectToScene(view.rect()).contains(label.mapRectToScene(label.boundingRect()))


def test_the_plan_chart_with_nothing_that_fits_shows_only_its_message(qtbot: Any, services: Any) -> None:
    from gpuplanner.ui.plan.cost_chart import CostChart
    from tests.ui.test_cost_chart import _rows

    chart = CostChart()
    qtbot.addWidget(chart)
    chart.resize(700, 320)
    chart.show()
    item = chart.getPlotItem()
    chart.set_rows([], deadline_hours=24.0, budget_usd=100.0)
    assert chart._title == "no option fits in memory: nothing to chart"
    assert not axes_visible(item)  # was $0-$1 and 0.1-10 h axes under the message
    assert not chart.deadline_line.isVisible() and not chart.budget_line.isVisible()
    chart.set_rows(_rows(services, "llama-3.2-1b", 10_000, 1.0, None), deadline_hours=24.0, budget_usd=100.0)
    assert axes_visible(item) and chart.deadline_line.isVisible()


def test_a_live_plot_without_data_shows_its_reason_alone(qtbot: Any) -> None:
    from gpuplanner.ui.runs.live_plots import LivePlots
    from gpuplanner.ui.runs.run_telemetry import RunTelemetry

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1024, 420)
    plots.show()
    tel = RunTelemetry(1)  # GPU samples, no step yet, no price
    gpu = {"kind": "gpu", "node": "n", "index": 0, "util_pct": 90, "mem_used_bytes": 2 << 30}
    gpu.update({"mem_total_bytes": 8 << 30, "power_w": 300, "temp_c": 70})
    tel.add_records([{"seq": 0, "t": 10.0, "kind": "run_start", "config": {}}, {"seq": 1, "t": 11.0, **gpu}])
    plots.redraw(tel, force=True)
    for key in ("util", "mem", "power"):
        assert axes_visible(plots.plots[key]), key
    for key in ("tokens", "loss"):
        assert not axes_visible(plots.plots[key]) and plots.empty_labels[key].isVisible(), key
    spend = plots.plots["spend"]
    assert not axes_visible(spend) and plots.no_price_label.isVisible()  # no price: the words, no $0-$1
    assert label_inside(plots.no_price_label, spend)
    tel.add_records([{"seq": 2, "t": 12.0, "kind": "step", "step": 1, "loss": 2.0, "tokens_per_s": 1000.0}])
    plots.redraw(tel, force=True)
    assert axes_visible(plots.plots["loss"]) and not plots.empty_labels["loss"].isVisible()
    assert not axes_visible(spend)  # still no price
    tel.price_per_gpu_hour = 2.0
    plots.redraw(tel, force=True)
    assert axes_visible(spend) and not plots.no_price_label.isVisible()


def test_history_plots_of_a_run_without_steps_say_so_alone(qtbot: Any) -> None:
    from gpuplanner.ui.history.run_plots import NO_STEPS, RunPlots

    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 560)
    plots.show()
    for key in plots.plots:  # no run shown yet: no axes around nothing
        assert not axes_visible(plots.plots[key]), key
    t = np.arange(0.0, 600.0, 30.0)
    empty = np.array([])
    gpu = {"GPU 0": (t, np.full(len(t), 80.0), np.full(len(t), 12.0), np.full(len(t), 200.0))}
    plots.show_series(RunSeries(0.0, gpu, (empty, empty, empty), []))
    assert axes_visible(plots.plots["util"]) and axes_visible(plots.plots["mem"])
    for key in ("tokens", "loss"):
        assert not axes_visible(plots.plots[key]) and plots.empty[key].text == NO_STEPS
        assert label_inside(plots.empty[key].label, plots.plots[key])
    plots.show_series(RunSeries(0.0, gpu, (t, np.linspace(3, 1, len(t)), np.full(len(t), 1000.0)), []))
    assert all(axes_visible(plot) for plot in plots.plots.values())


def test_the_overlay_without_spend_says_so_alone(qtbot: Any) -> None:
    from gpuplanner.ui.history.compare_plots import EMPTY, ComparePlots

    plots = ComparePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 560)
    plots.show()
    plots.show_runs([])
    assert not any(axes_visible(plot) for plot in plots.plots.values())
    minutes = np.arange(10.0)
    nan = np.full(10, np.nan)
    run = OverlaySeries(
        1, "Run 1", minutes, minutes * 10, np.linspace(3, 1, 10), np.full(10, 900.0), nan, minutes, nan + 1
    )
    plots.show_runs([run, run])
    assert axes_visible(plots.plots["loss"]) and axes_visible(plots.plots["util"])
    assert not axes_visible(plots.plots["spend"]) and plots.empty["spend"].text == EMPTY["spend"]


def test_search_plots_before_a_search_and_before_an_eval_show_only_words(qtbot: Any) -> None:
    from gpuplanner.ui.history.search_view import NO_BEST, NO_SEARCH, SearchPlots

    plots = SearchPlots()
    qtbot.addWidget(plots)
    plots.resize(800, 300)
    plots.show()
    best, spend = plots.best_plot.getPlotItem(), plots.spend_plot.getPlotItem()
    assert not axes_visible(best) and not axes_visible(spend) and plots.best_empty.text == NO_SEARCH
    review = SimpleNamespace(best_curve=[], spent_usd=0.5, spend_curve=[(0.0, 0.0), (60.0, 0.5)], budget_usd=2.0)
    plots.show_review(review)
    assert not axes_visible(best) and plots.best_empty.text == NO_BEST
    assert axes_visible(spend) and plots.spend_empty.text == ""
    review.best_curve = [(0.2, 2.5, 1), (0.5, 2.1, 2)]
    plots.show_review(review)
    assert axes_visible(best)
