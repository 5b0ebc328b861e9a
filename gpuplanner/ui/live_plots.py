"""Live plots of one run: GPU utilisation (and SM activity), memory against capacity, power, tokens/s,
loss, and cumulative spend with the budget line; vertical markers for checkpoints, preemptions and resumes.

:class:`LivePlots` never pulls data by itself: the Runs pane's redraw timer calls :meth:`LivePlots.redraw`
with a :class:`RunTelemetry` (ring buffers) at 10-20 Hz, and it skips the work when nothing changed.
Both ranges are driven here: x (a scrolling window of the last minutes, or the full history) and y
(fitted to the points in the window, :meth:`LivePlots._fit_y`; no pyqtgraph auto-range). Each series is
peak-decimated to about a point per pixel column; the lines of a plot are drawn by two light items (the
settled bodies and the live ends, :class:`_PlotLines`), markers by one per plot (:class:`_MarkerLines`),
so a frame's cost does not grow with the number of lines' pyqtgraph items or of markers.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QGraphicsItem, QVBoxLayout, QWidget

from gpuplanner.ui.palette import is_dark
from gpuplanner.ui.ring_buffer import Curves, PeakDecimator, RingBuffer
from gpuplanner.ui.run_telemetry import Marker, RunTelemetry

GPU_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKER_COLORS = {"checkpoint": "#2ca02c", "preempted": "#d62728", "resumed": "#1f77b4", "stopped": "#7f7f7f"}
DEFAULT_WINDOW_S = 600.0
LEFT_AXIS_PX = 62
NO_PRICE = "no price set for this host\n(set one in the Hosts pane to see the spend)"
NO_GPU_SAMPLES = "no GPU samples recorded"
NO_STEPS = "no training steps recorded"


class ElapsedAxis(pg.AxisItem):
    """Seconds since the run started, written as m:ss or h:mm:ss, ticked at round times (every 15 min,
    not every 1,000 s)."""

    TIME_STEPS = (
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1200,
        1800,
        2400,
        3600,
        7200,
        10800,
        14400,
        21600,
        43200,
        86400,
    )
    TICK_PX = 70.0  # a labelled tick every ~70 px at most ("1:30:00" is ~45 px wide)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.enableAutoSIPrefix(False)
        self.scrolling = False  # set while the x range moves at every frame: see paint()
        self._text_sizes: dict[str, tuple[float, float]] = {}

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802 (Qt naming)
        span = maxVal - minVal
        if span <= 0 or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)
        return [(self.major_step(span, size), 0.0)]

    @classmethod
    def major_step(cls, span: float, size: float) -> float:
        """Seconds between labelled ticks for ``span`` seconds over ``size`` pixels."""
        target = span * cls.TICK_PX / size
        major: float | None = next((step for step in cls.TIME_STEPS if step >= target), None)
        if major is None:
            major = 86400.0 * _nice_step(target / 86400.0)
        return float(major)

    def paint(self, p, opt, widget) -> None:
        """While the view scrolls (the range changes at every frame), a bottom axis is painted directly:
        the same axis line, ticks and labels as pyqtgraph's AxisItem draws for one tick level, without
        building the draw specs and a QPicture for each frame (~1 ms per axis per frame). Otherwise
        (the still full-history range, other orientations) pyqtgraph's paint, from its cached picture."""
        if (
            not self.scrolling
            or self.orientation != "bottom"
            or self._tickLevels is not None
            or not self.style["showValues"]
            or self.logMode
            or self.grid is not False
        ):
            super().paint(p, opt, widget)
            return
        bounds = self.mapRectFromParent(self.geometry())
        x0, x1 = self.range
        width = bounds.width()
        if x1 <= x0 or width <= 0:
            return
        step = self.major_step((x1 - x0) * self.scale, width + 2.0) / self.scale  # pyqtgraph: span + 2 px
        first = math.ceil(x0 / step) * step
        scale = width / (x1 - x0)
        top = bounds.top()
        tick_len = self.style["tickLength"]
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        p.setPen(self.pen())
        p.drawLine(QPointF(bounds.left() - 1.0, top + 1.0), QPointF(bounds.right() + 1.0, top + 1.0))
        ticks = []
        v = first
        while v <= x1 + step * 1e-9:
            x = bounds.left() + (v - x0) * scale
            if bounds.left() <= x <= bounds.right():
                ticks.append((v, x))
            v += step
        tick_pen = QPen(self.tickPen())
        if tick_pen.brush().style() == Qt.BrushStyle.SolidPattern and self.style["tickAlpha"] is None:
            color = QColor(tick_pen.color())
            color.setAlpha(255)
            tick_pen.setColor(color)
        p.setPen(tick_pen)
        for _, x in ticks:
            p.drawLine(QPointF(x, top), QPointF(x, top + tick_len))
        font = self.style["tickFont"]
        if font is not None:
            p.setFont(font)
        p.setPen(self.textPen())
        limit = self.boundingRect()
        p.setClipRect(limit.toAlignedRect())
        offset = max(0, tick_len) + self.style["tickTextOffset"][1]
        flags = int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextDontClip)
        strings = self.tickStrings([v for v, _ in ticks], self.scale, step)
        tallest = 0.0
        for (_, x), text in zip(ticks, strings):
            size = self._text_sizes.get(text)
            if size is None:
                br = p.boundingRect(QRectF(0, 0, 100, 100), Qt.AlignmentFlag.AlignCenter, text)
                size = self._text_sizes[text] = (br.width(), br.height() * 0.8)  # as pyqtgraph measures
                if len(self._text_sizes) > 512:
                    self._text_sizes.clear()
            w, h = size
            tallest = max(tallest, h)
            rect = QRectF(x - w / 2.0, top + offset, w, h)
            if limit & rect != rect:
                continue
            p.drawText(rect, flags, text)
        if tallest:
            self._updateMaxTextSize(tallest)

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


