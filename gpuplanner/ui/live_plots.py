"""Live plots of one run: GPU utilisation (and SM activity), memory against capacity, power, tokens/s,
loss, and cumulative spend with the budget line; vertical markers for checkpoints, preemptions and resumes.

:class:`LivePlots` never pulls data by itself: the Runs pane's redraw timer calls :meth:`LivePlots.redraw`
with a :class:`RunTelemetry` (ring buffers) at 10-20 Hz, and it skips the work when nothing changed.
For long runs every PlotItem has peak-mode auto downsampling and clip-to-view, and the x range is
driven here (a scrolling window of the last minutes, or the full history).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QVBoxLayout, QWidget

from gpuplanner.ui import pyside_guard
from gpuplanner.ui.run_telemetry import RunTelemetry

pyside_guard.install()

GPU_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKER_COLORS = {"checkpoint": "#2ca02c", "preempted": "#d62728", "resumed": "#1f77b4"}
DEFAULT_WINDOW_S = 600.0


class ElapsedAxis(pg.AxisItem):
    """Seconds since the run started, written as m:ss or h:mm:ss."""

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (Qt naming)
        out = []
        for v in values:
            s = int(round(v * scale))
            sign = "-" if s < 0 else ""
            s = abs(s)
            h, rem = divmod(s, 3600)
            m, sec = divmod(rem, 60)
            out.append(f"{sign}{h}:{m:02d}:{sec:02d}" if h else f"{sign}{m}:{sec:02d}")
        return out


def _nice_step(value: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``value`` (and at least 1)."""
    if value <= 1.0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for mult in (1.0, 2.0, 5.0, 10.0):
        if mult * power >= value:
            return mult * power
    return 10.0 * power


def _pen(color: str, *, dashed: bool = False, width: float = 1.0):
    pen = pg.mkPen(color, width=width)
    pen.setCosmetic(True)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    return pen


