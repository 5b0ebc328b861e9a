"""The event markers of the live plots: :class:`MarkerLines` (the dashed vertical lines of checkpoints,
preemptions, resumes and stops on one plot, with the hovered one's label as tooltip) and
:class:`EventLabels` (the preemption and resume labels along the top of the utilisation plot)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen

from gpuplanner.ui.runs.plot_lines import make_pen
from gpuplanner.ui.runs.run_telemetry import Marker

MARKER_COLORS = {"checkpoint": "#2ca02c", "preempted": "#d62728", "resumed": "#1f77b4", "stopped": "#7f7f7f"}


class MarkerLines(pg.GraphicsObject):
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
        self._pens = {kind: make_pen(color, dashed=True) for kind, color in MARKER_COLORS.items()}
        self._other_pen = make_pen("#7f7f7f", dashed=True)
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


class EventLabels(pg.GraphicsObject):
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
        grey = EventLabels.GREY
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
