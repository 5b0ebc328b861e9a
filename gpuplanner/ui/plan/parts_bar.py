"""Small stacked bars of named parts (the details' step and cost, :mod:`plan_parts`), each part's number on
hover, and the one sentence of verdict beside them.

A bar is generic over its parts: it draws whatever ``(name, value)`` pairs it is given, each in a colour of its
name (a new cost line, storage or transfer, gets the next free colour).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from gpuplanner.ui.plan.plan_parts import Parts

BAR_PX = 14
COLORS = {
    "compute": "#4e79a7",
    "recompute": "#f28e2b",
    "memory-bound": "#76b7b2",
    "communication": "#e15759",
    "launch overhead": "#bab0ac",
    "GPU time": "#4e79a7",
    "training": "#4e79a7",
    "checkpoints": "#59a14f",
    "restarts": "#edc948",
    "lost work": "#e15759",
    "spot overhead": "#b07aa1",
}
SPARE = ("#9c755f", "#ff9da7", "#af7aa1", "#86bcb6")


def part_color(name: str, index: int) -> QColor:
    return QColor(COLORS.get(name, SPARE[index % len(SPARE)]))


class PartsBar(QWidget):
    """One titled stacked bar: "Step 21.3 s [compute|recompute|...]"; hover a part for its number."""

    def __init__(self, title: str, fmt: Callable[[float], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title, self.fmt = title, fmt
        self.parts: Parts = ()
        self.setMouseTracking(True)
        self.setMinimumHeight(BAR_PX + 4)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt naming)
        return QSize(260, self.fontMetrics().height() + 4)

    @property
    def total(self) -> float:
        return sum(v for _, v in self.parts)

    def set_parts(self, parts: Parts) -> None:
        self.parts = parts
        self.setAccessibleName(f"{self.title}: " + ", ".join(f"{n} {self.fmt(v)}" for n, v in parts))
        self.update()

    def label_text(self) -> str:
        return f"{self.title} {self.fmt(self.total)}" if self.parts else f"{self.title}: not estimated"

    def _bar_rect(self) -> QRectF:
        label = self.fontMetrics().horizontalAdvance(self.label_text()) + 8
        return QRectF(label, (self.height() - BAR_PX) / 2, max(10.0, self.width() - label - 2), BAR_PX)

    def segments(self) -> list[tuple[str, float, QRectF]]:
        """``(name, value, rectangle)`` of each part, left to right."""
        total, bar = self.total, self._bar_rect()
        out, x = [], bar.left()
        for name, value in self.parts:
            w = bar.width() * value / total if total > 0 else 0.0
            out.append((name, value, QRectF(x, bar.top(), w, bar.height())))
            x += w
        return out

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802, ARG002 (Qt naming)
        painter = QPainter(self)
        try:
            painter.setPen(self.palette().color(QPalette.ColorRole.WindowText))
            painter.drawText(
                QRectF(0, 0, self.width(), self.height()),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                self.label_text(),
            )
            for index, (name, _value, rect) in enumerate(self.segments()):
                painter.fillRect(rect, part_color(name, index))
            if not self.parts:
                painter.setPen(self.palette().color(QPalette.ColorRole.Mid))
                painter.drawRect(self._bar_rect())
        finally:
            painter.end()

    def part_text(self, name: str, value: float) -> str:
        share = value / self.total if self.total > 0 else 0.0
        return f"{name}: {self.fmt(value)} ({share:.0%} of {self.fmt(self.total)})"

    def part_at(self, x: float) -> tuple[str, float] | None:
        return next(((n, v) for n, v, rect in self.segments() if rect.left() <= x < rect.right()), None)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            part = self.part_at(float(event.pos().x()))
            if part is not None:
                QToolTip.showText(event.globalPos(), self.part_text(*part), self)
            elif self.parts:
                QToolTip.showText(event.globalPos(), "\n".join(self.part_text(n, v) for n, v in self.parts), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


class PartsView(QWidget):
    """The step's and the cost's bars side by side, the verdict under them."""

    def __init__(self, step_fmt: Callable[[float], str], cost_fmt: Callable[[float], str]) -> None:
        super().__init__()
        self.setObjectName("plan-parts")
        self.step_bar = PartsBar("Step", step_fmt)
        self.step_bar.setToolTip("One optimizer step on one GPU, by part (hover a part)")
        self.cost_bar = PartsBar("Cost", cost_fmt)
        self.cost_bar.setToolTip("The run's cost, by part (hover a part)")
        self.verdict_label = QLabel()
        self.verdict_label.setObjectName("plan-verdict")
        self.verdict_label.setWordWrap(True)
        row = QHBoxLayout()
        row.setContentsMargins(6, 0, 6, 0)
        row.setSpacing(16)
        row.addWidget(self.step_bar, 1)
        row.addWidget(self.cost_bar, 1)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addLayout(row)
        column.addWidget(self.verdict_label)

    def show_parts(self, steps: Parts, costs: Parts, verdict: str) -> None:
        self.step_bar.set_parts(steps)
        self.cost_bar.set_parts(costs)
        self.verdict_label.setText(verdict)
        self.verdict_label.setVisible(bool(verdict))
