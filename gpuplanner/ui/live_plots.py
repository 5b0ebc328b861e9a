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
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QGraphicsItem, QVBoxLayout, QWidget

from gpuplanner.ui.ring_buffer import Curves, PeakDecimator, RingBuffer
from gpuplanner.ui.run_telemetry import RunTelemetry

GPU_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKER_COLORS = {"checkpoint": "#2ca02c", "preempted": "#d62728", "resumed": "#1f77b4"}
DEFAULT_WINDOW_S = 600.0


class ElapsedAxis(pg.AxisItem):
    """Seconds since the run started, written as m:ss or h:mm:ss, ticked at round times (every 15 min,
    not every 1,000 s)."""

    TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.enableAutoSIPrefix(False)

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802 (Qt naming)
        span = maxVal - minVal
        if span <= 0 or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)
        return [(self.major_step(span, size), 0.0)]

    @classmethod
    def major_step(cls, span: float, size: float) -> float:
        """Seconds between labelled ticks for ``span`` seconds over ``size`` pixels."""
        target = span * 90.0 / size  # a labelled tick every ~90 px at most
        major = next((step for step in cls.TIME_STEPS if step >= target), None)
        if major is None:
            major = 86400.0 * _nice_step(target / 86400.0)
        return float(major)

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


GPU_CURVES = ("util", "mem", "power", "sm")  # a GPU's curves, drawn from these buffer columns:
GPU_SERIES = ("util", "mem_used_gib", "power_w", "sm_active")
STEP_SERIES = ("tokens_per_s", "loss", "spend_usd")  # tokens_curve, loss_curve, spend_curve


def _set_curve(curve: pg.PlotDataItem | pg.PlotCurveItem, x: np.ndarray, y: np.ndarray) -> None:
    """New data for a line: pyqtgraph's finite check is skipped unless there are NaNs (drawn as gaps)."""
    finite = not np.isnan(y).any()
    curve.setData(x, y, connect="all" if finite else "finite", skipFiniteCheck=finite)


class _TimeGrid(pg.GraphicsObject):
    """Vertical grid lines at the bottom axis's ticks, drawn in the ViewBox's own (pixel) coordinates by
    one light item: the AxisItem's grid would re-run the axis' tick layout and picture for every plot at
    every frame of a scrolling window, where only the bottom row shows the tick labels."""

    def __init__(self, view: pg.ViewBox) -> None:
        super().__init__(view)
        self._view = view
        self._pen = QPen(QColor(150, 150, 150, 51))
        self._pen.setCosmetic(True)
        self.setZValue(-100)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresParentOpacity)

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt naming)
        return self._view.boundingRect()

    def paint(self, painter: QPainter, *args) -> None:
        rect = self._view.boundingRect()
        (x0, x1), _ = self._view.viewRange()
        width = rect.width()
        if x1 <= x0 or width <= 0:
            return
        step = ElapsedAxis.major_step(x1 - x0, width)
        ticks = np.arange(math.ceil(x0 / step) * step, x1 + step * 1e-9, step)
        px = rect.left() + (ticks - x0) * (width / (x1 - x0))
        painter.setPen(self._pen)
        top, bottom = rect.top(), rect.bottom()
        for p in px:
            painter.drawLine(QPointF(float(p), top), QPointF(float(p), bottom))


class _LiveEnds(pg.GraphicsObject):
    """The live parts (see :class:`_Line`) of every line of one plot, drawn by one item: for a few
    points per line pyqtgraph's per-item overhead (bounds, path building, paint setup) would cost more
    than the drawing."""

    def __init__(self) -> None:
        super().__init__()
        self._lines: dict[int, tuple[QPen, list[QPolygonF], QRectF]] = {}
        self._rect = QRectF()

    def set_points(self, owner: int, pen: QPen, x: np.ndarray, y: np.ndarray) -> None:
        polys, rect = [], QRectF()
        finite = np.isfinite(x) & np.isfinite(y)
        if finite.any():
            # runs of finite points (a NaN is a gap)
            edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.astype(np.int8), [0]))))
            for a, b in zip(edges[0::2], edges[1::2]):
                poly = pg.functions.create_qpolygonf(int(b - a))  # filled through a numpy view
                pts = pg.functions.ndarray_from_qpolygonf(poly)
                pts[:, 0], pts[:, 1] = x[a:b], y[a:b]
                polys.append(poly)
            fx, fy = x[finite], y[finite]
            rect = QRectF(float(fx.min()), float(fy.min()), float(fx.max() - fx.min()), float(fy.max() - fy.min()))
        if not polys and owner not in self._lines:
            return
        self.prepareGeometryChange()
        if polys:
            self._lines[owner] = (pen, polys, rect)
        else:
            self._lines.pop(owner, None)
        self._rect = QRectF()
        for _pen, _polys, r in self._lines.values():
            self._rect = self._rect.united(r) if not self._rect.isNull() else r
        self.update()

    def clear(self) -> None:
        self.prepareGeometryChange()
        self._lines.clear()
        self._rect = QRectF()
        self.update()

    def points(self, owner: int) -> tuple[np.ndarray, np.ndarray]:
        entry = self._lines.get(owner)
        pts = [(pt.x(), pt.y()) for poly in (entry[1] if entry else []) for pt in poly]
        return np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt naming)
        if self._rect.isNull() and not self._lines:
            return QRectF()
        px, py = abs(self.pixelWidth() or 0.0), abs(self.pixelHeight() or 0.0)
        return self._rect.adjusted(-2 * px, -2 * py, 2 * px, 2 * py)  # room for the 1 px pen

    def paint(self, painter: QPainter, *args) -> None:
        for pen, polys, _rect in self._lines.values():
            painter.setPen(pen)
            for poly in polys:
                painter.drawPolyline(poly)


