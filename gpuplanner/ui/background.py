"""Work off the GUI thread: one callable on a ``QThreadPool`` thread, its outcome back as a queued signal.

Every pane and dialog that reads or writes the history (or runs a planner estimate or a search) hands
a :class:`BackgroundJob` to its pool. The job touches no widget; ``done(kind, generation, payload)`` or
``failed(kind, generation, message)`` is delivered on the GUI thread, where the receiver drops answers
of an older ``generation`` (a newer request superseded them). ``kind`` tells apart several requests of
one receiver. A receiver that must tell failures apart by type (the run controller: an unknown host key
asks the user, a changed one is refused) listens to ``raised(kind, generation, exception)`` as well,
emitted right after ``failed``. Each failure is also logged (``gpuplanner.ui.background``, with its
traceback), so the window's log file (``app_log``) keeps it whatever the receiver shows.

A pool with one thread (``setMaxThreadCount(1)``) runs its jobs one at a time in the order they were
started: the serial worker of the run controller and of the Hosts pane's writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Signal

log = logging.getLogger(__name__)


class JobSignals(QObject):
    done = Signal(str, int, object)  # kind, generation, payload
    failed = Signal(str, int, str)  # kind, generation, message
    raised = Signal(str, int, object)  # kind, generation, the exception itself (after ``failed``)
    skipped = Signal(str, int)  # kind, generation: superseded before it started (jobs given a Latest)


class Latest:
    """The newest generation of one stream of requests, shared by the GUI thread and the pool's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def advance(self) -> int:
        """A new request: its generation, which supersedes every earlier one."""
        with self._lock:
            self._value += 1
            return self._value

    @property
    def value(self) -> int:
        with self._lock:
            return self._value

    def is_current(self, generation: int) -> bool:
        return generation == self.value


class BackgroundJob(QRunnable):
    """Runs ``work()`` on the pool's thread; a failure is reported with ``describe(exc)``, never raised.

    With ``latest``, the job skips its work (and emits ``skipped``) when a newer generation was asked
    for before it started."""

    def __init__(
        self,
        work: Callable[[], Any],
        signals: JobSignals,
        kind: str = "",
        generation: int = 0,
        describe: Callable[[Exception], str] = str,
        latest: Latest | None = None,
    ) -> None:
        super().__init__()
        self.work, self.signals, self.kind, self.generation, self.describe = work, signals, kind, generation, describe
        self.latest = latest

    def run(self) -> None:
        if self.latest is not None and not self.latest.is_current(self.generation):
            self.signals.skipped.emit(self.kind, self.generation)
            return
        try:
            payload = self.work()
        except Exception as exc:  # noqa: BLE001 - a worker reports, never dies silently
            log.warning("background job %r (generation %d) failed", self.kind, self.generation, exc_info=True)
            self.signals.failed.emit(self.kind, self.generation, self.describe(exc))
            self.signals.raised.emit(self.kind, self.generation, exc)
        else:
            self.signals.done.emit(self.kind, self.generation, payload)
