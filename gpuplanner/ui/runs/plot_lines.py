"""The lines of the live plots and their fitting: :class:`SeriesLine` (one series, drawn as a settled body
and live ends), :class:`PlotLines` (one light item drawing many lines of a plot), :func:`break_at_gaps`
(no line across the time a run was not running), and the y-range helpers :func:`visible_extent` and
:func:`fit_range`."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainter, QPen, QPolygonF

from gpuplanner.ui.runs.ring_buffer import Curves


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


class PlotLines(pg.GraphicsObject):
    """Some lines of one plot, drawn by one item, each line a few polylines with its pen (a plot has one
    for the settled bodies of its lines and one for their live ends, see :class:`SeriesLine`). One item per
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


class LegendEntry:
    """What a legend sample needs of a line (its pen; visibility, toggled by a click on the sample)."""

    def __init__(self, line: SeriesLine) -> None:
        self.opts = {"pen": line.pen}
        self._line = line

    def isVisible(self) -> bool:  # noqa: N802 (pyqtgraph's ItemSample calls these)
        return self._line.body.is_visible(id(self._line))

    def setVisible(self, visible: bool) -> None:  # noqa: N802
        for line in (self._line, *self._line.companions):  # a line and those drawn with it (its raw samples)
            for lines in (line.body, line.live):
                lines.set_visible(id(line), visible)


class SeriesLine:
    """One series, drawn in two parts with the same pen: ``body``, the settled part (complete buckets of
    the decimated history: new data only when a bucket completes or leaves the window), and the live
    parts, which change at any frame (the open bucket and the newest sample, and the oldest bucket while
    the ring buffer drops rows from it), joined to the body's ends. The plot's bodies are drawn by one
    :class:`PlotLines`, its live ends by another, so a frame rebuilds a few points per line, not the
    whole polyline, and in the full-history view (a still x range) the bodies repaint from a pixmap."""

    def __init__(
        self, plot: pg.PlotItem, pen: QPen, name: str | None = None, companions: tuple[SeriesLine, ...] = ()
    ) -> None:
        self.plot = plot
        self.pen = pen
        self.companions = companions  # shown and hidden with this line by its legend entry
        self.body, self.live = plot._line_items  # made with the plot (LivePlots)
        self._key: tuple | None = None
        if name is not None and plot.legend is not None:
            plot.legend.addItem(LegendEntry(self), name)

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


def visible_extent(curves: Curves, x_lo: float, x_hi: float) -> tuple[np.ndarray, np.ndarray]:
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


def fit_range(current: tuple[float, float] | None, lo: float, hi: float) -> tuple[float, float] | None:
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


def make_pen(color: str, *, dashed: bool = False, width: float = 1.0):
    pen = pg.mkPen(color, width=width)
    pen.setCosmetic(True)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    return pen
