"""Work off the GUI thread: one callable on a ``QThreadPool`` thread, its outcome back as a queued signal.

Every pane and dialog that reads or writes the history (or runs a planner estimate or a search) hands
a :class:`BackgroundJob` to its pool. The job touches no widget; ``done(kind, generation, payload)`` or
``failed(kind, generation, message)`` is delivered on the GUI thread, where the receiver drops answers
of an older ``generation`` (a newer request superseded them). ``kind`` tells apart several requests of
one receiver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Signal


class JobSignals(QObject):
    done = Signal(str, int, object)  # kind, generation, payload
    failed = Signal(str, int, str)  # kind, generation, message


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
        else:
            self.signals.done.emit(self.kind, self.generation, payload)
