"""The run controller's manager calls: BackgroundJobs on one pool thread, in order, off the GUI thread,
with the exception itself handed to the errback."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import paramiko

from gpuplanner.launch.known_hosts import UnknownHostKey
from gpuplanner.ui.background import BackgroundJob
from gpuplanner.ui.runs.run_controller import RunController


class _Manager:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    def live_runs(self) -> list[int]:
        return []

    def close(self) -> None:
        self.closed = True


def test_calls_run_in_order_off_the_gui_thread(qtbot: Any, tmp_path: Path) -> None:
    built: list[_Manager] = []
    controller = RunController(lambda: built.append(_Manager()) or built[-1])
    results: list[Any] = []
    errors: list[Exception] = []

    def call(label: str, delay: float) -> Any:
        def fn(manager: _Manager) -> str:
            time.sleep(delay)
            manager.calls.append((label, threading.current_thread().name))
            return label

        return fn

    key = paramiko.RSAKey.generate(1024)

    def unknown_key(_manager: _Manager) -> None:
        raise UnknownHostKey("gpu-box", 22, key, tmp_path / "known_hosts")

    controller.submit(call("first", 0.2), results.append)
    controller.submit(call("second", 0.0), results.append)
    controller.submit(unknown_key, results.append, errors.append)
    controller.submit(call("third", 0.0), results.append)
    assert controller.busy
    qtbot.waitUntil(lambda: len(results) == 3 and len(errors) == 1, timeout=5_000)
    assert results == ["first", "second", "third"]  # one at a time, in the order submitted
    assert isinstance(errors[0], UnknownHostKey)  # the exception itself: the pane asks about the key
    assert len(built) == 1
    assert all(name != threading.main_thread().name for _label, name in built[0].calls)
    assert not controller.busy
    controller.shutdown(stop_runs=False)
    assert built[0].closed


def test_shutdown_drops_calls_not_started(qtbot: Any) -> None:
    controller = RunController(_Manager)
    started = threading.Event()
    ran: list[str] = []

    def slow(_manager: _Manager) -> None:
        started.set()
        time.sleep(0.3)
        ran.append("slow")

    controller.submit(slow)
    controller.submit(lambda _m: ran.append("queued"))
    assert started.wait(5)
    controller.shutdown(stop_runs=False)  # waits for the running call, drops the queued one
    assert ran == ["slow"]


def test_background_job_reports_the_exception_object(qtbot: Any) -> None:
    from gpuplanner.ui.background import JobSignals

    signals = JobSignals()
    failed: list[tuple[str, int, str]] = []
    raised: list[tuple[str, int, Any]] = []
    signals.failed.connect(lambda *a: failed.append(a))
    signals.raised.connect(lambda *a: raised.append(a))
    error = ValueError("bad input")
    BackgroundJob(lambda: (_ for _ in ()).throw(error), signals, "k", 7, describe=lambda e: f"said: {e}").run()
    assert failed == [("k", 7, "said: bad input")]
    assert raised == [("k", 7, error)]


def test_a_search_attaching_a_watched_run_adds_no_second_feed(qtbot: Any) -> None:
    class _Watching(_Manager):
        def __init__(self) -> None:
            super().__init__()
            self.live: list[int] = []
            self.attached: list[tuple[int, bool]] = []

        def live_runs(self) -> list[int]:
            return list(self.live)

        def attach(self, run_id: int, on_records: Any = None, on_status: Any = None) -> None:
            self.attached.append((run_id, on_records is not None))
            self.live.append(run_id)

    manager = _Watching()
    controller = RunController(lambda: manager)
    proxy = controller.reporting_manager()
    proxy.attach(5)  # not watched yet: the controller's feed is added
    proxy.attach(5)  # watched already (e.g. reattached by the Runs pane): records arrive once
    assert manager.attached == [(5, True), (5, False)]
    proxy.close()
    assert not manager.closed  # the window's manager stays open for the other panes
    controller.shutdown(stop_runs=False)
    assert manager.closed
