"""The Logs tab (Runs pane and History's details): a run's job output as the history keeps it.

The last 64 KiB of each node's stdout and stderr (:mod:`gpuplanner.history.run_logs`, streamed there by
the launcher's watcher) in a monospace, read-only view. It is read on the tab's own worker thread, never
on the GUI thread, again every :data:`REFRESH_MS` while the tab is shown, and the view follows the end
(unless the user scrolled up to read). The whole output is ``gpuplanner runs logs ID`` (said in the note).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QThreadPool, QTimer, Slot
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QSpinBox, QVBoxLayout, QWidget

from gpuplanner.history.db import connect
from gpuplanner.history.run_logs import load_log_tails
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.human import human_data_size

REFRESH_MS = 2000
STREAM_NAMES = {"out": "stdout", "err": "stderr"}


def load_logs(db_path: Any, run_id: int) -> dict[tuple[int, str], Any]:
    """Every stored tail of a run by (node, stream) (runs on the worker thread)."""
    db = connect(db_path)
    try:
        return {(tail.node, tail.stream): tail for tail in load_log_tails(db, run_id)}
    finally:
        db.close()


class LogView(QWidget):
    """``db_path()`` names the history file (read when a load starts)."""

    def __init__(self, db_path: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._db_path = db_path
        self.run_id: int | None = None
        self._generation = 0
        self._loading = False
        self._shown: bytes | None = None
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_loaded)
        self._signals.failed.connect(self._on_failed)
        self.stream_combo = QComboBox()
        for stream, name in STREAM_NAMES.items():
            self.stream_combo.addItem(name, stream)
        self.stream_combo.setToolTip("The job's standard output or standard error")
        self.node_spin = QSpinBox()
        self.node_spin.setRange(0, 0)
        self.node_spin.setPrefix("node ")
        self.node_spin.setToolTip("Which node of a multi-node run")
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setPlaceholderText("No output kept for this run.")
        bar = QHBoxLayout()
        bar.addWidget(self.stream_combo)
        bar.addWidget(self.node_spin)
        bar.addWidget(self.note, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.text, 1)
        self.stream_combo.currentIndexChanged.connect(self._on_choice_changed)
        self.node_spin.valueChanged.connect(self._on_choice_changed)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._tails: dict[tuple[int, str], Any] = {}

    def show_run(self, run_id: int | None) -> None:
        """Show ``run_id``'s output (None: nothing)."""
        if run_id == self.run_id:
            return
        self.run_id, self._shown, self._tails = run_id, None, {}
        self.text.clear()
        self.note.setText("")
        self.refresh(force=True)

    @Slot()
    def refresh(self, force: bool = False) -> None:
        """Read the run's output again on the worker (only while the tab is shown, unless ``force``)."""
        if self.run_id is None or (not force and (self._loading or not self.isVisible())):
            return
        self._generation += 1
        self._loading = True
        path, run_id = self._db_path(), self.run_id
        self._pool.start(
            BackgroundJob(lambda: (run_id, load_logs(path, run_id)), self._signals, "logs", self._generation)
        )

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.refresh(force=True)

    def shutdown(self) -> None:
        self._timer.stop()
        self._pool.waitForDone(5000)

    @Slot(str, int, object)
    def _on_loaded(self, _kind: str, generation: int, payload: Any) -> None:
        if generation != self._generation:
            return
        self._loading = False
        run_id, tails = payload
        if run_id != self.run_id:
            return
        self._tails = tails
        nodes = max((node for node, _ in tails), default=0)
        self.node_spin.setRange(0, nodes)
        self._show_choice()

    @Slot(str, int, str)
    def _on_failed(self, _kind: str, generation: int, message: str) -> None:
        if generation == self._generation:
            self._loading = False
            self.note.setText(f"Could not read the output: {message}")

    @Slot()
    def _on_choice_changed(self, *_args: Any) -> None:
        self._shown = None
        self._show_choice()

    def _show_choice(self) -> None:
        tail = self._tails.get((self.node_spin.value(), self.stream_combo.currentData()))
        data = tail.data if tail is not None else b""
        whole = f"the whole output: gpuplanner runs logs {self.run_id}"
        if tail is None:
            self.note.setText(f"Nothing kept yet ({whole}).")
        elif tail.cut:
            self.note.setText(f"The last {human_data_size(len(data))} of {human_data_size(tail.offset)} ({whole}).")
        else:
            self.note.setText(f"{human_data_size(len(data))} ({whole}).")
        if data == self._shown:
            return
        bar = self.text.verticalScrollBar()
        following = self._shown is None or bar.value() >= bar.maximum() - 2  # at the end: stay there
        keep = bar.value()
        self._shown = data
        self.text.setPlainText(data.decode("utf-8", errors="replace"))
        bar.setValue(bar.maximum() if following else keep)
