"""Where the billed time went, drawn: one horizontal stacked bar per run (or per sum of runs) and a
legend with each phase's share and dollars ("start-up and model load 20% of spend, $1.20").

The figures come from ``gpuplanner/history/time_breakdown.py`` (computed on a worker thread with
the run summaries); this widget only draws them. Each segment's tooltip gives its seconds, share and
dollars; the legend speaks for the bar marked as the focus (the sum when one is shown).
"""

from __future__ import annotations

from html import escape as _escape

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QToolTip, QVBoxLayout, QWidget

from gpuplanner.history.time_breakdown import PHASES, TimeBreakdown, label
from gpuplanner.ui.human import human_duration, human_money


def escape(text: str) -> str:
    return _escape(text, quote=False)


COLORS = {
    "startup": "#e15759",
    "compile": "#f28e2b",
    "data": "#d4a72c",
    "train": "#59a14f",
    "checkpoint": "#4e79a7",
    "eval": "#76b7b2",
    "idle_after": "#9c755f",
    "unaccounted": "#bab0ac",
}
OTHER_COLOR = "#b07aa1"
BAR_HEIGHT = 22


def color(phase: str) -> QColor:
    return QColor(COLORS.get(phase, OTHER_COLOR))


def basis_word(breakdown: TimeBreakdown) -> str:
    """What a share is a share of: spend where there is a price (not zero), else GPU-hours or time."""
    if breakdown.share_basis == "gpu_hours":
        return "of GPU-hours"
    return "of spend" if breakdown.cost_usd else "of the time"


def phase_text(breakdown: TimeBreakdown, phase: str) -> str:
    """One phase in words: "start-up and model load 20% of spend, $1.20 (4 min)"."""
    p = breakdown.phase(phase)
    if p is None:
        return f"{label(phase)}: not recorded"
    money = f", {human_money(p.cost_usd)}" if breakdown.cost_usd else ""  # none without a price
    return f"{p.label} {p.share:.0%} {basis_word(breakdown)}{money} ({human_duration(p.seconds)})"


