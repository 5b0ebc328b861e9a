"""A bad PySide6 (6.12.0 on CPython 3.11) drops a reference to ``None`` on every call of a Python
override of a Qt virtual method; live plots then abort the interpreter (``none_dealloc``) minutes later.
This test turns that into a plain failure."""

from __future__ import annotations

import sys

from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QWidget


class _PaintedWidget(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt naming): returns None, like pyqtgraph's paint()
        painter = QPainter(self)
        painter.drawLine(0, 0, 10, 10)
        painter.end()
        self.paints += 1


def test_qt_overrides_keep_none_refcount(qtbot) -> None:
    widget = _PaintedWidget()
    qtbot.addWidget(widget)
    widget.resize(40, 40)
    image = QImage(40, 40, QImage.Format.Format_ARGB32_Premultiplied)
    widget.render(image)
    before = sys.getrefcount(None)
    for _ in range(2000):
        widget.render(image)  # a synchronous paintEvent through the Python override
    after = sys.getrefcount(None)
    assert widget.paints >= 2000
    # a healthy binding leaves it where it was (give or take objects created meanwhile); the bad one
    # loses exactly one reference per call
    assert after >= before - 100, f"sys.getrefcount(None) fell by {before - after} over 2,000 paintEvent calls"
