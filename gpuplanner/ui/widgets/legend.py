"""A pyqtgraph legend held at a corner of its parent that a window's teardown cannot trip over.

pyqtgraph's ``LegendItem`` keeps its place through ``GraphicsWidgetAnchor``, whose slot reads the parent's
geometry without asking whether the parent still exists. When a window closes, the legend's own
``geometryChanged`` can arrive after its parent's C++ object was deleted, and the slot raises inside Qt's
event loop ("Internal C++ object (GraphicsWidget) already deleted"), which a test run reports as an error at
teardown. :class:`CornerLegend` places itself the same way (the same corner and offset, a drag included)
and does nothing once it or its parent is gone.
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
import shiboken6
from pyqtgraph import Point


class CornerLegend(pg.LegendItem):
    """``pg.LegendItem(offset=..., **options)`` with a teardown-safe anchor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._corner: tuple[Point, Point, Point] | None = None
        self._watched: Any = None
        self.geometryChanged.connect(self._place)

    def anchor(self, itemPos: Any, parentPos: Any, offset: Any = (0, 0)) -> None:  # noqa: N803 (pyqtgraph's names)
        """What ``setParentItem`` and a drag call: keep ``itemPos`` of the legend at ``parentPos`` of the
        parent plus ``offset`` (fractions of each one's size, pixels), as pyqtgraph's anchor does."""
        self._corner = (Point(itemPos), Point(parentPos), Point(offset))
        parent = self.parentItem()
        if parent is not None and parent is not self._watched:
            parent.geometryChanged.connect(self._place)
            self._watched = parent
        self._place()

    def _place(self) -> None:
        if self._corner is None or not shiboken6.isValid(self):
            return
        parent = self.parentItem()
        if parent is None or not shiboken6.isValid(parent):
            return
        item_at, parent_at, offset = self._corner
        origin = self.mapToParent(Point(0, 0))
        corner = self.mapToParent(self.boundingRect().bottomRight() * item_at)
        target = parent.boundingRect().bottomRight() * parent_at
        self.setPos(target + (origin - corner) + offset)


def add_legend(plot: pg.PlotItem, offset: tuple[float, float], **options: Any) -> CornerLegend:
    """``plot.addLegend(offset, **options)`` with a :class:`CornerLegend` (the plot's named items join it)."""
    legend = CornerLegend(offset=offset, **options)
    legend.setParentItem(plot.vb)
    plot.legend = legend
    return legend
