"""One RunManager for the whole window: the Hosts, Runs and Sweep panes share the window's controller,
and a run started through one pane's path (a search's trial) shows live in the Runs pane."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplanner.ui.main_window import MainWindow
from gpuplanner.ui.runs.run_controller import RunController
from tests.ui.helpers import wait_for_result


@pytest.fixture
def window(qtbot: Any, services: Any) -> Any:
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    wait_for_result(qtbot, win.plan_pane)
    yield win
    if not win._closing_done:
        win.shutdown(stop_runs=True)
        win._closing_done = True


def _count_managers(controller: RunController) -> list[Any]:
    built: list[Any] = []
    factory = controller._factory

    def counting() -> Any:
        manager = factory()
        built.append(manager)
        return manager

    controller._factory = counting
    return built


def test_panes_share_the_windows_controller(qtbot: Any, services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplanner.launch.manager import RunManager

    built: list[Any] = []
    real_init = RunManager.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(RunManager, "__init__", counting_init)
    window = MainWindow(services)
    qtbot.addWidget(window)
    try:
        shared = window.run_controller
        hosts, runs, sweep = window.pane("Hosts"), window.pane("Runs"), window.pane("Sweep")
        assert hosts.controller is shared and runs.controller is shared and sweep.controller is shared
        assert hosts.passphrase is shared.passphrase  # one passphrase dialog for every connection
        qtbot.waitUntil(lambda: len(built) == 1, timeout=10_000)  # the Runs pane's reattach builds it
        assert shared.reporting_manager().live_runs() == [] and built[0] is shared.manager
        assert built[0].passphrase_callback is shared.passphrase
        qtbot.wait(200)
        assert len(built) == 1  # one manager for the window, whoever asks
    finally:
        window.shutdown(stop_runs=True)
        window._closing_done = True


@pytest.mark.slow  # over the 5 s budget of an unmarked test on a quiet machine (issue 25)
def test_a_run_started_for_a_search_shows_in_runs(qtbot: Any, window: MainWindow) -> None:
    from gpuplanner.ui.runs.run_demo import demo_request

    runs = window.pane("Runs")
    first = window.run_controller.manager  # the window's one manager (built now unless the reattach built it)
    built = _count_managers(window.run_controller)
    args = demo_request(max_steps=40).trainer_args + ["--device", "cpu", "--no-events-stdout"]
    finished: list[int] = []
    runs.runFinished.connect(finished.append)

    # what the Sweep pane's runner does on its thread: launch a trial through the shared manager
    run_id = window.run_controller.reporting_manager().launch("local", args, name="study-a trial 0")
    assert window.has_live_runs()  # closing the window now asks about the search's trial too
    qtbot.waitUntil(lambda: run_id in runs.runs, timeout=10_000)
    entry = runs.runs[run_id]
    assert entry.name == "study-a trial 0" and entry.host == "local"
    qtbot.waitUntil(lambda: len(entry.telemetry.steps) >= 2, timeout=60_000)  # its records stream in live
    qtbot.waitUntil(lambda: finished == [run_id], timeout=90_000)
    assert entry.state == "finished"
    # no second manager: the search's launch and the Runs pane's watch used the window's one
    assert built == [] and window.run_controller.manager is first
    assert run_id not in window.run_controller.live_runs()
    assert runs.controller is window.run_controller and window.pane("Sweep").controller is window.run_controller
