"""A chart with nothing to draw shows its message alone: no axes, ticks or grid around nothing (an empty
$0-$1 axis reads as a figure). The Plan chart, the Runs and History plots and the search plots use it."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QTextOption

AXES = ("left", "bottom", "right", "top")


def set_axes_shown(item: pg.PlotItem, shown: bool) -> None:
    """Hide ``item``'s axes (and with them its grid and their room), or show again the ones it had."""
    hidden: list[str] | None = getattr(item, "_axes_hidden_when_empty", None)
    if not shown:  # (an axis shown again meanwhile, by setLabel, is hidden and remembered too)
        names = (hidden or []) + [n for n in AXES if item.getAxis(n).isVisible() and n not in (hidden or [])]
        item._axes_hidden_when_empty = names
        for name in names:
            item.hideAxis(name)
    elif hidden is not None:
        for name in hidden:
            item.showAxis(name)
        item._axes_hidden_when_empty = None


def axes_shown(item: pg.PlotItem) -> bool:
    """Whether the chart shows its axes (False while it shows only its message)."""
    return getattr(item, "_axes_hidden_when_empty", None) is None


class EmptyMessage:
    """A message centred in a plot's view, shown in place of its axes while the plot has nothing to draw."""

    def __init__(self, item: pg.PlotItem) -> None:
        self.item = item
        self.label = pg.TextItem("", anchor=(0.5, 0.5))
        view = item.getViewBox()
        self.label.setParentItem(view)
        self.label.setVisible(False)
        self.label.textItem.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignCenter))
        view.sigResized.connect(lambda _view: self._place())

    def show(self, message: str | None, color: QColor | str | None = None) -> None:
        """``message``: say it alone (no axes), in ``color`` (the palette's text colour by default); None:
        the axes back and no message."""
        set_axes_shown(self.item, message is None)
        self.label.setVisible(message is not None)
        if message is not None:
            self.label.setColor(
                color if color is not None else QGuiApplication.palette().color(QPalette.ColorRole.Text)
            )
            self.label.setText(message)
            self._place()

    @property
    def text(self) -> str:
        return str(self.label.textItem.toPlainText()) if self.label.isVisible() else ""

    def _place(self) -> None:
        rect = self.item.getViewBox().rect()
        self.label.setTextWidth(max(40.0, rect.width() - 8))
        self.label.setPos(rect.center())
