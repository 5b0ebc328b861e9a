"""An exception that escapes a slot is written to the data folder's error log and shown in a dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton

from gpuplanner.ui import crash_report


def _boxes() -> list[QMessageBox]:
    return [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox) and w.objectName() == "crashReport" and w.isVisible()
    ]


def test_an_exception_in_a_slot_is_logged_and_shown(qtbot: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("GPUPLANNER_DATA_DIR", str(tmp_path / "data"))
    calls: list[str] = []
    hook = crash_report.make_hook(previous=lambda *args: calls.append("previous"))
    monkeypatch.setattr("sys.excepthook", hook)
    button = QPushButton("boom")
    qtbot.addWidget(button)

    def explode() -> None:
        raise ValueError("the comparison had no rows")

    button.clicked.connect(explode)
    with qtbot.capture_exceptions() as captured:  # pytest-qt's own hook sees it; ours is called below
        button.click()
    (exc_type, exc, tb) = captured[0]
    hook(exc_type, exc, tb)

    log = tmp_path / "data" / "logs" / "gpuplanner.log"
    text = log.read_text()
    assert "ValueError: the comparison had no rows" in text and "in explode" in text and "gpuplanner 0.1.0" in text
    boxes = _boxes()
    assert len(boxes) == 1 and boxes[0].isVisible() and not boxes[0].isModal()
    assert "ValueError: the comparison had no rows" in boxes[0].text() and str(log) in boxes[0].text()
    assert calls == []  # handled here, not passed on
    hook(exc_type, exc, tb)  # a second one is appended, not overwritten
    assert log.read_text().count("ValueError: the comparison had no rows") == 2
    for box in _boxes():
        box.close()
        box.deleteLater()


def test_ctrl_c_and_an_unwritable_log_go_to_the_previous_hook(qtbot: Any, tmp_path: Path) -> None:
    calls: list[type[BaseException]] = []
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    hook = crash_report.make_hook(
        path=lambda: blocker / "logs" / "errors.log", previous=lambda t, e, tb: calls.append(t)
    )
    hook(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert calls == [KeyboardInterrupt] and not _boxes()
    hook(RuntimeError, RuntimeError("x"), None)  # the log cannot be written: the terminal still gets it
    assert calls == [KeyboardInterrupt, RuntimeError]
    boxes = _boxes()
    assert len(boxes) == 1 and "could not be written" in boxes[0].text()
    QTimer.singleShot(0, boxes[0].close)
    qtbot.waitUntil(lambda: not boxes[0].isVisible(), timeout=5000)
    boxes[0].deleteLater()
