"""The memory breakdown of one plan: a stacked bar against the GPU's capacity with the headroom line.

The bar is painted by :func:`paint_memory_bar`, which draws into any painter and rectangle, so the
widget, the PNG export and the PDF report show the same picture.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from gpuplanner.plan.memory import MemoryBreakdown
from gpuplanner.ui.palette import BAD, GOOD, SERIES

GIB = 1024**3
PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")


@dataclass(frozen=True)
class MemoryView:
    parts: tuple[tuple[str, float], ...]  # (name, GiB)
    capacity_gib: float | None
    headroom: float
    gpu: str

    @property
    def total_gib(self) -> float:
        return sum(v for _, v in self.parts)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_gib is None else self.total_gib <= self.capacity_gib * self.headroom


def memory_view(memory: MemoryBreakdown, capacity_gib: float | None, headroom: float, gpu: str) -> MemoryView:
    return MemoryView(tuple((name, getattr(memory, name) / GIB) for name in PARTS), capacity_gib, headroom, gpu)


def paint_memory_bar(painter: QPainter, rect: QRectF, view: MemoryView | None, palette: QPalette) -> None:
    """Title line, the bar (scaled to max(capacity, total)) with capacity and headroom marks, a legend."""
    text_color = palette.color(QPalette.ColorRole.WindowText)
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    font = QFont(painter.font())
    metrics_h = painter.fontMetrics().height()
    if view is None:
        painter.setPen(text_color)
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, "No plan yet")
        painter.restore()
        return
    total = view.total_gib
    scale_max = max(total, view.capacity_gib or 0.0) * 1.04 or 1.0
    # title
    bold = QFont(font)
    bold.setBold(True)
    painter.setFont(bold)
    painter.setPen(text_color)
    verdict = {True: "fits", False: "does NOT fit", None: "capacity unknown"}[view.fits]
    capacity = f" of {view.capacity_gib:.1f} GiB on {view.gpu}" if view.capacity_gib else ""
    title = f"Peak memory per GPU: {total:.1f} GiB{capacity}: {verdict}"
    painter.drawText(QRectF(rect.left(), rect.top(), rect.width(), metrics_h), Qt.AlignmentFlag.AlignLeft, title)
    painter.setFont(font)
    bar_top = rect.top() + metrics_h + 4
    bar_h = max(14.0, rect.height() - 2 * metrics_h - 14)
    bar = QRectF(rect.left(), bar_top, rect.width(), bar_h)
    painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1))
    painter.setBrush(palette.color(QPalette.ColorRole.Base))
    painter.drawRect(bar)
    x = bar.left()
    painter.setPen(Qt.PenStyle.NoPen)
    for name, gib in view.parts:
        w = bar.width() * gib / scale_max
        if w <= 0:
            continue
        painter.setBrush(QColor(SERIES[name]))
        painter.drawRect(QRectF(x, bar.top() + 1, w, bar.height() - 2))
        x += w
    if view.capacity_gib:
        cap_x = bar.left() + bar.width() * view.capacity_gib / scale_max
        head_x = bar.left() + bar.width() * view.capacity_gib * view.headroom / scale_max
        painter.setPen(QPen(text_color, 2))
        painter.drawLine(int(cap_x), int(bar.top() - 3), int(cap_x), int(bar.bottom() + 3))
        painter.setPen(QPen(QColor(GOOD if view.fits else BAD), 2, Qt.PenStyle.DashLine))
        painter.drawLine(int(head_x), int(bar.top() - 3), int(head_x), int(bar.bottom() + 3))
    # legend
    painter.setPen(text_color)
    lx, ly = rect.left(), bar.bottom() + 6
    for name, gib in view.parts:
        label = f"{name} {gib:.1f}"
        width = painter.fontMetrics().horizontalAdvance(label) + 22
        if lx + width > rect.right():
            break
        painter.setBrush(QColor(SERIES[name]))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.drawRect(QRectF(lx, ly + metrics_h / 2 - 5, 10, 10))
        painter.setPen(text_color)
        painter.drawText(QRectF(lx + 13, ly, width, metrics_h), Qt.AlignmentFlag.AlignLeft, label)
        lx += width
    if view.capacity_gib:
        note = f"│ capacity   ┆ {view.headroom:.0%} headroom"
        width = painter.fontMetrics().horizontalAdvance(note)
        if lx + width < rect.right():
            painter.drawText(QRectF(rect.right() - width, ly, width, metrics_h), Qt.AlignmentFlag.AlignRight, note)
    painter.restore()


class MemoryBar(QWidget):
    """Widget showing one :class:`MemoryView`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view: MemoryView | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(86)
        self.setAccessibleName("Memory breakdown")

    def sizeHint(self) -> QSize:
        return QSize(600, 86)

    def set_view(self, view: MemoryView | None) -> None:
        self.view = view
        if view is not None:
            self.setToolTip(
                "\n".join(f"{name}: {gib:.2f} GiB" for name, gib in view.parts) + f"\ntotal: {view.total_gib:.2f} GiB"
            )
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: ARG002
        painter = QPainter(self)
        try:
            paint_memory_bar(painter, QRectF(self.rect()).adjusted(6, 4, -6, -4), self.view, self.palette())
        finally:
            painter.end()
