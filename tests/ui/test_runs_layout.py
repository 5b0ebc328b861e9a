"""The Runs pane as a user sees it at 1280x800: plots tall enough to read, legends and labels that cover
no data, colours that read on the light and the dark palette, and dialogs that open at the start of
long values."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from gpuplanner.ui.runs.run_telemetry import Marker
from tests.ui.test_sweep_text import contrast

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))


def busy_telemetry(gpus: int = 8, seconds: int = 7200) -> Any:
    """Utilisation pinned near 100% (where labels at the top would cover it), a preemption and resume."""
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(gpus, seconds, seed=4)
    for buf in tel.gpus.values():
        buf.view("util")[:] = 99.0
    tel.markers.extend([Marker(3000.0, "preempted", "preempted"), Marker(3080.0, "resumed", "resumed")])
    tel.budget_usd, tel.planned_cost_usd = 160.0, 36.0
    tel.version += 1
    return tel


def sample_points_in_scene(plots: Any, key: str) -> list[QPointF]:
    view = plots.plots[key].getViewBox()
    out = []
    for curves in plots.gpu_curves.values():
        x, y = curves[key].points()
        keep = np.isfinite(y)
        step = max(1, int(keep.sum()) // 400)
        out += [view.mapViewToScene(QPointF(float(a), float(b))) for a, b in zip(x[keep][::step], y[keep][::step])]
    return out


def busy_plots(qtbot: Any) -> Any:
    """The live plots at their size in a 1280x800 window, the whole of :func:`busy_telemetry` in view."""
    from gpuplanner.ui.runs.live_plots import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1060, 480)
    plots.set_follow(False)  # the full history: the preemption is in view
    plots.show()
    plots.redraw(busy_telemetry(), force=True)
    qtbot.wait(30)
    return plots


@pytest.fixture
def runs_window(qtbot: Any, tmp_services: Any) -> Any:
    """The Runs pane at the size it has in a 1280x800 window, an 8-GPU run two hours in (the picture of
    docs/screenshots/runs.png, fed through the same record path as a live run)."""
    import runs_screenshots

    from gpuplanner.ui.runs.launch_request import LaunchRequest
    from gpuplanner.ui.runs.runs_pane import RunsPane

    pane = RunsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(1160, 760)
    pane.show()
    request = LaunchRequest(host_name="h100-a", trainer_args=[], name="r", gpus=8, budget_usd=160.0)
    entry = pane._add_entry(41, "r", "h100-a", request=request)
    entry.telemetry.add_records(runs_screenshots.run_records())
    entry.alerts = [("idle_gpu", "GPU 3 did nothing for 12 min", "check the world size")]
    pane.window_combo.setCurrentIndex(2)  # full history
    pane.run_list.setCurrentItem(entry.item)
    pane._on_redraw_timer()
    pane._update_text()
    qtbot.wait(50)
    pane._on_redraw_timer()
    yield pane
    pane.shutdown(stop_runs=False)


def test_each_plot_has_room_at_1280x800_and_the_gpu_table_keeps_some_rows(qtbot: Any, runs_window: Any) -> None:
    plots = runs_window.plots
    heights = {key: plot.getViewBox().sceneBoundingRect().height() for key, plot in plots.plots.items()}
    assert min(heights.values()) >= 110, heights  # was ~75 px with two columns and the table under them
    table = runs_window.gpu_table.table
    assert runs_window.gpu_table.isVisible() and table.height() >= table.minimumHeight()
    rows_shown = (table.viewport().height()) / table.verticalHeader().defaultSectionSize()
    assert rows_shown >= 2.0
    runs_window.plots_split.setSizes([10_000, 10_000])  # the handle gives the table more rows when asked
    qtbot.wait(20)
    assert table.viewport().height() / table.verticalHeader().defaultSectionSize() > rows_shown


def test_the_gpu_legend_is_under_the_plots_and_covers_no_sample(qtbot: Any) -> None:
    plots = busy_plots(qtbot)
    legend = plots.plots["util"].legend
    assert len(legend.items) == 8 and legend.isVisible()
    rect = legend.sceneBoundingRect()
    bottom = max(plot.sceneBoundingRect().bottom() for plot in plots.plots.values())
    assert rect.top() >= bottom - 1  # in its own row, under every plot
    for key in ("util", "mem", "power"):
        assert not any(rect.contains(p) for p in sample_points_in_scene(plots, key))


def test_preemption_labels_sit_above_the_samples_and_ticks_stay_0_to_100(qtbot: Any) -> None:
    plots = busy_plots(qtbot)
    labels = [plots.event_labels.mapRectToScene(rect) for rect, _ in plots.event_labels.layout()]
    assert labels, "the preemption and resume have a label"
    points = sample_points_in_scene(plots, "util")
    assert points
    for rect in labels:
        assert not any(rect.contains(p) for p in points), "a label covers utilisation samples"
    assert plots.y_range("util")[1] > 100.0  # the strip above 100 holds the labels
    ticks = [v for v, _ in plots.plots["util"].getAxis("left")._tickLevels[0]]
    assert max(ticks) == 100.0 and min(ticks) == 0.0
    plots.resize(1060, 700)  # a taller view needs a smaller share above 100
    qtbot.waitUntil(lambda: plots.y_range("util")[1] < 112.0, timeout=2000)


def test_capacity_is_in_the_title_not_over_the_memory_samples(qtbot: Any) -> None:
    from gpuplanner.ui.runs.live_plots import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1060, 480)
    plots.show()
    tel = busy_telemetry(2, 600)
    plots.redraw(tel, force=True)
    capacity = max(b.last("mem_total_gib") for b in tel.gpus.values())
    assert f"capacity {capacity:,.0f}" in plots.plots["mem"].titleLabel.text
    assert plots.capacity_line.isVisible() and getattr(plots.capacity_line, "label", None) is None


@pytest.mark.parametrize("dark", [False, True])
def test_banner_and_line_labels_read_on_both_palettes(qtbot: Any, dark: bool) -> None:
    from gpuplanner.ui.palette import dark_palette, light_palette
    from gpuplanner.ui.runs.alert_banner import AlertBanner
    from gpuplanner.ui.runs.live_plots import LivePlots

    app = QApplication.instance()
    before = app.palette()
    app.setPalette(dark_palette() if dark else light_palette())
    try:
        banner = AlertBanner()
        qtbot.addWidget(banner)
        banner.set_alerts([("low_util", "GPUs at 30% for 10 min", "the input pipeline is slow")])
        background, _border, text = banner.colors
        window = QColor(app.palette().color(QPalette.ColorRole.Window)).name()
        assert contrast(text, background) >= 7.0
        assert (QColor(background).lightness() < 128) == dark  # a light banner only on the light palette
        assert contrast(background, window) < 4.0 or not dark  # no bright block on a dark window
        plots = LivePlots()
        qtbot.addWidget(plots)
        base = app.palette().color(QPalette.ColorRole.Base).name()
        for line in (plots.budget_line, plots.plan_line):
            assert contrast(line.label.color.name(), base) >= 4.5, (line.label.color.name(), base)
    finally:
        app.setPalette(before)


def test_launch_dialog_opens_long_values_at_their_start(qtbot: Any) -> None:
    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

    command = "torchrun --nproc-per-node 8 train.py --config configs/llama-3b.yaml " + "--flag value " * 20
    dialog = LaunchDialog([("local", "This machine", None)], {"mode": "command", "command": command}, remember=False)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.command_edit.text() == command.strip() or dialog.command_edit.text() == command
    assert dialog.command_edit.cursorPosition() == 0  # "torchrun ..." is what shows, not the tail


@pytest.mark.slow  # over the 5 s budget of an unmarked test on a quiet machine (issue 25)
def test_the_failed_run_picture_shows_no_path_of_the_build_machine() -> None:
    import runs_screenshots

    _records, stderr = runs_screenshots.failed_run_records()
    assert "IndexError" in stderr
    assert sys.prefix not in stderr and str(Path(__file__).resolve().parents[2]) not in stderr


def rows_in_view(table: Any) -> int:
    """GPU rows whose whole rectangle lies inside the table's viewport (not under its scroll bar)."""
    view = table.viewport().rect()
    return sum(view.contains(table.visualRect(table.model().index(r, 0))) for r in range(table.rowCount()))


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_the_gpu_table_shows_whole_rows_at_1024x700(qtbot: Any, tmp_services: Any, gpus: int) -> None:
    """At 1024x700 the columns scroll sideways; the scroll bar used to cover the second of two rows (and
    half of a single one). Every GPU's row is whole, two of them at least, the plots keeping their room."""
    import runs_screenshots

    from gpuplanner.ui.runs.launch_request import LaunchRequest
    from gpuplanner.ui.runs.runs_pane import PLOTS_MIN_HEIGHT, RunsPane

    pane = RunsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(904, 670)  # the pane's size in a 1024x700 window
    pane.show()
    request = LaunchRequest(host_name="h100-a", trainer_args=[], name="r", gpus=gpus, budget_usd=160.0)
    entry = pane._add_entry(41, "r", "h100-a", request=request)
    entry.telemetry.add_records(runs_screenshots.run_records(gpus, 600))
    pane.run_list.setCurrentItem(entry.item)
    pane._on_redraw_timer()
    pane._update_text()
    table = pane.gpu_table.table
    try:
        qtbot.waitUntil(lambda: table.rowCount() == gpus and table.horizontalScrollBar().maximum() > 0)
        qtbot.waitUntil(lambda: table.viewport().height() >= min(gpus, 2) * table.rowHeight(0))
        assert rows_in_view(table) >= min(gpus, 2)
        assert pane.plots.height() >= PLOTS_MIN_HEIGHT
        caption = pane.gpu_table.caption  # the note under the table is whole too, and below the table
        assert caption.height() >= caption.heightForWidth(caption.width())
        pane.gpu_table.show_rows(pane.gpu_table._rows, ended=True)  # "Run ended: ..." makes it longer
        qtbot.waitUntil(lambda: caption.height() >= caption.heightForWidth(caption.width()))
        assert caption.geometry().top() >= table.geometry().bottom()
        assert rows_in_view(table) >= min(gpus, 2)
    finally:
        pane.shutdown(stop_runs=False)
