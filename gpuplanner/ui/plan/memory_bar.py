"""The memory breakdown of one plan: a stacked bar against the GPU's capacity with the headroom line.

The bar is painted by :func:`paint_memory_bar`, which draws into any painter and rectangle, so the
widget, the PNG export and the PDF report show the same picture.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPaintEvent, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from gpuplanner.plan.memory import MemoryBreakdown
from gpuplanner.ui.palette import BAD, GOOD, SERIES

GIB = 1024**3
PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
STEP_TEMPORARIES = "step temporaries"  # the optimizer step's transient buffers (part of the engine's overhead)
RUNTIME = "CUDA + allocator"  # the CUDA context, the caching allocator's slack and the collectives' stream pools
COLORS = {**SERIES, STEP_TEMPORARIES: "#b07aa1", RUNTIME: SERIES["overhead"]}
MOMENTS = {
    "start-of-backward": "at the start of the backward pass",
    "end-of-backward": "at the end of the backward pass",
    "optimizer-step": "at the optimizer step",
}


@dataclass(frozen=True)
class MemoryView:
    parts: tuple[tuple[str, float], ...]  # (name, GiB)
    capacity_gib: float | None
    headroom: float
    gpu: str
    moment: str = ""  # the engine's peak moment ("optimizer-step"), "" when not known
    backward_gib: float | None = None  # the backward pass's peak when the peak is at the optimizer step

    @property
    def total_gib(self) -> float:
        return sum(v for _, v in self.parts)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_gib is None else self.total_gib <= self.capacity_gib * self.headroom

    @property
    def shown_parts(self) -> tuple[tuple[str, float], ...]:
        """The parts alive at the peak (a part freed before that moment is not drawn as "0.0")."""
        return tuple((name, gib) for name, gib in self.parts if gib >= 0.05)

    def tooltip(self) -> str:
        lines = [f"{name}: {gib:.2f} GiB" for name, gib in self.parts if gib > 0]
        lines.append(f"total: {self.total_gib:.2f} GiB, {MOMENTS.get(self.moment, 'at the peak')}")
        if self.backward_gib is not None:
            lines.append(
                f"the activations and logits are freed before the optimizer step; the backward pass peaks at "
                f"{self.backward_gib:.1f} GiB"
            )
        return "\n".join(lines)


def memory_view(memory: MemoryBreakdown, capacity_gib: float | None, headroom: float, gpu: str) -> MemoryView:
    """The bar's parts: the engine's, with its overhead split into the optimizer step's temporaries and what
    the CUDA runtime and allocator hold (one "overhead" of hundreds of GiB told nothing)."""
    runtime = memory.cuda_context + memory.allocator_slack + memory.stream_pools
    temporaries = max(0, memory.overhead - runtime) if runtime else 0
    parts = [(name, getattr(memory, name) / GIB) for name in PARTS[:-1]]
    if temporaries:
        parts.append((STEP_TEMPORARIES, temporaries / GIB))
    parts.append((RUNTIME if temporaries else "overhead", (memory.overhead - temporaries) / GIB))
    at_step = memory.peak_moment == "optimizer-step" and memory.start_of_backward > 0
    backward = max(memory.start_of_backward, memory.end_of_backward) / GIB if at_step else None
    return MemoryView(tuple(parts), capacity_gib, headroom, gpu, memory.peak_moment, backward)


def _legend(view: MemoryView) -> list[str]:
    items = [f"{name} {gib:,.1f}" for name, gib in view.shown_parts]
    if view.capacity_gib:
        items.append(f"│ capacity  ┆ {view.headroom:.0%} headroom")
    return items


def legend_rows(view: MemoryView | None, width: float, metrics: QFontMetrics) -> int:
    """How many lines the legend takes at ``width`` (it wraps: nothing is left out)."""
    if view is None:
        return 1
    rows, x = 1, 0.0
    for item in _legend(view):
        w = metrics.horizontalAdvance(item) + 22
        if x > 0 and x + w > width:
            rows, x = rows + 1, 0.0
        x += w
    return rows


def title_lines(view: MemoryView, width: float, font: QFont) -> list[str]:
    """The bold title on one line, or on two where it is too wide (the verdict on the second): never cut."""
    bold = QFont(font)
    bold.setBold(True)
    metrics = QFontMetrics(bold)
    verdict = {True: "fits", False: "does NOT fit", None: "capacity unknown"}[view.fits]
    capacity = f" of {view.capacity_gib:,.1f} GiB on {view.gpu}" if view.capacity_gib else ""
    moment = f" ({MOMENTS[view.moment]})" if view.moment in MOMENTS else ""
    first = f"Peak memory per GPU: {view.total_gib:,.1f} GiB{capacity}:"
    if metrics.horizontalAdvance(f"{first} {verdict}{moment}") <= width:
        return [f"{first} {verdict}{moment}"]
    lines = [first, verdict[0].upper() + verdict[1:] + moment]
    return [metrics.elidedText(line, Qt.TextElideMode.ElideRight, int(width)) for line in lines]


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
    titles = title_lines(view, rect.width(), font)
    for number, title in enumerate(titles):
        line = QRectF(rect.left(), rect.top() + number * metrics_h, rect.width(), metrics_h)
        painter.drawText(line, Qt.AlignmentFlag.AlignLeft, title)
    painter.setFont(font)
    metrics = painter.fontMetrics()
    rows = legend_rows(view, rect.width(), metrics)
    bar_top = rect.top() + len(titles) * metrics_h + 4
    bar_h = max(14.0, rect.height() - (len(titles) + rows) * metrics_h - 14)
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
        painter.setBrush(QColor(COLORS.get(name, SERIES["overhead"])))
        painter.drawRect(QRectF(x, bar.top() + 1, w, bar.height() - 2))
        x += w
    if view.capacity_gib:
        cap_x = bar.left() + bar.width() * view.capacity_gib / scale_max
        head_x = bar.left() + bar.width() * view.capacity_gib * view.headroom / scale_max
        painter.setPen(QPen(text_color, 2))
        painter.drawLine(int(cap_x), int(bar.top() - 3), int(cap_x), int(bar.bottom() + 3))
        painter.setPen(QPen(QColor(GOOD if view.fits else BAD), 2, Qt.PenStyle.DashLine))
        painter.drawLine(int(head_x), int(bar.top() - 3), int(head_x), int(bar.bottom() + 3))
    # the legend, wrapped onto as many lines as it needs
    lx, ly = rect.left(), bar.bottom() + 6
    names = [name for name, _ in view.shown_parts]
    for index, item in enumerate(_legend(view)):
        width = metrics.horizontalAdvance(item) + 22
        if lx > rect.left() and lx + width > rect.right():
            lx, ly = rect.left(), ly + metrics_h
        text_x = lx
        if index < len(names):
            painter.setBrush(QColor(COLORS.get(names[index], SERIES["overhead"])))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRect(QRectF(lx, ly + metrics_h / 2 - 5, 10, 10))
            text_x = lx + 13
        painter.setPen(text_color)
        painter.drawText(QRectF(text_x, ly, width, metrics_h), Qt.AlignmentFlag.AlignLeft, item)
        lx += width
    painter.restore()


def bar_height(view: MemoryView | None, width: float, font: QFont) -> int:
    """The height the bar needs at ``width``: its title's lines, a bar and every legend line."""
    metrics = QFontMetrics(font)
    titles = len(title_lines(view, width - 12, font)) if view is not None else 1
    return int((titles + legend_rows(view, width - 12, metrics)) * metrics.height() + 22 + 8 + 8)


class MemoryBar(QWidget):
    """Widget showing one :class:`MemoryView`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view: MemoryView | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(86)
        self.setAccessibleName("Memory breakdown")

    def sizeHint(self) -> QSize:
        return QSize(600, bar_height(self.view, max(self.width(), 600), self.font()))

    def set_view(self, view: MemoryView | None) -> None:
        self.view = view
        if view is not None:
            self.setToolTip(view.tooltip())
        self._fit_height()
        self.update()

    def _fit_height(self) -> None:
        height = max(86, bar_height(self.view, self.width(), self.font()))
        if height != self.minimumHeight():
            self.setMinimumHeight(height)
            self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        self._fit_height()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: ARG002
        painter = QPainter(self)
        try:
            paint_memory_bar(painter, QRectF(self.rect()).adjusted(6, 4, -6, -4), self.view, self.palette())
        finally:
            painter.end()
