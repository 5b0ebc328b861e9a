"""The Plan pane's right-hand splitter: the details (scrolled), the options table, the cost chart.

The parts' heights are laid out from the splitter's own size (:meth:`PlanSplitter.lay_out`) until the user
drags a handle or a saved layout is restored; new results never move them, so nothing jumps while typing.
The chart's place holds a placeholder until the chart is built (:meth:`PlanSplitter.set_chart`).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QSplitter, QVBoxLayout, QWidget


class PlanSplitter(QSplitter):
    CHART_SHARE = 0.42  # of the height below the details, at least CHART_MIN_PX
    CHART_MIN_PX = 180
    TALL_PX = 900
    TALL_CHART_SHARE = 0.32
    # the details get the height their text needs, at most this share (at 1280x800 the table below shows
    # at least 8 one-line rows; the headline and memory bar stay in view, the sentences scroll)
    DETAILS_SHARE = 0.38

    def __init__(self, details: QWidget, options: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.details = details
        # however long the details' text gets, the table and the chart below keep their place
        self.details_scroll = QScrollArea()
        self.details_scroll.setWidget(details)
        self.details_scroll.setWidgetResizable(True)
        self.details_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.details_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.details_scroll.setMinimumHeight(40)
        # the details' header (headline and memory bar) stays above their scrolled sentences
        header = getattr(details, "header", None)
        self.details_part = QWidget()
        part = QVBoxLayout(self.details_part)
        part.setContentsMargins(0, 0, 0, 0)
        part.setSpacing(2)
        if header is not None:
            part.addWidget(header)
        part.addWidget(self.details_scroll, 1)
        self.header = header
        options.setMinimumHeight(120)
        self._chart_placeholder: QWidget | None = QLabel("")
        self._chart_placeholder.setMinimumHeight(150)
        self.addWidget(self.details_part)
        self.addWidget(options)
        self.addWidget(self._chart_placeholder)
        self.setStretchFactor(0, 0)
        self.setStretchFactor(1, 1)
        self.setStretchFactor(2, 1)
        self.setChildrenCollapsible(False)
        self.splitterMoved.connect(self._on_moved)
        self.user_sized = False
        self._sized_for: tuple[int, int] | None = None

    def set_chart(self, chart: QWidget) -> None:
        """Put the (just built) chart where its placeholder was, keeping the parts' heights."""
        sizes = self.sizes()
        self.replaceWidget(2, chart)
        if self._chart_placeholder is not None:
            self._chart_placeholder.deleteLater()
            self._chart_placeholder = None
        self.setSizes(sizes)

    def restore(self, state: Any) -> bool:
        """Restore the user's saved layout (from :meth:`saveState`); False when it does not match the three
        parts."""
        if not self.restoreState(state) or len(self.sizes()) != 3:
            return False
        self.user_sized = True
        return True

    @Slot(int, int)
    def _on_moved(self, _pos: int, _index: int) -> None:
        self.user_sized = True

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        self.lay_out()

    def lay_out(self, *, force: bool = False) -> None:
        """Details as tall as their text (up to :data:`DETAILS_SHARE`), the chart a real share of the rest,
        the table what remains. Done for a new size (or, ``force``, once the first result has text), never
        for new results."""
        if self.user_sized:
            return
        total = self.height() - 2 * self.handleWidth()
        # the width less the details' scroll bar (the viewport may not have its new width yet)
        width = self.width() - self.details_scroll.verticalScrollBar().sizeHint().width()
        if total <= 0 or width <= 0 or (not force and self._sized_for == (width, total)):
            return
        self._sized_for = (width, total)
        layout = self.details.layout()
        assert layout is not None, "the details have their layout from the start"
        need = layout.totalHeightForWidth(width) if layout.hasHeightForWidth() else self.details.sizeHint().height()
        need += 2 * layout.spacing() + 8  # the wrapped labels' estimate runs a few pixels short
        head = 0
        if self.header is not None:
            head_layout = self.header.layout()
            assert head_layout is not None
            head = head_layout.totalHeightForWidth(width) if head_layout.hasHeightForWidth() else 0
            head = max(head, self.header.sizeHint().height()) + 2
        need += head
        details = max(head + self.details_scroll.minimumHeight(), min(need, int(total * self.DETAILS_SHARE)))
        rest = total - details
        chart = max(self.CHART_MIN_PX, int(rest * self.CHART_SHARE))
        if total >= self.TALL_PX:  # a tall pane (1920x1080): the chart a third of it, the table has rows to spare
            chart = max(chart, int(total * self.TALL_CHART_SHARE))
        self.setSizes([details, max(120, rest - chart), chart])
