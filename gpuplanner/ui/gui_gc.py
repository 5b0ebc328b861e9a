"""Python's cyclic garbage collector runs on the GUI thread only, while the window is up.

The window's panes run their work on ``QThreadPool`` threads (plans, history reads, launches). Left to
itself, Python collects reference cycles on whichever thread happens to allocate when a generation's
threshold is passed, so a worker computing a plan could finalise Qt objects of a closed dialog or of a
replaced widget on its own thread: Qt then warns "QBasicTimer::stop: Failed. Possibly trying to stop from
a different thread", and a widget destroyed off the GUI thread while the GUI thread lays it out corrupts
the heap ("double free or corruption", seen in the suite about one run in 15 under load).

:class:`GuiThreadCollector` turns automatic collection off and collects from a timer on the GUI thread
instead, generation by generation with Python's own thresholds (the approach of pyqtgraph's
``GarbageCollector``, which has no way to hand collection back). ``stop()`` collects once more, on the
GUI thread, and turns automatic collection on again: the app stops it when it quits, the tests after each
window test.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

COLLECT_EVERY_MS = 500


class GuiThreadCollector(QObject):
    """Collect cycles on the thread that owns this object (the GUI thread) and nowhere else."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = COLLECT_EVERY_MS) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer.start()

    def stop(self) -> None:
        """Collect everything now (on this thread) and give collection back to Python."""
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()

    def collect_due(self) -> None:
        """The generations whose allocation counts passed Python's thresholds, youngest first."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in range(3):
            if counts[generation] <= thresholds[generation]:
                break
            gc.collect(generation)
