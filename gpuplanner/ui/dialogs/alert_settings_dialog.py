"""The alert settings dialog: every threshold of the alert rules (``history/alert_rules.py``), the same
ones ``gpuplanner runs show|alerts`` take as flags. The window keeps them in ``AppServices.alert_settings``
(saved with the window's settings); Runs and History evaluate alerts under them."""

from __future__ import annotations

from dataclasses import fields

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.history.alert_rules import SPECS, AlertSettings


class AlertSettingsDialog(QDialog):
    """Edits an :class:`AlertSettings`; :meth:`settings` is the result (valid by construction: each box
    holds its setting's range)."""

    def __init__(self, settings: AlertSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Alert settings")
        intro = QLabel(
            "When Runs and History raise an alert. Utilisation is NVML's share of time any kernel ran, "
            "averaged over the window for each GPU."
        )
        intro.setWordWrap(True)
        form = QFormLayout()
        self.boxes: dict[str, QDoubleSpinBox] = {}
        for f in fields(AlertSettings):
            spec = SPECS[f.name]
            box = QDoubleSpinBox()
            box.setRange(spec.low, spec.high)
            box.setDecimals(1)
            box.setSuffix(f" {spec.unit}")
            box.setValue(float(getattr(settings, f.name)))
            box.setToolTip(spec.help[0].upper() + spec.help[1:])
            box.setAccessibleName(spec.label)
            form.addRow(spec.label + ":", box)
            self.boxes[f.name] = box
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(self.restore_defaults)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def restore_defaults(self) -> None:
        defaults = AlertSettings()
        for name, box in self.boxes.items():
            box.setValue(float(getattr(defaults, name)))

    def settings(self) -> AlertSettings:
        return AlertSettings(**{name: box.value() for name, box in self.boxes.items()})


def edit_alert_settings(settings: AlertSettings, parent: QWidget | None = None) -> AlertSettings | None:
    """Ask the user; the new settings, or None when cancelled or unchanged."""
    dialog = AlertSettingsDialog(settings, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return None
    chosen = dialog.settings()
    return chosen if chosen != settings else None
