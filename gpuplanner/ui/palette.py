"""Light and dark palettes that follow the system's colour scheme, and the app icon.

The Fusion style draws every widget from the palette, so one palette switch restyles the whole
window. :func:`follow_system_scheme` applies the scheme the platform reports now and again whenever
it changes (``QStyleHints.colorSchemeChanged``).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from gpuplanner.resources import resource_path

# Colours that read on both palettes (series of charts, states of table rows).
SERIES = {
    "weights": "#4e79a7",
    "gradients": "#f28e2b",
    "optimizer": "#e15759",
    "activations": "#76b7b2",
    "logits": "#59a14f",
    "overhead": "#9c9c9c",
}
GOOD = "#2e9d4f"
BAD = "#d64545"
WARN = "#d98a00"


def is_dark(palette: QPalette) -> bool:
    """Whether ``palette`` is a dark one (its window colour is dark): pick the colours that read on it."""
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def app_icon() -> QIcon:
    """The scalable app icon (SVG: sharp at any device pixel ratio)."""
    return QIcon(str(resource_path("icons", "gpuplanner.svg")))


def dark_palette() -> QPalette:
    p = QPalette()
    window, base, text = QColor("#2b2d31"), QColor("#1f2023"), QColor("#e6e6e6")
    disabled = QColor("#7a7a7a")
    p.setColor(QPalette.ColorRole.Window, window)
    p.setColor(QPalette.ColorRole.WindowText, text)
    p.setColor(QPalette.ColorRole.Base, base)
    p.setColor(QPalette.ColorRole.AlternateBase, QColor("#26282c"))
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor("#3a3d42"))
    p.setColor(QPalette.ColorRole.ToolTipText, text)
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor("#8c8c8c"))
    p.setColor(QPalette.ColorRole.Text, text)
    p.setColor(QPalette.ColorRole.Button, QColor("#35383d"))
    p.setColor(QPalette.ColorRole.ButtonText, text)
    p.setColor(QPalette.ColorRole.BrightText, QColor("#ff6b6b"))
    p.setColor(QPalette.ColorRole.Link, QColor("#6ea8ff"))
    p.setColor(QPalette.ColorRole.Highlight, QColor("#3d6fd1"))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return p


def light_palette() -> QPalette:
    p = QPalette()
    p.setColor(QPalette.ColorRole.Window, QColor("#f3f4f6"))
    p.setColor(QPalette.ColorRole.WindowText, QColor("#1d1f23"))
    p.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
    p.setColor(QPalette.ColorRole.AlternateBase, QColor("#f5f7fa"))
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor("#ffffe8"))
    p.setColor(QPalette.ColorRole.ToolTipText, QColor("#1d1f23"))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor("#8a8f98"))
    p.setColor(QPalette.ColorRole.Text, QColor("#1d1f23"))
    p.setColor(QPalette.ColorRole.Button, QColor("#e9ebef"))
    p.setColor(QPalette.ColorRole.ButtonText, QColor("#1d1f23"))
    p.setColor(QPalette.ColorRole.Highlight, QColor("#2f6fde"))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    p.setColor(QPalette.ColorRole.Link, QColor("#1f5fc8"))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#9a9ea6"))
    return p


def apply_scheme(app: QApplication, dark: bool) -> None:
    app.setStyle("Fusion")
    app.setPalette(dark_palette() if dark else light_palette())


class SchemeFollower(QObject):
    """Keeps the app's palette in step with the system's light/dark setting."""

    def __init__(self, app: QApplication, forced: str | None = None) -> None:
        super().__init__(app)
        self._app = app
        self._forced = forced
        hints = app.styleHints()
        if forced is None and hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(self._on_color_scheme_changed)
        self.apply()

    def system_is_dark(self) -> bool:
        hints = self._app.styleHints()
        return hasattr(hints, "colorScheme") and hints.colorScheme() == Qt.ColorScheme.Dark

    def apply(self) -> None:
        dark = self._forced == "dark" if self._forced else self.system_is_dark()
        apply_scheme(self._app, dark)

    @Slot(Qt.ColorScheme)
    def _on_color_scheme_changed(self, _scheme: Qt.ColorScheme) -> None:
        self.apply()