class _Line:
    """One series drawn in two parts with the same pen: ``body``, the settled part (complete buckets of
    the decimated history: new data only when a bucket completes or leaves the window), and the live
    parts, which change at any frame (the open bucket and the newest sample, and the oldest bucket
    while the ring buffer drops rows from it), joined to the body's ends and drawn by the plot's
    :class:`_LiveEnds`. So a frame rebuilds a few points per line, not the whole path."""

    def __init__(self, plot: pg.PlotItem, pen: QPen, name: str | None = None) -> None:
        self.plot = plot
        self.pen = pen
        self.body = plot.plot(pen=pen, name=name)
        self.live = getattr(plot, "_live_ends", None)
        if self.live is None:
            self.live = plot._live_ends = _LiveEnds()
            plot.addItem(self.live)
        self._key: tuple | None = None

    def set(self, curves: Curves, row: int) -> None:
        x, y, head, settled = curves.x, curves.ys[row], curves.head, curves.settled
        if curves.settled_key is None or curves.settled_key != self._key:
            _set_curve(self.body, x[head:settled], y[head:settled])
            self._key = curves.settled_key
        if settled <= head:  # no body: everything is live
            lx, ly = x, y
        else:
            parts = []
            if head:
                parts.append((x[:head + 1], y[:head + 1]))  # the head, joined to the body's first point
            if settled < len(x):
                if parts:  # a gap between the head and the tail pieces
                    parts.append((x[settled - 1:settled], np.array([np.nan])))
                parts.append((x[settled - 1:], y[settled - 1:]))  # the body's last point, then the tail
            lx = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
            ly = np.concatenate([p[1] for p in parts]) if parts else np.empty(0)
        self.live.set_points(id(self), self.pen, lx, ly)

    def clear(self) -> None:
        self.body.setData([], [])
        self.live.set_points(id(self), self.pen, np.empty(0), np.empty(0))
        self._key = None

    def remove(self) -> None:
        self.live.set_points(id(self), self.pen, np.empty(0), np.empty(0))
        self.plot.removeItem(self.body)

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point drawn (body and live parts, joins and gaps included), sorted by x; for tests."""
        xs, ys = [], []
        for x, y in (self.body.getData(), self.live.points(id(self))):
            if x is not None and len(x):
                xs.append(np.asarray(x, dtype=float))
                ys.append(np.asarray(y, dtype=float))
        if not xs:
            return np.empty(0), np.empty(0)
        x, y = np.concatenate(xs), np.concatenate(ys)
        order = np.argsort(x, kind="stable")
        return x[order], y[order]


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
        self._decimators: dict[int, PeakDecimator] = {}  # by id() of the ring buffer they summarise
        self._signatures: dict[object, tuple] = {}  # what each curve family was last drawn from
        self.graphics = pg.GraphicsLayoutWidget(self)
        self.graphics.setBackground("w")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics)
        self.plots: dict[str, pg.PlotItem] = {}
        self._grids: list[_TimeGrid] = []
        for i, (key, title) in enumerate(self.PLOTS):
            plot = self.graphics.addPlot(row=i // 2, col=i % 2, title=title,
                                         axisItems={"bottom": ElapsedAxis(orientation="bottom")})
            plot.setDownsampling(auto=True, mode="peak")
            plot.setClipToView(True)
            plot.showGrid(x=False, y=True, alpha=0.2)
            self._grids.append(_TimeGrid(plot.getViewBox()))
            plot.setMenuEnabled(False)
            plot.enableAutoRange(x=False, y=True)
            plot.setAutoVisible(y=True)
            plot.getViewBox().setMouseEnabled(x=False, y=False)
            if self.plots:
                plot.setXLink(self.plots["util"])
            if i < len(self.PLOTS) - 2:  # x axes only under the bottom row (the x ranges are linked)
                plot.hideAxis("bottom")
            for axis in ("left", "bottom"):  # repaint axes from a pixmap unless their range changed
                plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.plots[key] = plot
        self.plots["util"].setYRange(0, 100)
        self.plots["util"].enableAutoRange(y=False)
        self.plots["util"].addLegend(offset=(-5, -5), labelTextSize="7pt", colCount=5, brush=(255, 255, 255, 210),
                                     horSpacing=8)
        self._titles: dict[str, str] = {}
        self.gpu_curves: dict[tuple[str, int], dict[str, _Line]] = {}
        self.capacity_line = pg.InfiniteLine(angle=0, pen=_pen("#d62728", dashed=True), movable=False,
                                             label="capacity {value:.1f} GiB",
                                             labelOpts={"position": 0.05, "color": "#d62728", "anchors": [(0, 0), (0, 0)]})
        self.capacity_line.setVisible(False)
        self.plots["mem"].addItem(self.capacity_line, ignoreBounds=False)
        self.tokens_curve = _Line(self.plots["tokens"], _pen("#1f77b4"))
        self.loss_curve = _Line(self.plots["loss"], _pen("#1f77b4"), name="train")
        self.eval_curve = self.plots["loss"].plot(pen=None, symbol="o", symbolSize=5, symbolBrush="#ff7f0e",
                                                  symbolPen=None, name="eval")
        self.spend_curve = _Line(self.plots["spend"], _pen("#2ca02c"))
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
            for line in curves.values():
                line.remove()
        self.gpu_curves.clear()
        self.plots["util"].legend.clear()
        for item in self._marker_items:
            vb = item.getViewBox()
            if vb is not None:
                vb.removeItem(item)
        self._marker_items.clear()
        self._markers_drawn = 0
        for line in (self.tokens_curve, self.loss_curve, self.spend_curve):
            line.clear()
        self.eval_curve.setData([], [])
        self.capacity_line.setVisible(False)
        self._capacity = 0.0
        self._x_range = None
        self.plots["mem"].enableAutoRange(y=True)
        self.budget_line.setVisible(False)
        self.plan_line.setVisible(False)
        self._drawn_version = -1
        self._drawn_mode = None
        self._decimators.clear()
        self._signatures.clear()

    @property
    def telemetry(self) -> RunTelemetry | None:
        return self._telemetry

    # -- drawing -------------------------------------------------------------------------------
    def _set_titles(self, tel: RunTelemetry) -> None:
        sim = " (sim.)" if tel.simulated else ""  # the pane's badge says SIMULATED in full
        titles = {key: title for key, title in self.PLOTS}
        titles["util"] = "GPU utilisation (% time a kernel ran)" + ("; dashed: SM active" if tel.sm_reported else "") + sim
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
            curves = {  # colours follow GPU order; the legend (bottom right, below busy GPUs) names them
                "util": _Line(self.plots["util"], _pen(color), name=name),
                "mem": _Line(self.plots["mem"], _pen(color)),
                "power": _Line(self.plots["power"], _pen(color)),
            }
            self.gpu_curves[key] = curves
        return curves

    def _sm_curve(self, key: tuple[str, int]) -> _Line:
        curves = self._curves_for(key)
        if "sm" not in curves:
            color = GPU_COLORS[(list(self.gpu_curves).index(key)) % len(GPU_COLORS)]
            curves["sm"] = _Line(self.plots["util"], _pen(color, dashed=True),
                                 name="SM active" if key == min(self.gpu_curves) else None)
        return curves["sm"]

    def _window(self, tel: RunTelemetry) -> tuple[float, float, float]:
        """The x range to show and the decimation bucket (seconds) for it."""
        end = max(tel.elapsed_s(), 1.0)
        if self.follow:
            start = max(0.0, end - self.window_s)
            x_range = (start, max(end, start + min(self.window_s, 60.0)))
            span = self.window_s
        else:
            # the full history grows in steps of ~2% so axes and transforms stay put between steps
            step = _nice_step(end * 0.02)
            x_range = (0.0, math.ceil(end / step) * step)
            span = x_range[1]
        # one bucket per pixel column or so, rounded to a power of two so the bucket grid (and the
        # decimators' summaries) only change when the span grows by ~40%, not at every range step
        bucket = 2.0 ** round(math.log2(max(span, 1e-9) / self._pixel_width()))
        return x_range[0], x_range[1], bucket

    def _pixel_width(self) -> int:
        return max(int(self.plots["util"].getViewBox().width()), 100)

    def _decimator(self, buffer: RingBuffer, columns: tuple[str, ...]) -> PeakDecimator:
        dec = self._decimators.get(id(buffer))
        if dec is None or dec.buffer is not buffer:
            dec = self._decimators[id(buffer)] = PeakDecimator(buffer, columns)
        return dec

    def _apply_mode(self) -> None:
        """Plot settings for the mode. A scrolling window moves the x range at every frame: the curves
        hold only the window (and at most a chunk before it, see :meth:`PeakDecimator.curves`) at about
        a point per pixel column, so clip-to-view and auto downsampling would only re-cut every curve
        (and rebuild its path) at each frame, and a bottom axis (which also draws
        the vertical grid lines over the whole plot) would re-render its cache pixmap each time."""
        cache = QGraphicsItem.CacheMode.NoCache if self.follow else QGraphicsItem.CacheMode.DeviceCoordinateCache
        for plot in self.plots.values():
            plot.setClipToView(not self.follow)
            plot.setDownsampling(auto=not self.follow, mode="peak")  # the window is already ~1 point/px
            plot.getAxis("bottom").setCacheMode(cache)

    def _changed(self, name: object, signature: tuple) -> bool:
        if self._signatures.get(name) == signature:
            return False
        self._signatures[name] = signature
        return True

    def redraw(self, telemetry: RunTelemetry | None = None, *, force: bool = False) -> bool:
        """Push the newest data into the curves and move the x window. Returns whether it drew.

        Each series is peak-decimated (:class:`PeakDecimator`) to about two points per pixel column of
        the x window, so a frame costs the same for a minute or a day of samples, and only curves whose
        buffer or window changed get new data."""
        if telemetry is not None:
            self.set_telemetry(telemetry)
        tel = self._telemetry
        if tel is None:
            return False
        mode = (self.follow, self.window_s)
        if force:
            self._signatures.clear()
        elif tel.version == self._drawn_version and mode == self._drawn_mode:
            return False
        if mode != self._drawn_mode:
            self._apply_mode()
        x_lo, x_hi, bucket = self._window(tel)
        max_raw = 2 * self._pixel_width()
        window = (x_lo, x_hi, bucket, max_raw)
        if (x_lo, x_hi) != self._x_range:
            self._x_range = (x_lo, x_hi)
            self.plots["util"].setXRange(x_lo, x_hi, padding=0)
            for grid in self._grids:
                grid.update()
        for key in tel.gpu_keys:
            buf = tel.gpus[key]
            curves = self._curves_for(key)
            if tel.sm_reported:
                self._sm_curve(key)
            if not self._changed(key, (buf.version, tel.sm_reported, window)):
                continue
            decimated = self._decimator(buf, GPU_SERIES).curves(*window)
            for row, name in enumerate(GPU_CURVES):
                if name in curves:
                    curves[name].set(decimated, row)
        capacity = max((b.last("mem_total_gib") or 0.0 for b in tel.gpus.values()), default=0.0)
        if capacity > 0 and capacity != self._capacity:
            self._capacity = capacity
            self.capacity_line.setVisible(True)  # first: a hidden line's label ignores value changes
            self.capacity_line.setValue(capacity)
            self.plots["mem"].enableAutoRange(y=False)  # memory is drawn against capacity: a fixed scale
            self.plots["mem"].setYRange(0.0, capacity * 1.08, padding=0)
        steps = tel.steps
        if len(steps) and self._changed("steps", (steps.version, window)):
            decimated = self._decimator(steps, STEP_SERIES).curves(*window)
            for row, line in enumerate((self.tokens_curve, self.loss_curve, self.spend_curve)):
                line.set(decimated, row)
        if len(tel.evals) and self._changed("evals", (tel.evals.version,)):
            self.eval_curve.setData(tel.evals.view("x").copy(), tel.evals.view("eval_loss").copy())
        for line, value in ((self.budget_line, tel.budget_usd), (self.plan_line, tel.planned_cost_usd)):
            if value and self._changed(line, (value,)):
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
        self._drawn_version = tel.version
        self._drawn_mode = mode
        return True

    def curve_lengths(self) -> dict[str, int]:
        """Points drawn by each curve family (for tests and diagnostics)."""
        out = {name: len(line.points()[0]) for name, line in
               (("tokens", self.tokens_curve), ("loss", self.loss_curve), ("spend", self.spend_curve))}
        for key, curves in self.gpu_curves.items():
            out[f"gpu{key[1]}"] = len(curves["util"].points()[0])
        return out


def synthetic_telemetry(gpus: int = 8, samples: int = 86_400, *, seed: int = 0) -> RunTelemetry:
    """A run with ``gpus`` GPUs and ``samples`` 1 Hz samples each, plus steps, for benchmarks and tests."""
    rng = np.random.default_rng(seed)
    tel = RunTelemetry(None, gpu_capacity=max(samples, 1))
    x = np.arange(samples, dtype=np.float64)
    tel.t0, tel.last_t = 0.0, float(samples - 1)
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
