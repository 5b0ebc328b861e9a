"""The Runs pane's live plots: y ranges fitted to the visible data, readable event labels, marker lines,
the scrolling bottom axis, and the legend."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRectF, Qt

from gpuplanner.ui.runs.run_telemetry import Marker

FIT_PLOTS = {"power": "power_w", "tokens": "tokens_per_s", "loss": "loss", "spend": "spend_usd"}


def _plots(qtbot, follow: bool, window_s: float | None = None, size=(1280, 800)):
    from gpuplanner.ui.runs.live_plots import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(*size)
    plots.set_follow(follow, window_s)
    plots.show()
    return plots


def _visible(buf, column: str, x_lo: float, x_hi: float) -> np.ndarray:
    x, y = buf.view("x"), buf.view(column)
    y = y[(x >= x_lo) & (x <= x_hi)]
    return y[np.isfinite(y)]


@pytest.mark.parametrize("follow", [True, False])
def test_y_ranges_cover_the_visible_data_and_follow_it_without_autorange(qtbot, follow: bool) -> None:
    """A day of samples; a power spike of 1,500 W enters the scrolling window's view and leaves it again.
    At every frame each fitted plot's y range holds every raw sample inside the x window (so no spike is
    cut off) and the budget and plan lines (spend); once the spike has scrolled out the power range
    shrinks back; the ranges change only now and then (not at every frame as extremes scroll by); and
    pyqtgraph's auto-range is off on every plot."""
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(2, 86_400, seed=5)
    spike_x = 86_400 - 595.0  # inside the last 10 minutes, leaving them after ~10 frames
    for buf in tel.gpus.values():
        buf.view("power_w")[int(spike_x)] = 1500.0
    plots = _plots(qtbot, follow)
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    changes = {key: 0 for key in FIT_PLOTS}
    last = {key: plots.y_range(key) for key in FIT_PLOTS}
    rng = np.random.default_rng(2)
    for k in range(40):
        x = 86_400.0 + k
        for buf in tel.gpus.values():
            buf.append((x, 80.0, None, 60.0, 80.0, 500.0 + rng.normal(0, 20), 80.0))
        if k % 2 == 0:
            steps_total = tel.steps.last("step") + 1
            tel.steps.append(
                (x, steps_total, 1.2 + rng.normal(0, 0.05), 5e4 + rng.normal(0, 2e3), x / 3600 * 8 * 2.5, 2.0, 0.05)
            )
        tel.last_t = x
        tel.version += 1
        plots.redraw()
        x_lo, x_hi, _ = plots._window(tel)
        for key, column in FIT_PLOTS.items():
            lo, hi = plots.y_range(key)
            buffers = list(tel.gpus.values()) if key == "power" else [tel.steps]
            values = np.concatenate([_visible(b, column, x_lo, x_hi) for b in buffers])
            if key == "spend":
                values = np.concatenate([values, [tel.budget_usd, tel.planned_cost_usd]])
            assert lo <= values.min() and values.max() <= hi, f"{key}: {values.min()}..{values.max()} not in {lo}..{hi}"
            if (lo, hi) != last[key]:
                changes[key] += 1
                last[key] = (lo, hi)
        if x_lo <= spike_x <= x_hi:
            assert plots.y_range("power")[1] >= 1500
        elif spike_x < x_lo - 2.0:  # its sample, and the segment from it into the window, scrolled out
            assert plots.y_range("power")[1] < 1000, "the power range kept room for a spike no longer shown"
    if follow:
        assert spike_x < x_lo - 2.0  # the spike did scroll out
    assert all(n <= 4 for n in changes.values()), changes
    for plot in plots.plots.values():
        assert plot.getViewBox().autoRangeEnabled() == [False, False]


def _label_rects(plots) -> list[tuple[QRectF, str]]:
    item = plots.event_labels
    return [(item.mapRectToScene(rect), "".join(text for text, _ in pieces)) for rect, pieces in item.layout()]


def _assert_readable(plots, labels) -> None:
    view = plots.plots["util"].getViewBox().sceneBoundingRect()
    for (a, ta), (b, tb) in itertools.combinations(labels, 2):
        assert not a.intersects(b), f"labels {ta!r} {a} and {tb!r} {b} overlap"
    for rect, text in labels:
        assert view.contains(rect), f"label {text!r} {rect} runs out of the plot {view}"


