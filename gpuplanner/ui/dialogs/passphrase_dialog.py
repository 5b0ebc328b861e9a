"""Ask for an encrypted SSH key's passphrase in a password dialog, from whichever thread connects.

``PassphrasePrompter`` is the ``passphrase_callback`` the panes give their ``RunManager``. Connections
are made on worker threads, so a call from a worker posts the question to the GUI thread and waits for
the answer; a call on the GUI thread asks directly. ``close()`` (on shutdown) answers every pending and
later question with None, so a worker never waits on a window that is gone. The launcher remembers a
decrypted key for the rest of the process, so each key is asked about once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import QInputDialog, QLineEdit, QWidget

DIALOG_OBJECT_NAME = "passphraseDialog"


@dataclass
class _Question:
    prompt: str
    answer: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class PassphrasePrompter(QObject):
    """Callable as ``prompter(prompt) -> str | None`` from any thread (None: the user cancelled)."""

    _asked = Signal(object)

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._window = parent
        self._closed = False
        self._dialog: QInputDialog | None = None  # the one on screen, if any
        self._queue: list[_Question] = []  # asked while a dialog is open: shown one after another
        self._asked.connect(self._on_asked, Qt.ConnectionType.QueuedConnection)

    def __call__(self, prompt: str) -> str | None:
        if self._closed:
            return None
        question = _Question(prompt)
        if QThread.currentThread() is self.thread():
            self._on_asked(question)
        else:
            self._asked.emit(question)
            while not question.done.wait(0.2):
                if self._closed:
                    return None
        return question.answer

    def close(self) -> None:
        """From now on every question (also one waiting for its dialog) is answered with None."""
        self._closed = True
        for question in self._queue:
            question.done.set()
        self._queue.clear()
        if self._dialog is not None:
            self._dialog.reject()

    @Slot(object)
    def _on_asked(self, question: _Question) -> None:
        # One dialog at a time: a question that arrives while one is open (its modal loop delivers this
        # call) waits in the queue; the call that opened the dialog shows the queued ones in turn.
        self._queue.append(question)
        if self._dialog is not None:
            return
        while self._queue:
            current = self._queue.pop(0)
            try:
                if not self._closed:
                    current.answer = self._ask(current.prompt)
            finally:
                current.done.set()

    def _ask(self, prompt: str) -> str | None:
        dialog = QInputDialog(self._window)
        dialog.setObjectName(DIALOG_OBJECT_NAME)
        dialog.setWindowTitle("SSH key passphrase")
        dialog.setLabelText(f"{prompt}\nThe key stays unlocked until GPU Planner quits.")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Password)
        dialog.setOkButtonText("Unlock")
        self._dialog = dialog
        try:
            if dialog.exec() != QInputDialog.DialogCode.Accepted or self._closed:
                return None
            return dialog.textValue() or None
        finally:
            self._dialog = None
            dialog.deleteLater()
