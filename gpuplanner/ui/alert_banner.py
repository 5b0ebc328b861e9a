"""A banner over the run plots listing the run's alerts (low utilisation, input-bound, memory
pressure, over plan); hidden when there are none."""

from __future__ import annotations

from html import escape

from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

KIND_TITLES = {
    "low_util": "Low utilisation",
    "input_bound": "Input-bound",
    "mem_pressure": "Memory pressure",
    "over_plan": "Over plan",
}


class AlertBanner(QFrame):
    """Shows ``(kind, message)`` pairs; ``alerts`` keeps what is shown (for tests)."""

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
        self.alerts: list[tuple[str, str]] = []
        self.setVisible(False)

    def set_alerts(self, alerts: list[tuple[str, str]]) -> None:
        if alerts == self.alerts:
            return
        self.alerts = list(alerts)
        self.label.setText(
            "<br>".join(f"&#9888; <b>{escape(KIND_TITLES.get(kind, kind))}:</b> {escape(msg)}" for kind, msg in alerts)
        )
        self.setVisible(bool(alerts))

    def text(self) -> str:
        return "\n".join(f"{KIND_TITLES.get(kind, kind)}: {msg}" for kind, msg in self.alerts)