class LivePlots(QWidget):
    """Six linked plots fed from a :class:`RunTelemetry` by :meth:`redraw`."""

    PLOTS = (("util", "GPU utilisation (%)"), ("mem", "GPU memory (GiB)"), ("power", "Power (W)"),
             ("tokens", "Tokens/s"), ("loss", "Loss"), ("spend", "Spend (USD)"))

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_s = DEFAULT_WINDOW_S
        self.follow = True  # True: scrolling window of window_s; False: the full history
        self._telemetry: RunTelemetry | None = None
        self._drawn_version = -1
        self._drawn_mode: tuple[bool, float] | None = None
        self._markers_drawn = 0
        self._capacity = 0.0
        self._x_range: tuple[float, float] | None = None
        self.graphics = pg.GraphicsLayoutWidget(self)
        self.graphics.setBackground("w")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics)
        self.plots: dict[str, pg.PlotItem] = {}
        for i, (key, title) in enumerate(self.PLOTS):
            plot = self.graphics.addPlot(row=i // 2, col=i % 2, title=title,
                                         axisItems={"bottom": ElapsedAxis(orientation="bottom")})
            plot.setDownsampling(auto=True, mode="peak")
            plot.setClipToView(True)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMenuEnabled(False)
            plot.enableAutoRange(x=False, y=True)
            plot.setAutoVisible(y=True)
            plot.getViewBox().setMouseEnabled(x=False, y=False)
            if self.plots:
                plot.setXLink(self.plots["util"])
            if i < len(self.PLOTS) - 2:  # x axes only under the bottom row (the x ranges are linked)
                plot.getAxis("bottom").setStyle(showValues=False)
                plot.getAxis("bottom").setHeight(4)
            for axis in ("left", "bottom"):  # repaint axes from a pixmap unless their range changed
                plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.plots[key] = plot
        self.plots["util"].setYRange(0, 100)
        self.plots["util"].enableAutoRange(y=False)
        self.plots["util"].addLegend(offset=(-5, 5), labelTextSize="7pt")
        self._titles: dict[str, str] = {}
        self.gpu_curves: dict[tuple[str, int], dict[str, pg.PlotDataItem]] = {}
        self.capacity_line = pg.InfiniteLine(angle=0, pen=_pen("#d62728", dashed=True), movable=False,
                                             label="capacity {value:.1f} GiB",
                                             labelOpts={"position": 0.05, "color": "#d62728", "anchors": [(0, 0), (0, 0)]})
        self.capacity_line.setVisible(False)
        self.plots["mem"].addItem(self.capacity_line, ignoreBounds=False)
        self.tokens_curve = self.plots["tokens"].plot(pen=_pen("#1f77b4"))
        self.loss_curve = self.plots["loss"].plot(pen=_pen("#1f77b4"), name="train")
        self.eval_curve = self.plots["loss"].plot(pen=None, symbol="o", symbolSize=5, symbolBrush="#ff7f0e",
                                                  symbolPen=None, name="eval")
        self.spend_curve = self.plots["spend"].plot(pen=_pen("#2ca02c", width=1.5))
        self.budget_line = pg.InfiniteLine(angle=0, pen=_pen("#d62728", dashed=True), movable=False,
                                           label="budget ${value:,.2f}",
                                           labelOpts={"position": 0.05, "color": "#d62728", "anchors": [(0, 0), (0, 0)]})
        self.plan_line = pg.InfiniteLine(angle=0, pen=_pen("#7f7f7f", dashed=True), movable=False,
                                         label="plan ${value:,.2f}",
                                         labelOpts={"position": 0.95, "color": "#555555", "anchors": [(1, 1), (1, 1)]})
        for line in (self.budget_line, self.plan_line):
            line.setVisible(False)
            self.plots["spend"].addItem(line)
        self._marker_items: list[pg.InfiniteLine] = []

    # -- configuration -------------------------------------------------------------------------
    def set_follow(self, follow: bool, window_s: float | None = None) -> None:
        """Scrolling window (``follow``) of ``window_s`` seconds, or the full history."""
        self.follow = follow
        if window_s is not None:
            self.window_s = float(window_s)

    def set_telemetry(self, telemetry: RunTelemetry | None) -> None:
        """Show another run: clears the curves and draws it from scratch at the next redraw."""
        if telemetry is self._telemetry:
            return
        self._telemetry = telemetry
        for curves in self.gpu_curves.values():
            for curve in curves.values():
                curve.getViewBox() and curve.getViewBox().removeItem(curve)
        self.gpu_curves.clear()
        self.plots["util"].legend.clear()
        for item in self._marker_items:
            vb = item.getViewBox()
            if vb is not None:
                vb.removeItem(item)
        self._marker_items.clear()
        self._markers_drawn = 0
        for curve in (self.tokens_curve, self.loss_curve, self.eval_curve, self.spend_curve):
            curve.setData([], [])
        self.capacity_line.setVisible(False)
        self._capacity = 0.0
        self._x_range = None
        self.plots["mem"].enableAutoRange(y=True)
        self.budget_line.setVisible(False)
        self.plan_line.setVisible(False)
        self._drawn_version = -1
        self._drawn_mode = None

    @property
    def telemetry(self) -> RunTelemetry | None:
        return self._telemetry

    # -- drawing -------------------------------------------------------------------------------
    def _set_titles(self, tel: RunTelemetry) -> None:
        sim = " (SIMULATED: no GPU)" if tel.simulated else ""
        titles = {key: title for key, title in self.PLOTS}
        titles["util"] = "GPU utilisation (% of time a kernel ran)" + (", dashed: SM active" if tel.sm_reported else "") + sim
        titles["mem"] = "GPU memory used vs capacity (GiB)" + sim
        titles["power"] = "Power (W)" + sim
        if not tel.price_per_gpu_hour and not tel.budget_usd and not (tel.spend_usd() or 0):
            titles["spend"] = "Spend (USD): no price set for this host"
        elif tel.budget_usd:
            titles["spend"] = "Spend (USD) against budget"
        for key, title in titles.items():
            if self._titles.get(key) != title:
                self._titles[key] = title
                self.plots[key].setTitle(title)

    def _curves_for(self, key: tuple[str, int]) -> dict[str, pg.PlotDataItem]:
        curves = self.gpu_curves.get(key)
        if curves is None:
            color = GPU_COLORS[len(self.gpu_curves) % len(GPU_COLORS)]
            node, index = key
            name = f"GPU {index}" + (f" ({node})" if node and len({k[0] for k in self.gpu_curves} | {node}) > 1 else "")
            curves = {  # a legend only while it stays small; colours follow GPU order
                "util": self.plots["util"].plot(pen=_pen(color), name=name if len(self.gpu_curves) < 2 else None),
                "mem": self.plots["mem"].plot(pen=_pen(color)),
                "power": self.plots["power"].plot(pen=_pen(color)),
            }
            self.gpu_curves[key] = curves
        return curves

    def _sm_curve(self, key: tuple[str, int]) -> pg.PlotDataItem:
        curves = self._curves_for(key)
        if "sm" not in curves:
            color = GPU_COLORS[(list(self.gpu_curves).index(key)) % len(GPU_COLORS)]
            curves["sm"] = self.plots["util"].plot(pen=_pen(color, dashed=True),
                                                   name="SM active" if key == min(self.gpu_curves) else None)
        return curves["sm"]

    def redraw(self, telemetry: RunTelemetry | None = None, *, force: bool = False) -> bool:
        """Push the newest data into the curves and move the x window. Returns whether it drew."""
        if telemetry is not None:
            self.set_telemetry(telemetry)
        tel = self._telemetry
        if tel is None:
            return False
        mode = (self.follow, self.window_s)
        if not force and tel.version == self._drawn_version and mode == self._drawn_mode:
            return False
        for key in tel.gpu_keys:
            buf = tel.gpus[key]
            curves = self._curves_for(key)
            x = buf.view("x")
            curves["util"].setData(x, buf.view("util"))
            curves["mem"].setData(x, buf.view("mem_used_gib"))
            curves["power"].setData(x, buf.view("power_w"))
            if tel.sm_reported:
                self._sm_curve(key).setData(x, buf.view("sm_active"))
        capacity = max((b.last("mem_total_gib") or 0.0 for b in tel.gpus.values()), default=0.0)
        if capacity > 0 and capacity != self._capacity:
            self._capacity = capacity
            self.capacity_line.setVisible(True)  # first: a hidden line's label ignores value changes
            self.capacity_line.setValue(capacity)
            self.plots["mem"].enableAutoRange(y=False)  # memory is drawn against capacity: a fixed scale
            self.plots["mem"].setYRange(0.0, capacity * 1.08, padding=0)
        steps = tel.steps
        if len(steps):
            sx = steps.view("x")
            self.tokens_curve.setData(sx, steps.view("tokens_per_s"))
            self.loss_curve.setData(sx, steps.view("loss"))
            self.spend_curve.setData(sx, steps.view("spend_usd"))
        if len(tel.evals):
            self.eval_curve.setData(tel.evals.view("x"), tel.evals.view("eval_loss"))
        for line, value in ((self.budget_line, tel.budget_usd), (self.plan_line, tel.planned_cost_usd)):
            if value:
                line.setVisible(True)
                line.setValue(value)
        self._set_titles(tel)
        while self._markers_drawn < len(tel.markers):
            marker = tel.markers[self._markers_drawn]
            self._markers_drawn += 1
            for key, plot in self.plots.items():
                line = pg.InfiniteLine(pos=marker.x, angle=90, movable=False,
                                       pen=_pen(MARKER_COLORS.get(marker.kind, "#7f7f7f"), dashed=True),
                                       label=marker.kind if key == "util" and marker.kind != "checkpoint" else None,
                                       labelOpts={"position": 0.92, "color": MARKER_COLORS.get(marker.kind, "#555"),
                                                  "rotateAxis": (1, 0)})
                line.setToolTip(marker.label)
                plot.addItem(line, ignoreBounds=True)
                self._marker_items.append(line)
        end = max(tel.elapsed_s(), 1.0)
        if self.follow:
            start = max(0.0, end - self.window_s)
            x_range = (start, max(end, start + min(self.window_s, 60.0)))
        else:
            # the full history grows in steps of ~2% so axes and transforms stay put between steps
            step = _nice_step(end * 0.02)
            x_range = (0.0, math.ceil(end / step) * step)
        if x_range != self._x_range:
            self._x_range = x_range
            self.plots["util"].setXRange(*x_range, padding=0)
        self._drawn_version = tel.version
        self._drawn_mode = mode
        return True

    def curve_lengths(self) -> dict[str, int]:
        """Points held by each curve family (for tests and diagnostics)."""
        out = {"tokens": len(self.tokens_curve.xData if self.tokens_curve.xData is not None else []),
               "loss": len(self.loss_curve.xData if self.loss_curve.xData is not None else []),
               "spend": len(self.spend_curve.xData if self.spend_curve.xData is not None else [])}
        for key, curves in self.gpu_curves.items():
            util = curves["util"].xData
            out[f"gpu{key[1]}"] = 0 if util is None else len(util)
        return out