class _MarkerLines(pg.GraphicsObject):
    """The vertical dashed marker lines (checkpoints, preemptions, resumes) of one plot, drawn by one item
    in the ViewBox's own (pixel) coordinates, only those in the x range. An InfiniteLine per marker and
    plot made every view change call back into Python for each (a day-long run checkpointing every
    10 minutes has ~150 markers, ~900 lines on six plots: ~30 ms per frame). Hovering near a line shows
    its marker's label as the tooltip."""

    HOVER_PX = 4.0

    def __init__(self, view: pg.ViewBox) -> None:
        super().__init__(view)
        self._view = view
        self.markers: list[Marker] = []
        self._xs = np.empty(0)
        self._pens = {kind: _pen(color, dashed=True) for kind, color in MARKER_COLORS.items()}
        self._other_pen = _pen("#7f7f7f", dashed=True)
        self.setZValue(0.5)  # over the curves (the ViewBox's child group), under the legend
        self.setAcceptHoverEvents(True)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)

    def set_markers(self, markers: list[Marker]) -> None:
        self.markers = sorted(markers, key=lambda m: m.x)
        self._xs = np.array([m.x for m in self.markers], dtype=float)
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt naming)
        return self._view.boundingRect()

    def _visible(self) -> tuple[int, int, float, float, QRectF]:
        rect = self._view.boundingRect()
        (x0, x1), _ = self._view.viewRange()
        if x1 <= x0 or not len(self._xs):
            return 0, 0, x0, 0.0, rect
        a = int(np.searchsorted(self._xs, x0, side="left"))
        b = int(np.searchsorted(self._xs, x1, side="right"))
        return a, b, x0, rect.width() / (x1 - x0), rect

    def pixel_positions(self) -> list[tuple[Marker, float]]:
        """The markers in the x range and their x in the ViewBox's coordinates."""
        a, b, x0, scale, rect = self._visible()
        return [(m, rect.left() + (m.x - x0) * scale) for m in self.markers[a:b]]

    def paint(self, painter: QPainter, *args) -> None:
        shown = self.pixel_positions()
        if not shown:
            return
        rect = self._view.boundingRect()
        top, bottom = rect.top(), rect.bottom()
        by_kind: dict[str, list[QLineF]] = {}
        for marker, px in shown:
            by_kind.setdefault(marker.kind, []).append(QLineF(px, top, px, bottom))
        for kind, lines in by_kind.items():
            painter.setPen(self._pens.get(kind, self._other_pen))
            painter.drawLines(lines)

    def hoverMoveEvent(self, event) -> None:  # noqa: N802 (Qt naming)
        x = event.pos().x()
        near = [(abs(px - x), m.label) for m, px in self.pixel_positions() if abs(px - x) <= self.HOVER_PX]
        self.setToolTip(min(near)[1] if near else "")

    def hoverLeaveEvent(self, event) -> None:  # noqa: N802 (Qt naming)
        self.setToolTip("")


