"""The Runs pane's failure panel: why the selected run failed (its error, in red) and the last lines the
trainer wrote to stderr on the host, as the history keeps them (:func:`run_status_text.failure_text`)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget


class FailurePanel(QWidget):
    """A headline (``label``) over the stderr tail (``text``, hidden when there is none); hidden until shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setStyleSheet("color: #b00020; font-weight: bold")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setMaximumHeight(150)
        self.text.setToolTip("The last lines the trainer wrote to stderr on the host (kept in the history)")
        layout.addWidget(self.label)
        layout.addWidget(self.text)
        self.setVisible(False)

    def show_failure(self, head: str, tail: str) -> None:
        """Show ``head`` and the stderr ``tail`` (scrolled to its end when it changed)."""
        self.label.setText(head)
        if self.text.toPlainText() != tail:
            self.text.setPlainText(tail)
            self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())
        self.text.setVisible(bool(tail))
        self.setVisible(True)
