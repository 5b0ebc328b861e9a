"""A hover readout for the Runs pane's live plots: a vertical crosshair at the cursor's time, drawn on every
plot of the run at once (synced), and on each plot the values of its lines at that time, read from the
run's ring buffers (the nearest sample at or before the cursor), as W&B's charts do.

:class:`Crosshair` owns one line and one label per plot; :class:`LivePlots` gives it the plots and a
function that returns a plot's values at a time. It hides when the cursor leaves the plots.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF

from gpuplanner.ui.human import human_duration
from gpuplanner.ui.runs.ring_buffer import RingBuffer

Readout = Callable[[str, float], list[str]]  # (plot key, x) -> lines of "name value"


def value_at(buffer: RingBuffer, column: str, x: float) -> float | None:
    """The value of ``column`` in the newest row at or before ``x`` (None: no row there, or NaN)."""
    xs = buffer.view("x")
    i = int(np.searchsorted(xs, x, side="right")) - 1
    if i < 0 or not len(xs):
        return None
    value = float(buffer.view(column)[i])
    return None if value != value else value


class Crosshair:
    """Synced vertical lines and per-plot value labels under the cursor (see the module docstring)."""

    def __init__(self, scene: pg.GraphicsScene, plots: dict[str, pg.PlotItem], readout: Readout) -> None:
        self.plots = plots
        self.readout = readout
        self.x: float | None = None
        self.lines: dict[str, pg.InfiniteLine] = {}
        self.labels: dict[str, pg.TextItem] = {}
        for key, plot in plots.items():
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#808080", width=1))
            line.setVisible(False)
            line.setZValue(50)
            plot.addItem(line, ignoreBounds=True)
            label = pg.TextItem("", anchor=(0, 0), fill=pg.mkBrush(255, 255, 255, 200), color="#1d1f23")
            label.setParentItem(plot.getViewBox())  # in the view's own pixels: the top left corner
            label.setZValue(60)
            label.setVisible(False)
            self.lines[key], self.labels[key] = line, label
        scene.sigMouseMoved.connect(self.on_mouse_moved)

    def on_mouse_moved(self, pos: QPointF) -> None:
        for plot in self.plots.values():
            view = plot.getViewBox()
            if view.sceneBoundingRect().contains(pos):
                self.show_at(float(view.mapSceneToView(pos).x()))
                return
        self.hide()

    def show_at(self, x: float) -> None:
        """Lines at ``x`` on every plot, and each plot's values there."""
        self.x = x
        for key, line in self.lines.items():
            line.setValue(x)
            line.setVisible(True)
            rows = self.readout(key, x)
            label = self.labels[key]
            label.setText("\n".join([human_duration(max(x, 0.0)), *rows]))
            label.setPos(2.0, 2.0)
            label.setVisible(True)

    def hide(self) -> None:
        self.x = None
        for line in self.lines.values():
            line.setVisible(False)
        for label in self.labels.values():
            label.setVisible(False)

    def text(self, key: str) -> str:
        """The readout of plot ``key`` (for tests)."""
        return self.labels[key].textItem.toPlainText()