def _mmss(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class _EventLabels(pg.GraphicsObject):
    """The labels of the preemption and resume markers at the top of one plot, laid out in the ViewBox's
    own (pixel) coordinates at every paint, so they stay readable at any zoom: events closer than
    :attr:`MERGE_PX` share one label ("preempted → resumed after 1:20", each word in its marker's colour),
    and a label that would overlap another goes one row lower. Each label has a light background so the
    lines under it do not run through the text; it starts just right of its (first) marker, or ends just
    left of its (last) marker where it would run out of the plot."""

    MERGE_PX = 12.0  # markers closer than this look like one line: one label for them
    GREY = "#555555"  # the words between the kinds; painted in the palette's muted text colour
    GAP_PX = 3.0  # between a marker and its label
    SPACING_PX = 6.0  # between two labels in a row
    PAD_X, PAD_Y = 3.0, 1.0

    def __init__(self, view: pg.ViewBox) -> None:
        super().__init__(view)
        self._view = view
        self._events: list[Marker] = []
        self.font = QFont()
        self.font.setPointSizeF(8.0)
        self._metrics = QFontMetricsF(self.font)
        self._background = QColor(255, 255, 255, 235)
        self._muted = QColor(self.GREY)
        self._border = QPen(QColor(160, 160, 160, 160))
        self._border.setCosmetic(True)
        self.setZValue(1000)  # above the curves (the ViewBox's child group)

    def set_events(self, events: list[Marker]) -> None:
        self._events = sorted(events, key=lambda m: m.x)
        self.update()

    def clear(self) -> None:
        self.set_events([])

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt naming)
        return self._view.boundingRect()

    @staticmethod
    def segments(events: list[Marker]) -> list[tuple[str, str]]:
        """The text of one label for ``events`` (close together), as ``(text, colour)`` pieces."""
        grey = _EventLabels.GREY
        kinds = [m.kind for m in events]
        out: list[tuple[str, str]] = []
        if len(kinds) <= 3:
            for i, kind in enumerate(kinds):
                if i:
                    out.append((" → ", grey))
                out.append((kind, MARKER_COLORS.get(kind, grey)))
            if kinds == ["preempted", "resumed"]:
                out.append((f" after {_mmss(events[1].x - events[0].x)}", grey))
            return out
        counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
        for i, (kind, n) in enumerate(counts.items()):
            out.append((", " if i else f"{len(kinds)} events: ", grey))
            out.append((f"{n}× {kind}", MARKER_COLORS.get(kind, grey)))
        return out

    def layout(self) -> list[tuple[QRectF, list[tuple[str, str]]]]:
        """``(rect, pieces)`` of every label shown, rects in the ViewBox's coordinates (pixels)."""
        rect = self._view.boundingRect()
        (x0, x1), _ = self._view.viewRange()
        if not self._events or x1 <= x0 or rect.width() <= 0:
            return []
        scale = rect.width() / (x1 - x0)
        px = [rect.left() + (m.x - x0) * scale for m in self._events]
        clusters: list[list[int]] = []
        for i, p in enumerate(px):
            if clusters and p - px[clusters[-1][-1]] < self.MERGE_PX:
                clusters[-1].append(i)
            else:
                clusters.append([i])
        height = self._metrics.height() + 2 * self.PAD_Y
        rows: list[list[tuple[float, float]]] = []
        out = []
        for cluster in clusters:
            first, last = px[cluster[0]], px[cluster[-1]]
            if last < rect.left() or first > rect.right():
                continue  # scrolled out of the window
            pieces = self.segments([self._events[i] for i in cluster])
            width = sum(self._metrics.horizontalAdvance(text) for text, _ in pieces) + 2 * self.PAD_X
            left = first + self.GAP_PX
            if left + width > rect.right():
                left = last - self.GAP_PX - width
            left = max(rect.left(), min(left, rect.right() - width))
            right = left + width
            row = 0
            while row < len(rows) and any(
                left < b + self.SPACING_PX and a < right + self.SPACING_PX for a, b in rows[row]
            ):
                row += 1
            if row == len(rows):
                rows.append([])
            rows[row].append((left, right))
            top = rect.top() + 2.0 + row * (height + 2.0)
            out.append((QRectF(left, top, width, height), pieces))
        return out

    def set_colors(self, background: QColor, muted: QColor) -> None:
        """The labels' background and the colour of their connecting words (light or dark palette)."""
        self._background = QColor(background)
        self._background.setAlpha(235)
        self._muted = QColor(muted)
        self.update()

    def strip_height(self) -> float:
        """Pixels from the top of the view that the labels shown now take (0 without labels)."""
        labels = self.layout()
        if not labels:
            return 0.0
        return max(rect.bottom() for rect, _ in labels) - self._view.boundingRect().top() + 2.0

    def paint(self, painter: QPainter, *args) -> None:
        labels = self.layout()
        if not labels:
            return
        painter.setFont(self.font)
        ascent = self._metrics.ascent()
        for rect, pieces in labels:
            painter.setPen(self._border)
            painter.setBrush(self._background)
            painter.drawRect(rect)
            x = rect.left() + self.PAD_X
            for text, color in pieces:
                painter.setPen(self._muted if color == self.GREY else QColor(color))
                painter.drawText(QPointF(x, rect.top() + self.PAD_Y + ascent), text)
                x += self._metrics.horizontalAdvance(text)


def _polylines(x: np.ndarray, y: np.ndarray) -> tuple[list[QPolygonF], tuple[float, float, float, float] | None]:
    """Polylines through the points (a NaN is a gap between two of them), filled through numpy views of the
    polygons, and the bounds ``(x0, x1, y0, y1)`` of the finite points (``None``: none)."""
    finite = np.isfinite(y) & np.isfinite(x)
    if finite.all():
        runs = [(0, len(x))] if len(x) else []
        fx, fy = x, y
    else:
        if not finite.any():
            return [], None
        edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.astype(np.int8), [0]))))
        runs = list(zip(edges[0::2].tolist(), edges[1::2].tolist()))
        fx, fy = x[finite], y[finite]
    if not runs:
        return [], None
    polys = []
    for a, b in runs:
        poly = pg.functions.create_qpolygonf(b - a)
        pts = pg.functions.ndarray_from_qpolygonf(poly)
        pts[:, 0], pts[:, 1] = x[a:b], y[a:b]
        polys.append(poly)
    return polys, (float(fx.min()), float(fx.max()), float(fy.min()), float(fy.max()))


