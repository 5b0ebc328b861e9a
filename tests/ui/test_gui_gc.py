"""Python's cycles are collected on the GUI thread only while the collector runs (gpuplanner/ui/gui_gc.py)."""

from __future__ import annotations

import gc
import threading
from typing import Any

from gpuplanner.ui.gui_gc import GuiThreadCollector


class _Cycle:
    def __init__(self, seen: list[str]) -> None:
        self.me = self
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append(threading.current_thread().name)


def test_a_worker_that_allocates_never_collects_and_the_gui_thread_does(qtbot: Any) -> None:
    seen: list[str] = []
    before = gc.isenabled()  # off already when the suite's own collector runs (tests/conftest.py)
    collector = GuiThreadCollector(interval_ms=20)
    collector.start()
    try:
        assert not gc.isenabled()
        _Cycle(seen)  # garbage only a collection frees

        def churn() -> None:  # enough cyclic garbage to pass the youngest generation's threshold many times
            for _ in range(5 * gc.get_threshold()[0]):
                _Cycle(seen)

        worker = threading.Thread(target=churn, name="worker")
        worker.start()
        worker.join()
        assert seen == [], "the worker thread ran the collector"
        qtbot.waitUntil(lambda: len(seen) > 1, timeout=10_000)
        assert set(seen) == {threading.current_thread().name}
    finally:
        collector.stop()
    assert gc.isenabled() == before, "stop() gives collection back as it found it"


def test_stop_collects_what_is_left_and_turns_automatic_collection_on_again() -> None:
    assert gc.isenabled()
    seen: list[str] = []
    collector = GuiThreadCollector(interval_ms=60_000)
    collector.start()
    _Cycle(seen)
    collector.stop()
    assert seen == [threading.current_thread().name]
    assert gc.isenabled()