class StackedBar(QWidget):
    """One stacked bar; segments in the breakdown's phase order, widths by share."""

    def __init__(self, breakdown: TimeBreakdown, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.breakdown = breakdown
        self.setMinimumHeight(BAR_HEIGHT)
        self.setMaximumHeight(BAR_HEIGHT)
        self.setMouseTracking(True)
        if not breakdown.recorded:
            self.setToolTip(breakdown.note or "")

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt naming)
        return QSize(300, BAR_HEIGHT)

    def segments(self) -> list[tuple[str, QRectF]]:
        """``(phase, rectangle)`` of each visible segment, left to right."""
        out: list[tuple[str, QRectF]] = []
        if not self.breakdown.recorded:
            return out
        width, x = float(self.width()), 0.0
        for p in self.breakdown.phases:
            w = p.share * width
            if w <= 0:
                continue
            out.append((p.phase, QRectF(x, 0.0, w, float(self.height()))))
            x += w
        return out

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt naming)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if not self.breakdown.recorded:
            painter.setPen(self.palette().color(QPalette.ColorRole.PlaceholderText))
            painter.drawRect(QRectF(0, 0, self.width() - 1, self.height() - 1))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "not recorded")
            return
        font = painter.font()
        for phase, rect in self.segments():
            painter.fillRect(rect, color(phase))
            share = self.breakdown.phase(phase).share  # type: ignore[union-attr]
            text = f"{share:.0%}"
            if rect.width() >= painter.fontMetrics().horizontalAdvance(text) + 6:
                painter.setPen(QColor("#ffffff") if phase in ("startup", "train", "checkpoint") else QColor("#1a1a1a"))
                painter.setFont(font)
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)

    def phase_at(self, x: float) -> str | None:
        return next((phase for phase, rect in self.segments() if rect.left() <= x < rect.right()), None)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.breakdown.recorded and isinstance(event, QHelpEvent):
            phase = self.phase_at(float(event.pos().x()))
            if phase is not None:
                QToolTip.showText(event.globalPos(), phase_text(self.breakdown, phase), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


class TimeBars(QWidget):
    """Titled bars and one legend. ``set_bars([(title, breakdown), ...], focus=index)``.

    The legend is a table (a row per phase, a column for the bar in focus and one for the sum), or
    with ``compact`` one wrapped line of the focus bar's phases (the Runs pane, where height is short)."""

    def __init__(self, parent: QWidget | None = None, *, empty_text: str = "", compact: bool = False) -> None:
        super().__init__(parent)
        self.empty_text = empty_text
        self.compact = compact
        self.bars: list[StackedBar] = []
        self.legend_texts: list[str] = []
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(3)
        self._grid = QGridLayout()
        self._grid.setHorizontalSpacing(8)
        self._grid.setVerticalSpacing(2)
        self._grid.setColumnStretch(1, 1)
        self._layout.addLayout(self._grid)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._layout.addWidget(self.legend)
        self._layout.addStretch(1)
        self.set_bars([])

    def set_bars(self, bars: list[tuple[str, TimeBreakdown]], focus: int = -1) -> None:
        while self._grid.count():
            item = self._grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.setParent(None)
                widget.deleteLater()
        self.bars = []
        for row, (title, breakdown) in enumerate(bars):
            name = QLabel(escape(title))
            name.setToolTip(title)
            bar = StackedBar(breakdown)
            bar.setAccessibleName(f"Time breakdown: {title}")
            self._grid.addWidget(name, row, 0)
            self._grid.addWidget(bar, row, 1)
            self.bars.append(bar)
        focused = bars[focus][1] if bars else None
        self.legend_texts = self._legend(focused)
        columns = [bars[focus]] if bars else []
        if bars and focus not in (-1, len(bars) - 1):
            columns.append(bars[-1])  # the sum beside the run in focus
        self.legend.setText(self._legend_html(columns))

    @staticmethod
    def _legend(breakdown: TimeBreakdown | None) -> list[str]:
        if breakdown is None or not breakdown.recorded:
            return []
        return [phase_text(breakdown, p.phase) for p in breakdown.phases if p.shown]

    def _legend_html(self, columns: list[tuple[str, TimeBreakdown]]) -> str:
        """A table: one row per phase that took time, one column per breakdown (the focus, the sum)."""
        if not columns:
            return escape(self.empty_text)
        recorded = [(title, b) for title, b in columns if b.recorded]
        notes = [f"{title}: {b.note}" for title, b in columns if b.note]
        if not recorded:
            return "<br>".join(escape(n) for n in notes)
        if self.compact:
            focus = recorded[0][1]
            return " &nbsp; ".join(
                f"<span style='color:{COLORS.get(p.phase, OTHER_COLOR)}'>&#9632;</span>&nbsp;"
                f"{escape(phase_text(focus, p.phase)).replace(' ', '&nbsp;')}"  # wrap between phases only
                for p in focus.phases
                if p.shown
            )
        phases = [phase for phase in PHASES if any((p := b.phase(phase)) and p.shown for _, b in recorded)]
        for _, b in recorded:  # phases this version does not know, after the known ones
            phases += [p.phase for p in b.phases if p.shown and p.phase not in phases]
        head = "".join(
            f"<th align='left' style='padding-right:18px'>{escape(title)}"
            f"{': ' + human_money(b.cost_usd) if b.cost_usd is not None else ''}</th>"
            for title, b in recorded
        )
        rows = [f"<tr><th></th>{head}</tr>"]
        for phase in phases:
            cells = []
            for _, b in recorded:
                p = b.phase(phase)
                text = "–" if p is None or not p.shown else phase_text(b, phase)[len(p.label) + 1 :]
                cells.append(f"<td style='padding-right:18px'>{escape(text)}</td>")
            swatch = f"<span style='color:{COLORS.get(phase, OTHER_COLOR)}'>&#9632;</span>"
            rows.append(
                f"<tr><td style='padding-right:10px'>{swatch}&nbsp;{escape(label(phase))}</td>{''.join(cells)}</tr>"
            )
        note = "".join(f"<br><i>{escape(n)}</i>" for n in notes)
        return f"<table cellspacing='0' cellpadding='1'>{''.join(rows)}</table>{note}"