def synthetic_telemetry(gpus: int = 8, samples: int = 86_400, *, seed: int = 0) -> RunTelemetry:
    """A run with ``gpus`` GPUs and ``samples`` 1 Hz samples each, plus steps, for benchmarks and tests."""
    rng = np.random.default_rng(seed)
    tel = RunTelemetry(None, gpu_capacity=max(samples, 1))
    x = np.arange(samples, dtype=np.float64)
    tel.t0, tel.last_t = 0.0, float(samples - 1)
    from gpuplanner.ui.ring_buffer import RingBuffer
    from gpuplanner.ui.run_telemetry import GPU_COLUMNS

    for i in range(gpus):
        util = np.clip(85 + 10 * np.sin(x / 900 + i) + rng.normal(0, 4, samples), 0, 100)
        rows = np.column_stack([x, util, np.full(samples, np.nan), 60 + 8 * np.sin(x / 3000 + i),
                                np.full(samples, 80.0), 300 + 3 * util])
        buf = RingBuffer(GPU_COLUMNS, samples, initial=samples)
        buf.extend(rows)
        tel.gpus[("", i)] = buf
    n_steps = samples // 2
    sx = x[::2][:n_steps]
    tel.steps.extend(np.column_stack([sx, np.arange(n_steps), 3.0 * np.exp(-sx / 30000) + 1 + rng.normal(0, .05, n_steps),
                                      5e4 + rng.normal(0, 2e3, n_steps), sx / 3600 * 8 * 2.5,
                                      np.full(n_steps, 2.0), np.full(n_steps, 0.05)]))
    tel.steps_total = n_steps * 2
    tel.budget_usd, tel.planned_cost_usd = 500.0, 450.0
    tel.version += 1
    return tel
