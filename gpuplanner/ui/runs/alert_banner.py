"""A banner over the run plots listing the run's alerts (``history/alert_rules.py``: low utilisation,
idle GPU, memory pressure, input-bound, throttling, communication-bound, slow precision; and over plan),
each with its diagnosis under it; hidden when there are none."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from gpuplanner.history.alert_rules import KIND_TITLES
from gpuplanner.ui.palette import is_dark

# (background, border, text) of the banner on a light and on a dark palette: amber, text >= 7:1 on it
BANNER_COLORS = {False: ("#fff3cd", "#e0b100", "#5c4400"), True: ("#3d3212", "#b38600", "#ffe08a")}


class AlertBanner(QFrame):
    """Shows ``(kind, message)`` or ``(kind, message, diagnosis)`` tuples; ``alerts`` keeps what is shown.
    Its colours follow the palette (a light amber banner on the light one, a dark amber one on the dark)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("alertBanner")
        self.colors = BANNER_COLORS[False]
        self.label = QLabel(self)
        self.apply_palette()
        self.label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label)
        self.alerts: list[tuple[str, ...]] = []
        self.setVisible(False)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "label"):  # light/dark switched
            self.apply_palette()

    def apply_palette(self) -> None:
        colors = BANNER_COLORS[is_dark(self.palette())]
        if colors == self.colors and self.styleSheet():
            return
        self.colors = colors
        background, border, text = colors
        self.setStyleSheet(
            f"#alertBanner {{ background: {background}; border: 1px solid {border}; border-radius: 4px; }}"
            f" QLabel {{ color: {text}; }}"
        )

    def set_alerts(self, alerts: list[tuple[str, ...]]) -> None:
        if alerts == self.alerts:
            return
        self.alerts = list(alerts)
        lines = []
        for kind, msg, *why in alerts:
            line = f"&#9888; <b>{escape(KIND_TITLES.get(kind, kind))}:</b> {escape(msg)}"
            if why and why[0]:
                line += f"<br><span style='margin-left:12px'>&nbsp;&nbsp;&rarr; {escape(why[0])}</span>"
            lines.append(line)
        self.label.setText("<br>".join(lines))
        self.setVisible(bool(alerts))

    def text(self) -> str:
        return "\n".join(
            f"{KIND_TITLES.get(kind, kind)}: {msg}" + (f"\n  {why[0]}" if why and why[0] else "")
            for kind, msg, *why in self.alerts
        )
