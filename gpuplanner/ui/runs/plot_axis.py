"""The time axis of the live plots and what hangs off it: :class:`ElapsedAxis` (m:ss or h:mm:ss ticks at
round times, painted directly while the window scrolls), :class:`TimeGrid` (the vertical grid at those
ticks, one light item per plot) and :func:`use_title_label` (a plot title that asks for no width)."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem


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
            major = 86400.0 * nice_step(target / 86400.0)
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


def nice_step(value: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``value`` (and at least 1)."""
    if value <= 1.0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for mult in (1.0, 2.0, 5.0, 10.0):
        if mult * power >= value:
            return mult * power
    return 10.0 * power


class TimeGrid(pg.GraphicsObject):
    """Vertical grid lines at the bottom axis's ticks, drawn in the ViewBox's own (pixel) coordinates by
    one light item: the AxisItem's grid would re-run the axis' tick layout and picture for every plot at
    every frame of a scrolling window, where only the bottom row shows the tick labels."""

    def __init__(self, view: pg.ViewBox) -> None:
        super().__init__(view)
        self._view = view
        self.make_pen = QPen(QColor(150, 150, 150, 51))
        self.make_pen.setCosmetic(True)
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
        painter.setPen(self.make_pen)
        top, bottom = rect.top(), rect.bottom()
        for p in px:
            painter.drawLine(QPointF(float(p), top), QPointF(float(p), bottom))


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


def use_title_label(plot: pg.PlotItem) -> None:
    plot.layout.removeItem(plot.titleLabel)
    plot.titleLabel.setParentItem(None)
    plot.titleLabel = _TitleLabel("", size="10pt", parent=plot)
    plot.layout.addItem(plot.titleLabel, 0, 1)