def break_at_gaps(x: np.ndarray, y: np.ndarray, gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` with a NaN point in the middle of each gap (``(k, 2)`` x spans) that two consecutive
    points straddle, so no line is drawn across the time a run was not running."""
    if not len(gaps) or len(x) < 2:
        return x, y
    middles = (gaps[:, 0] + gaps[:, 1]) / 2.0
    at = np.searchsorted(x, middles)
    inside = (at > 0) & (at < len(x))
    at, middles, gaps = at[inside], middles[inside], gaps[inside]
    if not len(at):
        return x, y
    straddle = (x[at - 1] <= gaps[:, 0] + 1e-9) & (x[at] >= gaps[:, 1] - 1e-9)
    at, middles = at[straddle], middles[straddle]
    if not len(at):
        return x, y
    return np.insert(x, at, middles), np.insert(np.asarray(y, dtype=float), at, np.nan)


class _PlotLines(pg.GraphicsObject):
    """Some lines of one plot, drawn by one item, each line a few polylines with its pen (a plot has one
    for the settled bodies of its lines and one for their live ends, see :class:`_Line`). One item per
    plot instead of a PlotDataItem (with its curve and scatter children) per line: a scrolling window
    moves the view at every frame, and pyqtgraph's per-item work then (view-change slots, bounds with
    pixel padding, path setup) cost more than the drawing. Hidden lines (a click on the legend) are
    skipped."""

    def __init__(self) -> None:
        super().__init__()
        # owner -> (pen, polylines, bounds (x0, x1, y0, y1)); insertion order is the drawing order
        self._lines: dict[int, tuple[QPen, list[QPolygonF], tuple[float, float, float, float]]] = {}
        self._hidden: set[int] = set()
        self._bounds: tuple[float, float, float, float] | None = None
        self._bounds_valid = True
        self._changing = False
        self.gaps = np.empty((0, 2))  # spans without a process: lines break there (set by LivePlots)

    def set_points(self, owner: int, pen: QPen, x: np.ndarray, y: np.ndarray) -> None:
        polys, bounds = _polylines(*break_at_gaps(x, y, self.gaps))
        if not polys and owner not in self._lines:
            return
        self._about_to_change()
        if bounds is not None:  # some points: polylines and their bounds
            self._lines[owner] = (pen, polys, bounds)
        else:
            del self._lines[owner]

    def set_visible(self, owner: int, visible: bool) -> None:
        if visible != (owner not in self._hidden):
            self._about_to_change()
            (self._hidden.discard if visible else self._hidden.add)(owner)

    def is_visible(self, owner: int) -> bool:
        return owner not in self._hidden

    def _about_to_change(self) -> None:
        if not self._changing:  # once per batch of changes, until Qt asks for the new bounds
            self.prepareGeometryChange()
            self.update()
            self._changing = True
        self._bounds_valid = False

    def points(self, owner: int) -> tuple[np.ndarray, np.ndarray]:
        polys = self._lines[owner][1] if owner in self._lines else []
        pts = [pg.functions.ndarray_from_qpolygonf(poly).astype(float) for poly in polys]
        if not pts:
            return np.empty(0), np.empty(0)
        both = np.concatenate(pts)
        return both[:, 0], both[:, 1]

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt naming)
        if not self._bounds_valid:
            shown = [b for owner, (_, _, b) in self._lines.items() if owner not in self._hidden]
            self._bounds = (
                None
                if not shown
                else (
                    min(b[0] for b in shown),
                    max(b[1] for b in shown),
                    min(b[2] for b in shown),
                    max(b[3] for b in shown),
                )
            )
            self._bounds_valid = True
            self._changing = False
        if self._bounds is None:
            return QRectF()
        x0, x1, y0, y1 = self._bounds
        # a flat line still needs an area (Qt skips empty rects); Qt widens update regions by 2 px itself
        ex, ey = 1e-9 * max(1.0, abs(x0), abs(x1)), 1e-9 * max(1.0, abs(y0), abs(y1))
        return QRectF(x0 - ex, y0 - ey, x1 - x0 + 2 * ex, y1 - y0 + 2 * ey)

    def paint(self, painter: QPainter, *args) -> None:
        hidden = self._hidden
        for owner, (pen, polys, _) in self._lines.items():
            if owner in hidden:
                continue
            painter.setPen(pen)
            for poly in polys:
                painter.drawPolyline(poly)


class _LegendEntry:
    """What a legend sample needs of a line (its pen; visibility, toggled by a click on the sample)."""

    def __init__(self, line: _Line) -> None:
        self.opts = {"pen": line.pen}
        self._line = line

    def isVisible(self) -> bool:  # noqa: N802 (pyqtgraph's ItemSample calls these)
        return self._line.body.is_visible(id(self._line))

    def setVisible(self, visible: bool) -> None:  # noqa: N802
        for lines in (self._line.body, self._line.live):
            lines.set_visible(id(self._line), visible)


class _Line:
    """One series, drawn in two parts with the same pen: ``body``, the settled part (complete buckets of
    the decimated history: new data only when a bucket completes or leaves the window), and the live
    parts, which change at any frame (the open bucket and the newest sample, and the oldest bucket while
    the ring buffer drops rows from it), joined to the body's ends. The plot's bodies are drawn by one
    :class:`_PlotLines`, its live ends by another, so a frame rebuilds a few points per line, not the
    whole polyline, and in the full-history view (a still x range) the bodies repaint from a pixmap."""

    def __init__(self, plot: pg.PlotItem, pen: QPen, name: str | None = None) -> None:
        self.plot = plot
        self.pen = pen
        self.body, self.live = plot._line_items  # made with the plot (LivePlots)
        self._key: tuple | None = None
        if name is not None and plot.legend is not None:
            plot.legend.addItem(_LegendEntry(self), name)

    def set(self, curves: Curves, row: int) -> None:
        x, y, head, settled = curves.x, curves.ys[row], curves.head, curves.settled
        owner = id(self)
        if curves.settled_key is None or curves.settled_key != self._key:
            self.body.set_points(owner, self.pen, x[head:settled], y[head:settled])
            self._key = curves.settled_key
        if settled <= head:  # no body: everything is live
            lx, ly = x, y
        else:
            parts = []
            if head:
                parts.append((x[: head + 1], y[: head + 1]))  # the head, joined to the body's first point
            if settled < len(x):
                if parts:  # a gap between the head and the tail pieces
                    parts.append((x[settled - 1 : settled], np.array([np.nan])))
                parts.append((x[settled - 1 :], y[settled - 1 :]))  # the body's last point, then the tail
            lx = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
            ly = np.concatenate([p[1] for p in parts]) if parts else np.empty(0)
        self.live.set_points(owner, self.pen, lx, ly)

    def forget(self) -> None:
        """Draw the settled body again at the next :meth:`set` (the gaps changed)."""
        self._key = None

    def clear(self) -> None:
        for lines in (self.body, self.live):
            lines.set_points(id(self), self.pen, np.empty(0), np.empty(0))
            lines.set_visible(id(self), True)
        self._key = None

    def remove(self) -> None:
        self.clear()

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point drawn (body and live parts, joins included, gaps not), sorted by x; for tests."""
        parts = [lines.points(id(self)) for lines in (self.body, self.live)]
        x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        order = np.argsort(x, kind="stable")
        return x[order], y[order]


def _visible_extent(curves: Curves, x_lo: float, x_hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Per series of ``curves``, the min and max (NaN-ignoring; NaN when none) of the points drawn in
    ``[x_lo, x_hi]``, plus the points just outside it, whose segments cross into the window (a bucket
    straddling the window's start has both its points at its first sample's x, before ``x_lo``)."""
    x = curves.x
    n = len(x)
    a = int(np.searchsorted(x, x_lo, side="left"))
    if a > 0:
        a = int(np.searchsorted(x, x[a - 1], side="left"))
    b = int(np.searchsorted(x, x_hi, side="right"))
    if b < n:
        b = int(np.searchsorted(x, x[b], side="right"))
    k = curves.ys.shape[0]
    if b <= a:
        return np.full(k, np.nan), np.full(k, np.nan)
    seg = curves.ys[:, a:b]
    return np.fmin.reduce(seg, axis=1), np.fmax.reduce(seg, axis=1)


def _fit_range(current: tuple[float, float] | None, lo: float, hi: float) -> tuple[float, float] | None:
    """A y range for data in ``[lo, hi]``: the current one while it holds the data and the data fill more
    than ~half of it (so the axis does not re-tick at every frame as extremes scroll by), else the data
    with 5% padding. ``None``: no finite data (keep what is shown)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return current
    span = hi - lo
    if span <= 0:
        span = abs(hi) * 0.1 or 1.0
        lo, hi = lo - span / 2, hi + span / 2
    if current is not None:
        c0, c1 = current
        if c0 <= lo and hi <= c1 and (c1 - c0) <= 1.8 * span:
            return current
    pad = 0.05 * span
    return (lo - pad, hi + pad)


def _pen(color: str, *, dashed: bool = False, width: float = 1.0):
    pen = pg.mkPen(color, width=width)
    pen.setCosmetic(True)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    return pen


class _TitleLabel(pg.LabelItem):
    """A plot title that asks for no width of its own: a long title is cut at the plot's edge instead of
    widening its column (pyqtgraph's label makes its text width the minimum width of the whole plot)."""

    def updateMin(self) -> None:  # noqa: N802 (pyqtgraph naming)
        super().updateMin()
        height = self.itemRect().height()
        self.setMinimumWidth(0)
        self._sizeHint = {
            Qt.SizeHint.MinimumSize: (0, height),
            Qt.SizeHint.PreferredSize: (0, height),
            Qt.SizeHint.MaximumSize: (-1, -1),
            Qt.SizeHint.MinimumDescent: (0, 0),
        }
        self.updateGeometry()


def _use_title_label(plot: pg.PlotItem) -> None:
    plot.layout.removeItem(plot.titleLabel)
    plot.titleLabel.setParentItem(None)
    plot.titleLabel = _TitleLabel("", size="10pt", parent=plot)
    plot.layout.addItem(plot.titleLabel, 0, 1)


# (light, dark) colours of the spend plot's line labels: >= 4.5:1 against the plot's background
LINE_LABEL_COLORS = {"budget": ("#c62828", "#ff7b7b"), "plan": ("#4d4d4d", "#c8c8c8")}


class LivePlots(QWidget):
    """Six linked plots fed from a :class:`RunTelemetry` by :meth:`redraw`."""

    PLOTS = (
        ("util", "GPU utilisation (%)"),
        ("mem", "GPU memory (GiB)"),
        ("power", "Power (W)"),
        ("tokens", "Tokens/s"),
        ("loss", "Loss"),
        ("spend", "Spend (USD)"),
    )
    COLUMNS = 3  # two rows of three: wide plots on a landscape screen, the time axis under the bottom row
    UTIL_TICKS = [[(float(v), str(v)) for v in (0, 25, 50, 75, 100)]]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_s = DEFAULT_WINDOW_S
        self.follow = True  # True: scrolling window of window_s; False: the full history
        self._telemetry: RunTelemetry | None = None
        self._drawn_version = -1
        self._drawn_mode: tuple[bool, float] | None = None
        self._markers_drawn = 0
        self._gaps_drawn: tuple = ()
        self._capacity = 0.0
        self._x_range: tuple[float, float] | None = None
        self._y_ranges: dict[str, tuple[float, float]] = {}  # set here (no pyqtgraph auto-range)
        self._extents: dict[object, tuple[np.ndarray, np.ndarray]] = {}  # visible min/max per series family
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
            plot = self.graphics.addPlot(
                row=i // self.COLUMNS, col=i % self.COLUMNS, axisItems={"bottom": ElapsedAxis(orientation="bottom")}
            )
            _use_title_label(plot)
            plot.setTitle(title)
            plot.showGrid(x=False, y=True, alpha=0.2)
            self._grids.append(_TimeGrid(plot.getViewBox()))
            plot.setMenuEnabled(False)
            plot.enableAutoRange(x=False, y=False)  # x driven here; y fitted here to the visible data
            plot.getViewBox().setMouseEnabled(x=False, y=False)
            plot._line_items = (_PlotLines(), _PlotLines())  # the settled bodies and the live ends of its lines
            for item in plot._line_items:
                plot.addItem(item)
            # x axes only under the bottom row (every plot shows the same x range, set on each view by
            # redraw: no pyqtgraph view links, whose range propagation cost more than setting six ranges);
            # hidden axes are unlinked from their view, so a range change does not re-tick them
            hidden = ("top", "right") if i >= len(self.PLOTS) - self.COLUMNS else ("top", "right", "bottom")
            for name in hidden:
                plot.hideAxis(name)
                plot.getAxis(name).unlinkFromView()
            for axis in ("left", "bottom"):  # repaint axes from a pixmap unless their range changed
                plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
                plot.getAxis(axis).enableAutoSIPrefix(False)  # no "x1e+3" offsets: the values as they are
            plot.getAxis("left").setWidth(LEFT_AXIS_PX)  # one width: the plots (and markers) line up
            self.plots[key] = plot
        self._text_color = "#1d1f23"
        self.plots["util"].setYRange(0, 100)
        self.plots["util"].getAxis("left").setTicks(self.UTIL_TICKS)  # 0-100 %, whatever room the labels take
        # the GPUs' legend in a row of its own under the plots, where it covers no data; the utilisation
        # plot adds its named lines to it (PlotItem.legend)
        self.legend_row = pg.GraphicsWidget()
        self.graphics.addItem(self.legend_row, row=len(self.PLOTS) // self.COLUMNS, col=0, colspan=self.COLUMNS)
        legend = pg.LegendItem(offset=(1, 1), labelTextSize="8pt", colCount=10, horSpacing=10)
        legend.setParentItem(self.legend_row)
        self.plots["util"].legend = legend
        self._legend_height = -1.0
        self._fit_legend_row()
        self.marker_lines = {key: _MarkerLines(plot.getViewBox()) for key, plot in self.plots.items()}
        self.event_labels = _EventLabels(self.plots["util"].getViewBox())
        self.plots["util"].getViewBox().sigResized.connect(lambda _view: self._fit_util_range())
        self._titles: dict[str, str] = {}
        self.gpu_curves: dict[tuple[str, int], dict[str, _Line]] = {}
        self.capacity_line = pg.InfiniteLine(angle=0, pen=_pen("#d62728", dashed=True), movable=False)
        self.capacity_line.setVisible(False)
        self.plots["mem"].addItem(self.capacity_line, ignoreBounds=True)
        self.tokens_curve = _Line(self.plots["tokens"], _pen("#1f77b4"))
        self.loss_curve = _Line(self.plots["loss"], _pen("#1f77b4"))
        self.eval_curve = self.plots["loss"].plot(
            pen=None, symbol="o", symbolSize=5, symbolBrush="#ff7f0e", symbolPen=None
        )
        self.spend_curve = _Line(self.plots["spend"], _pen("#2ca02c"))
        self.budget_line = pg.InfiniteLine(
            angle=0,
            pen=_pen("#d62728", dashed=True),
            movable=False,
            label="budget ${value:,.2f}",
            labelOpts={"position": 0.05, "color": "#d62728", "anchors": [(0, 0), (0, 0)]},
        )
        self.plan_line = pg.InfiniteLine(  # its label above the line at the left, where spend is still low
            angle=0,
            pen=_pen("#7f7f7f", dashed=True),
            movable=False,
            label="plan ${value:,.2f}",
            labelOpts={"position": 0.05, "color": "#555555", "anchors": [(0, 1), (0, 1)]},
        )
        for line in (self.budget_line, self.plan_line):
            line.setVisible(False)
            self.plots["spend"].addItem(line, ignoreBounds=True)
        # an empty spend axis says why it is empty (in the view's own pixels, centred at each redraw)
        self.no_price_label = pg.TextItem(NO_PRICE, anchor=(0.5, 0.5))
        self.no_price_label.setParentItem(self.plots["spend"].getViewBox())
        self.no_price_label.setVisible(False)
        spend_view = self.plots["spend"].getViewBox()
        spend_view.sigResized.connect(lambda view: self.no_price_label.setPos(view.rect().center()))
        # an empty plot says so (a run that failed before its first sample or step), not a bare axis
        self.empty_labels: dict[str, pg.TextItem] = {}
        for key, plot in self.plots.items():
            label = pg.TextItem(NO_GPU_SAMPLES if key in ("util", "mem", "power") else NO_STEPS, anchor=(0.5, 0.5))
            view = plot.getViewBox()
            label.setParentItem(view)
            label.setVisible(False)
            view.sigResized.connect(lambda v, label=label: label.setPos(v.rect().center()))
            self.empty_labels[key] = label
        self.apply_palette()

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
        self._fit_legend_row()
        for lines in self.marker_lines.values():
            lines.set_markers([])
        self._markers_drawn = 0
        self._gaps_drawn = ()
        for plot in self.plots.values():
            for plot_lines in plot._line_items:
                plot_lines.gaps = np.empty((0, 2))
        self.event_labels.clear()
        for line in (self.tokens_curve, self.loss_curve, self.spend_curve):
            line.clear()
        self.eval_curve.setData([], [])
        self.capacity_line.setVisible(False)
        self._capacity = 0.0
        self._x_range = None
        self._y_ranges = {"util": (0.0, 100.0)}
        self.plots["util"].setYRange(0.0, 100.0, padding=0)
        for key, plot in self.plots.items():  # no range left over from the run shown before
            if key != "util":
                plot.setYRange(0.0, 1.0, padding=0)
        self._extents.clear()
        self.budget_line.setVisible(False)
        self.plan_line.setVisible(False)
        self.no_price_label.setVisible(False)
        for label in self.empty_labels.values():
            label.setVisible(False)
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
        titles["util"] = "GPU utilisation (%)" + (" · dashed: SM" if tel.sm_reported else "") + sim
        capacity = f" · <span style='color:#d62728'>capacity {self._capacity:,.0f}</span>" if self._capacity else ""
        titles["mem"] = "Memory (GiB)" + capacity + sim
        titles["power"] = "Power (W)" + sim
        no_price = not tel.price_per_gpu_hour and not tel.budget_usd and not (tel.spend_usd() or 0)
        self.no_price_label.setVisible(no_price)
        no_gpus, no_steps = not tel.gpus, not len(tel.steps)
        for key, label in self.empty_labels.items():
            empty = no_gpus if key in ("util", "mem", "power") else no_steps and not (key == "spend" and no_price)
            if label.isVisible() != empty:
                label.setVisible(empty)
                label.setPos(self.plots[key].getViewBox().rect().center())
        if no_price:
            titles["spend"] = "Spend (USD): no price set for this host"
            self.no_price_label.setPos(self.plots["spend"].getViewBox().rect().center())
        elif tel.budget_usd:
            titles["spend"] = "Spend (USD) vs budget"
        for key, title in titles.items():
            if self._titles.get(key) != title:
                self._titles[key] = title
                self._set_title(key, title)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "empty_labels"):  # light/dark switched
            self.apply_palette()

    def _set_title(self, key: str, title: str) -> None:
        self.plots[key].setTitle(title, color=self._text_color)

    def apply_palette(self) -> None:
        """Background, axes and titles in the palette's colours (titles in the normal text colour)."""
        palette = self.palette()
        self._text_color = palette.color(QPalette.ColorRole.Text).name()
        self.graphics.setBackground(palette.color(QPalette.ColorRole.Base))
        for key, plot in self.plots.items():
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(self._text_color))
            self._set_title(key, self._titles.get(key, dict(self.PLOTS)[key]))
        self.no_price_label.setColor(self._text_color)
        for label in self.empty_labels.values():
            label.setColor(self._text_color)
        dark = is_dark(palette)
        self.event_labels.set_colors(palette.color(QPalette.ColorRole.Base), QColor(LINE_LABEL_COLORS["plan"][dark]))
        self.budget_line.label.setColor(LINE_LABEL_COLORS["budget"][dark])
        self.plan_line.label.setColor(LINE_LABEL_COLORS["plan"][dark])
        legend = self.plots["util"].legend
        legend.setLabelTextColor(self._text_color)
        base = QColor(palette.color(QPalette.ColorRole.Base))
        base.setAlpha(210)
        legend.setBrush(pg.mkBrush(base))

    def _curves_for(self, key: tuple[str, int]) -> dict[str, _Line]:
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
            self._fit_legend_row()
        return curves

    def _fit_legend_row(self) -> None:
        """The legend row as tall as the legend (nothing for one line or none)."""
        legend = self.plots["util"].legend
        shown = len(legend.items) >= 2  # one GPU's line needs no name
        height = float(legend.height()) + 2.0 if shown else 0.0
        if height != self._legend_height:
            self._legend_height = height
            self.legend_row.setMinimumHeight(height)
            self.legend_row.setMaximumHeight(height)
            legend.setVisible(shown)

    def _fit_util_range(self) -> None:
        """0-100 %, with a strip above 100 as tall as the preemption and resume labels need, so they never
        cover a sample (the ticks stay 0-100)."""
        height = self.plots["util"].getViewBox().rect().height()
        strip = self.event_labels.strip_height()
        top = 100.0 if strip <= 0 or height <= strip + 24 else 100.0 * height / (height - strip)
        if self._y_ranges.get("util") != (0.0, top):
            self._y_ranges["util"] = (0.0, top)
            self.plots["util"].setYRange(0.0, top, padding=0)

    def _sm_curve(self, key: tuple[str, int]) -> _Line:
        curves = self._curves_for(key)
        if "sm" not in curves:
            color = GPU_COLORS[(list(self.gpu_curves).index(key)) % len(GPU_COLORS)]
            curves["sm"] = _Line(
                self.plots["util"], _pen(color, dashed=True), name="SM active" if key == min(self.gpu_curves) else None
            )
            self._fit_legend_row()
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
        """Plot settings for the mode. A scrolling window moves the x range at every frame, and a bottom
        axis would then re-render its cache pixmap each time: no cache for them while following. (The
        lines need no clip-to-view or auto downsampling in either mode: they hold only the window, and at
        most a chunk before it, see :meth:`PeakDecimator.curves`, at about a point per pixel column.)"""
        cache = QGraphicsItem.CacheMode.NoCache if self.follow else QGraphicsItem.CacheMode.DeviceCoordinateCache
        for plot in self.plots.values():
            plot.getAxis("bottom").setCacheMode(cache)
            plot.getAxis("bottom").scrolling = self.follow
            plot._line_items[0].setCacheMode(cache)  # still x range: bodies repaint from a pixmap until they change

    def _changed(self, name: object, signature: tuple) -> bool:
        if self._signatures.get(name) == signature:
            return False
        self._signatures[name] = signature
        return True

    def _fit_y(self, tel: RunTelemetry, x_lo: float, x_hi: float) -> None:
        """Explicit y ranges from the visible points of each plot's lines (their min and max, kept by
        family as the curves are made), plus the eval points in the window (loss) and the budget and plan
        lines (spend); memory until its capacity is known. Utilisation is fixed at 0-100 %. Replaces
        pyqtgraph's auto-range, which went over every point of every item at each frame and moved the
        axes whenever an extreme scrolled by: here the range only changes when the data leave it or fill
        less than ~half of it (:func:`_fit_range`)."""
        gpu_rows = {"mem": GPU_CURVES.index("mem"), "power": GPU_CURVES.index("power")}
        wanted: dict[str, list[float]] = {key: [] for key in ("mem", "power", "tokens", "loss", "spend")}
        for key in tel.gpu_keys:
            ext = self._extents.get(key)
            if ext is not None:
                for plot, row in gpu_rows.items():
                    wanted[plot] += [ext[0][row], ext[1][row]]
        ext = self._extents.get("steps")
        if ext is not None:
            for row, plot in enumerate(("tokens", "loss", "spend")):
                wanted[plot] += [ext[0][row], ext[1][row]]
        if len(tel.evals):
            ex, ey = tel.evals.view("x"), tel.evals.view("eval_loss")
            inside = ey[(ex >= x_lo) & (ex <= x_hi)]
            if len(inside):
                wanted["loss"] += [float(np.fmin.reduce(inside)), float(np.fmax.reduce(inside))]
        wanted["spend"] += [v for v in (tel.budget_usd, tel.planned_cost_usd) if v]
        for plot_key, values in wanted.items():
            if not values or (plot_key == "mem" and self._capacity > 0):
                continue
            values_arr = np.asarray(values, dtype=float)
            current = self._y_ranges.get(plot_key)
            new = _fit_range(current, float(np.fmin.reduce(values_arr)), float(np.fmax.reduce(values_arr)))
            if new is not None and new != current:
                self._y_ranges[plot_key] = new
                self.plots[plot_key].setYRange(*new, padding=0)

    def y_range(self, key: str) -> tuple[float, float]:
        """The y range plot ``key`` shows."""
        lo, hi = self.plots[key].getViewBox().viewRange()[1]
        return float(lo), float(hi)

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
        if tuple(tel.gaps) != self._gaps_drawn:  # a new gap: every line is drawn again, broken there
            self._gaps_drawn = tuple(tel.gaps)
            gaps = np.asarray(tel.gaps, dtype=float).reshape(-1, 2)
            for plot in self.plots.values():
                for lines in plot._line_items:
                    lines.gaps = gaps
            for line in self._all_lines():
                line.forget()
            self._signatures.clear()
        x_lo, x_hi, bucket = self._window(tel)
        max_raw = 2 * self._pixel_width()
        window = (x_lo, x_hi, bucket, max_raw)
        if (x_lo, x_hi) != self._x_range:
            self._x_range = (x_lo, x_hi)
            for plot in self.plots.values():
                plot.getViewBox().setXRange(x_lo, x_hi, padding=0)
            items: list[QGraphicsItem] = [*self._grids, *self.marker_lines.values(), self.event_labels]
            for item in items:
                item.update()
        for key in tel.gpu_keys:
            buf = tel.gpus[key]
            curves = self._curves_for(key)
            if tel.sm_reported:
                self._sm_curve(key)
            if not self._changed(key, (buf.version, tel.sm_reported, window)):
                continue
            decimated = self._decimator(buf, GPU_SERIES).curves(*window)
            self._extents[key] = _visible_extent(decimated, x_lo, x_hi)
            for row, name in enumerate(GPU_CURVES):
                if name in curves:
                    curves[name].set(decimated, row)
        capacity = max((b.last("mem_total_gib") or 0.0 for b in tel.gpus.values()), default=0.0)
        if capacity > 0 and capacity != self._capacity:
            self._capacity = capacity
            self.capacity_line.setVisible(True)  # first: a hidden line's label ignores value changes
            self.capacity_line.setValue(capacity)
            self._y_ranges["mem"] = (0.0, capacity * 1.08)  # memory is drawn against capacity: a fixed scale
            self.plots["mem"].setYRange(0.0, capacity * 1.08, padding=0)
        steps = tel.steps
        if len(steps) and self._changed("steps", (steps.version, window)):
            decimated = self._decimator(steps, STEP_SERIES).curves(*window)
            self._extents["steps"] = _visible_extent(decimated, x_lo, x_hi)
            for row, line in enumerate((self.tokens_curve, self.loss_curve, self.spend_curve)):
                line.set(decimated, row)
        if len(tel.evals) and self._changed("evals", (tel.evals.version,)):
            self.eval_curve.setData(tel.evals.view("x").copy(), tel.evals.view("eval_loss").copy())
        for line, value in ((self.budget_line, tel.budget_usd), (self.plan_line, tel.planned_cost_usd)):
            if value and self._changed(line, (value,)):
                line.setVisible(True)
                line.setValue(value)
        self._fit_y(tel, x_lo, x_hi)
        self._set_titles(tel)
        if self._markers_drawn < len(tel.markers):
            self._add_markers(tel)
        self._fit_util_range()
        self._drawn_version = tel.version
        self._drawn_mode = mode
        return True

    def _all_lines(self) -> list[_Line]:
        lines = [self.tokens_curve, self.loss_curve, self.spend_curve]
        for curves in self.gpu_curves.values():
            lines += list(curves.values())
        return lines

    def _add_markers(self, tel: RunTelemetry) -> None:
        """The new markers: dashed lines on every plot (:class:`_MarkerLines`), and the labels of
        preemptions and resumes on the utilisation plot (:class:`_EventLabels`)."""
        self._markers_drawn = len(tel.markers)
        for lines in self.marker_lines.values():
            lines.set_markers(tel.markers)
        self.event_labels.set_events([m for m in tel.markers if m.kind != "checkpoint"])

    def curve_lengths(self) -> dict[str, int]:
        """Points drawn by each curve family (for tests and diagnostics)."""
        out = {
            name: len(line.points()[0])
            for name, line in (("tokens", self.tokens_curve), ("loss", self.loss_curve), ("spend", self.spend_curve))
        }
        for key, curves in self.gpu_curves.items():
            out[f"gpu{key[1]}"] = len(curves["util"].points()[0])
        return out
