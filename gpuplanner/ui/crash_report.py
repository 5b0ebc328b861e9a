"""Uncaught exceptions in the window: written to a log in the data folder and shown to the user.

A slot that raises would otherwise print a traceback to a terminal a desktop user does not have, and
the window would carry on as if nothing happened. :func:`install` replaces ``sys.excepthook`` while
the window runs: each uncaught exception is appended, with its time and traceback, to
the window's log file (``app_log.log_path()``: ``<data folder>/logs/gpuplanner.log``, which
``Help > Show log`` shows), and a non-modal dialog says what happened and where the details
are. The app keeps running; the user decides whether to carry on.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from PySide6.QtWidgets import QApplication, QMessageBox

from gpuplanner import __version__
from gpuplanner.ui.app_log import log_path

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], None]
_OPEN: list[QMessageBox] = []  # the dialogs on screen (a parentless dialog lives while Python holds it)


def write_report(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None, path: Path) -> Path:
    """Append one exception (time, version, traceback) to ``path``; returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    with path.open("a", encoding="utf-8") as out:
        out.write(f"--- {stamp} gpuplanner {__version__}\n{text}\n")
    return path


def show_report(exc_type: type[BaseException], exc: BaseException, path: Path | None) -> QMessageBox:
    """The dialog for one uncaught exception (non-modal, released when closed)."""
    where = f"The details are in {path}." if path is not None else "The details could not be written to a file."
    box = QMessageBox(
        QMessageBox.Icon.Critical,
        "GPU Planner: unexpected error",
        f"Something went wrong inside GPU Planner: {exc_type.__name__}: {exc}\n\n{where}\n\n"
        "The window keeps running; if something looks wrong, restart it. Please include the log when "
        "you report this.",
    )
    box.setObjectName("crashReport")
    box.setModal(False)
    _OPEN.append(box)
    box.finished.connect(lambda _result: _OPEN.remove(box) if box in _OPEN else None)
    box.show()
    return box


def make_hook(path: Callable[[], Path] = log_path, previous: Hook | None = None) -> Hook:
    """An excepthook that logs to ``path()`` and shows the dialog (Ctrl+C still goes to ``previous``)."""
    fallback = previous or sys.__excepthook__
    showing = [False]

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt) or showing[0]:
            fallback(exc_type, exc, tb)
            return
        try:
            written: Path | None = write_report(exc_type, exc, tb, path())
        except OSError:
            written = None
            fallback(exc_type, exc, tb)
        if QApplication.instance() is None:
            return
        showing[0] = True
        try:
            show_report(exc_type, exc, written)
        finally:
            showing[0] = False

    return hook


def install() -> Hook:
    """Replace ``sys.excepthook`` for the window's lifetime; returns the hook installed."""
    hook = make_hook(previous=sys.excepthook)
    sys.excepthook = hook
    return hook