def _telemetry_with_events(end: float, events: list[tuple[float, str]]):
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(1, int(end))
    tel.markers.extend(Marker(x, kind, kind) for x, kind in events)
    tel.version += 1
    return tel


def test_close_preemption_and_resume_share_one_label(qtbot) -> None:
    """Two hours in full view: a preemption and its resume 80 s later are ~6 px apart, one label names
    both (and the downtime)."""
    tel = _telemetry_with_events(7200, [(1800.0, "checkpoint"), (4208.0, "preempted"), (4290.0, "resumed")])
    plots = _plots(qtbot, follow=False)
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    labels = _label_rects(plots)
    assert [text for _, text in labels] == ["preempted → resumed after 1:22"]
    _assert_readable(plots, labels)


def _named(text: str) -> int:
    import re

    merged = sum(int(n) for n in re.findall(r"(\d+)× (?:preempted|resumed)", text))
    single = len(re.findall(r"(?<!× )\b(?:preempted|resumed)\b", text))
    return merged + single


@pytest.mark.parametrize(
    "end,events",
    [
        (4500, [(4208.0, "preempted"), (4290.0, "resumed")]),  # 80 s apart in a 10-minute window: ~70 px
        (4300, [(4208.0, "preempted"), (4290.0, "resumed")]),  # at the right edge: labels go left of their lines
        (
            4500,
            [
                (4000.0, "preempted"),
                (4012.0, "resumed"),
                (4030.0, "preempted"),
                (4041.0, "resumed"),
                (4100.0, "preempted"),
                (4140.0, "resumed"),
                (4400.0, "preempted"),
            ],
        ),  # a flapping spot instance
    ],
)
def test_event_labels_never_overlap_in_a_scrolling_window(qtbot, end: int, events) -> None:
    """Events too far apart to share a label but too close for their labels to sit side by side are
    staggered; every label stays inside the plot, and every event in the window is named by a label."""
    tel = _telemetry_with_events(end, events)
    plots = _plots(qtbot, follow=True, window_s=600.0, size=(1060, 620))
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    labels = _label_rects(plots)
    assert len(labels) >= 2
    _assert_readable(plots, labels)
    named = sum(_named(text) for _, text in labels)  # "3× preempted" names three events
    assert named == len(events)


def test_markers_are_drawn_by_one_item_per_plot_and_name_themselves_on_hover(qtbot) -> None:
    """150 checkpoints (a day at one every ~10 minutes) add no item to the scenes: each plot's marker
    lines are one item, drawing only the markers in the x range; hovering near a line shows its label."""
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(1, 86_400)
    plots = _plots(qtbot, follow=True)
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    before = len(plots.graphics.scene().items())
    tel.markers.extend(Marker(576.0 * i + 288.0, "checkpoint", f"checkpoint {i}") for i in range(150))
    tel.version += 1
    plots.redraw()
    qtbot.wait(10)
    assert len(plots.graphics.scene().items()) == before
    lines = plots.marker_lines["loss"]
    assert len(lines.markers) == 150
    shown = lines.pixel_positions()
    assert [m.label for m, _ in shown] == ["checkpoint 149"]  # at 86,112 s; the one before, at 85,536, is older
    marker, px = shown[0]
    lines.hoverMoveEvent(SimpleNamespace(pos=lambda: SimpleNamespace(x=lambda: px + 2.0)))
    assert lines.toolTip() == "checkpoint 149"
    lines.hoverMoveEvent(SimpleNamespace(pos=lambda: SimpleNamespace(x=lambda: px + 30.0)))
    assert lines.toolTip() == ""


