"""Help > Show log: the window's log file (``app_log``), read-only, with Reload and Open folder.

Not modal, so the log can stay open beside the window. It shows the file as it is when opened (or
reloaded), scrolled to the end, where the newest entries are; without a file yet it says where the log
will be.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QFontDatabase, QTextCursor
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from gpuplanner.ui.app_log import read_tail


class LogDialog(QDialog):
    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.setWindowTitle("GPU Planner log")
        self.setObjectName("logDialog")
        self.resize(900, 560)
        layout = QVBoxLayout(self)
        self.where = QLabel()
        self.where.setWordWrap(True)
        layout.addWidget(self.where)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setAccessibleName("Log")
        layout.addWidget(self.text, 1)
        buttons = QHBoxLayout()
        self.reload_button = QPushButton("Reload")
        self.reload_button.clicked.connect(self.reload)
        self.folder_button = QPushButton("Open folder")
        self.folder_button.setToolTip("Open the folder of the log files in the desktop's file manager")
        self.folder_button.clicked.connect(self._open_folder)
        close = QPushButton("Close")
        close.setDefault(True)
        close.clicked.connect(self.accept)
        buttons.addWidget(self.reload_button)
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout.addLayout(buttons)
        self.reload()

    def reload(self) -> None:
        content = read_tail(self.path)
        if content:
            self.where.setText(f"{self.path} (newest entries at the end; older ones in {self.path.name}.1 to .3)")
        else:
            self.where.setText(f"Nothing logged yet. The log will be {self.path}.")
        self.text.setPlainText(content)
        self.text.moveCursor(QTextCursor.MoveOperation.End)

    def _open_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.path.parent)))
