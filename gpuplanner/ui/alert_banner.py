"""A banner over the run plots listing the run's alerts (``history/alert_rules.py``: low utilisation,
idle GPU, memory pressure, input-bound, throttling, communication-bound, slow precision; and over plan),
each with its diagnosis under it; hidden when there are none."""

from __future__ import annotations

from html import escape

from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from gpuplanner.history.alert_rules import KIND_TITLES


class AlertBanner(QFrame):
    """Shows ``(kind, message)`` or ``(kind, message, diagnosis)`` tuples; ``alerts`` keeps what is shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("alertBanner")
        self.setStyleSheet(
            "#alertBanner { background: #fff3cd; border: 1px solid #e0b100; border-radius: 4px; }"
            " QLabel { color: #5c4400; }"
        )
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label)
        self.alerts: list[tuple[str, ...]] = []
        self.setVisible(False)

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
