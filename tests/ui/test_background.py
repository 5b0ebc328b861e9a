"""BackgroundJob: work on a pool thread, the outcome as queued signals; with a Latest, a job superseded
before it started skips its work."""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Slot

from gpuplanner.ui.background import BackgroundJob, JobSignals, Latest


class Receiver(QObject):
    def __init__(self, signals: JobSignals) -> None:
        super().__init__()
        self.done: list[tuple[int, Any]] = []
        self.failed: list[tuple[int, str]] = []
        self.skipped: list[int] = []
        signals.done.connect(self._on_done)
        signals.failed.connect(self._on_failed)
        signals.skipped.connect(self._on_skipped)

    @Slot(str, int, object)
    def _on_done(self, _kind: str, generation: int, payload: Any) -> None:
        self.done.append((generation, payload))

    @Slot(str, int, str)
    def _on_failed(self, _kind: str, generation: int, message: str) -> None:
        self.failed.append((generation, message))

    @Slot(str, int)
    def _on_skipped(self, _kind: str, generation: int) -> None:
        self.skipped.append(generation)


def test_queued_jobs_a_newer_request_superseded_are_skipped(qtbot: Any) -> None:
    pool = QThreadPool()
    pool.setMaxThreadCount(1)
    signals = JobSignals()
    receiver = Receiver(signals)
    latest = Latest()
    started, gate = threading.Event(), threading.Event()
    ran: list[int] = []

    def work(generation: int) -> Any:
        def run() -> int:
            if generation == 1:
                started.set()
                gate.wait(10)
            ran.append(generation)
            return generation * 10

        return run

    for _ in range(4):  # the first holds the only thread; three queue behind it
        generation = latest.advance()
        pool.start(BackgroundJob(work(generation), signals, "plan", generation, latest=latest))
        if generation == 1:
            assert started.wait(10)  # running: superseding it now cannot stop it
    gate.set()
    qtbot.waitUntil(lambda: len(receiver.done) + len(receiver.skipped) == 4, timeout=10_000)
    pool.waitForDone(5000)
    assert ran == [1, 4]  # the running one finished; of the queued ones only the newest ran
    assert receiver.done == [(1, 10), (4, 40)]
    assert sorted(receiver.skipped) == [2, 3]
    assert latest.is_current(4) and not latest.is_current(1)


def test_without_latest_every_job_runs_and_failures_are_reported(qtbot: Any) -> None:
    pool = QThreadPool()
    pool.setMaxThreadCount(1)
    signals = JobSignals()
    receiver = Receiver(signals)

    def fail() -> None:
        raise ValueError("bad file")

    pool.start(BackgroundJob(lambda: "a", signals, generation=1))
    pool.start(BackgroundJob(fail, signals, generation=2, describe=lambda exc: f"cannot read: {exc}"))
    pool.start(BackgroundJob(lambda: "c", signals, generation=3))
    qtbot.waitUntil(lambda: len(receiver.done) + len(receiver.failed) == 3, timeout=10_000)
    pool.waitForDone(5000)
    assert receiver.done == [(1, "a"), (3, "c")]
    assert receiver.failed == [(2, "cannot read: bad file")]
    assert receiver.skipped == []