def test_scrolling_bottom_axis_paints_what_pyqtgraph_paints(qtbot) -> None:
    """The bottom axes' direct paint while scrolling gives the same pixels as pyqtgraph's own paint."""
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(1, 5000)
    plots = _plots(qtbot, follow=True, size=(1060, 620))
    plots.redraw(tel, force=True)
    qtbot.wait(20)
    images = []
    for scrolling in (True, False):
        for plot in plots.plots.values():
            axis = plot.getAxis("bottom")
            axis.scrolling, axis.picture = scrolling, None
            axis.update()
        qtbot.wait(20)
        images.append(plots.grab().toImage())
    assert images[0] == images[1]
    axis = plots.plots["loss"].getAxis("bottom")
    assert axis.isVisible() and axis.range[1] - axis.range[0] == pytest.approx(600.0)


def test_legend_click_hides_and_shows_a_gpu_line(qtbot) -> None:
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(2, 3000)
    plots = _plots(qtbot, follow=False)
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    legend = plots.plots["util"].legend
    sample, label = legend.items[1]
    assert label.text == "GPU 1"
    line = plots.gpu_curves[("", 1)]["util"]
    event = SimpleNamespace(button=lambda: Qt.MouseButton.LeftButton, accept=lambda: None)
    sample.mouseClickEvent(event)
    assert not line.body.is_visible(id(line)) and not line.live.is_visible(id(line))
    assert not sample.item.isVisible()
    sample.mouseClickEvent(event)
    assert line.body.is_visible(id(line)) and line.live.is_visible(id(line))


def test_hover_readout_is_synced_across_the_run_plots_and_reads_the_buffers(qtbot) -> None:
    """Issue 29 item 8: a crosshair at the cursor on every plot, each with its values there; no "A" button;
    utilisation drawn as a 10 s mean over faint raw samples."""
    from gpuplanner.ui.runs.live_plots import LivePlots
    from gpuplanner.ui.runs.run_telemetry import RunTelemetry

    tel = RunTelemetry(1)
    records: list[dict] = [{"seq": 0, "t": 0.0, "kind": "run_start", "config": {}}]
    for i in range(1, 41):  # 1 Hz samples alternating 0 and 100 % (a barcode), a step every 2 s
        records.append({"seq": 2 * i, "t": float(i), "kind": "gpu", "node": "", "index": 0, "util_pct": 100 * (i % 2)})
        records[-1] |= {"mem_used_bytes": (i << 28), "mem_total_bytes": 80 << 30, "power_w": 100.0 + i}
        if i % 2 == 0:
            records.append({"seq": 2 * i + 1, "t": float(i), "kind": "step", "step": i // 2, "loss": 5.0 - i / 10})
    tel.add_records(records)
    means = tel.gpus[("", 0)].view("util_mean")
    assert means[-1] == pytest.approx(50.0)  # the last 10 s: five samples of 100 and five of 0
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1200, 600)
    plots.show()
    plots.set_follow(False)
    plots.redraw(tel, force=True)
    assert not any(plot.buttonsHidden is False for plot in plots.plots.values())
    assert not any(plot.autoBtn.isVisible() for plot in plots.plots.values())
    curves = plots.gpu_curves[("", 0)]
    assert curves["util"].pen.color().alpha() < 128 < curves["util_mean"].pen.color().alpha()  # faint raw samples
    assert 40 <= np.nanmin(curves["util_mean"].points()[1]) and np.nanmax(curves["util_mean"].points()[1]) <= 100
    view = plots.plots["loss"].getViewBox()
    target = view.mapViewToScene(pg.Point(20.5, 3.0))
    plots.graphics.scene().sigMouseMoved.emit(target)
    x = plots.crosshair.x
    assert x == pytest.approx(20.5, abs=0.05)
    assert all(line.isVisible() and line.value() == x for line in plots.crosshair.lines.values())  # synced
    assert "loss 3" in plots.crosshair.text("loss")  # step 10 at t=20: loss 5 - 2.0 = 3
    assert "GPU 0 50% mean of 10 s (sample 0%)" in plots.crosshair.text("util")  # t=20: sample 0 %
    assert "GPU 0 5.0 GiB" in plots.crosshair.text("mem") and "GPU 0 120 W" in plots.crosshair.text("power")
    plots.graphics.scene().sigMouseMoved.emit(pg.Point(-50.0, -50.0))  # off the plots: gone
    assert plots.crosshair.x is None and not any(line.isVisible() for line in plots.crosshair.lines.values())
