"""Work off the GUI thread: one callable on a ``QThreadPool`` thread, its outcome back as a queued signal.

Every pane and dialog that reads or writes the history (or runs a planner estimate or a search) hands
a :class:`BackgroundJob` to its pool. The job touches no widget; ``done(kind, generation, payload)`` or
``failed(kind, generation, message)`` is delivered on the GUI thread, where the receiver drops answers
of an older ``generation`` (a newer request superseded them). ``kind`` tells apart several requests of
one receiver. A receiver that must tell failures apart by type (the run controller: an unknown host key
asks the user, a changed one is refused) listens to ``raised(kind, generation, exception)`` as well,
emitted right after ``failed``.

A pool with one thread (``setMaxThreadCount(1)``) runs its jobs one at a time in the order they were
started: the serial worker of the run controller and of the Hosts pane's writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Signal


class JobSignals(QObject):
    done = Signal(str, int, object)  # kind, generation, payload
    failed = Signal(str, int, str)  # kind, generation, message
    raised = Signal(str, int, object)  # kind, generation, the exception itself (after ``failed``)


class BackgroundJob(QRunnable):
    """Runs ``work()`` on the pool's thread; a failure is reported with ``describe(exc)``, never raised."""

    def __init__(
        self,
        work: Callable[[], Any],
        signals: JobSignals,
        kind: str = "",
        generation: int = 0,
        describe: Callable[[Exception], str] = str,
    ) -> None:
        super().__init__()
        self.work, self.signals, self.kind, self.generation, self.describe = work, signals, kind, generation, describe

    def run(self) -> None:
        try:
            payload = self.work()
        except Exception as exc:  # noqa: BLE001 - a worker reports, never dies silently
            self.signals.failed.emit(self.kind, self.generation, self.describe(exc))
            self.signals.raised.emit(self.kind, self.generation, exc)
        else:
            self.signals.done.emit(self.kind, self.generation, payload)
