"""The window's log file: worker-thread failures land in it with their tracebacks; Help > Show log shows it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QThreadPool

from gpuplanner import __version__
from gpuplanner.launch import manager
from gpuplanner.ui import app_log
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.main_window import MainWindow


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[app_log.AppLog]:
    log = app_log.install(tmp_path / "logs" / "gpuplanner.log")
    yield log
    log.remove()


def written(log: app_log.AppLog) -> str:
    log.handler.flush()
    return log.path.read_text(encoding="utf-8")


def test_a_job_raising_on_a_worker_thread_ends_up_in_the_log(qtbot: Any, installed: app_log.AppLog) -> None:
    def load_the_comparison() -> None:
        raise ValueError("the comparison had no rows")

    signals = JobSignals()
    pool = QThreadPool()
    with qtbot.waitSignal(signals.failed, timeout=10_000) as failed:
        pool.start(BackgroundJob(load_the_comparison, signals, kind="compare", generation=3))
    assert failed.args == ["compare", 3, "the comparison had no rows"]  # the receiver still hears it
    pool.waitForDone()
    text = written(installed)
    assert f"gpuplanner {__version__}: the window started" in text.splitlines()[0]
    assert "WARNING" in text and "gpuplanner.ui.background: background job 'compare' (generation 3) failed" in text
    assert "Traceback (most recent call last)" in text and "in load_the_comparison" in text
    assert "ValueError: the comparison had no rows" in text


def test_a_thread_that_dies_and_a_watcher_failure_are_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[type[BaseException]] = []
    recorder = lambda args: seen.append(args.exc_type)  # noqa: E731 - stands in for the hook app_log replaces
    monkeypatch.setattr(threading, "excepthook", recorder)

    def watch() -> None:
        raise ConnectionResetError("the SSH connection went away")

    log = app_log.install(tmp_path / "gpuplanner.log")
    try:
        thread = threading.Thread(target=watch, name="run-7-watcher")
        thread.start()
        thread.join()
        try:
            raise OSError("host unreachable")
        except OSError:
            manager.log.exception("run %s: watcher failed", 7)  # what RunManager's watcher logs as it fails
        text = written(log)
    finally:
        log.remove()
    assert seen == [ConnectionResetError]  # the previous hook still sees it, after the log
    assert threading.excepthook is recorder
    assert "ERROR [run-7-watcher] gpuplanner.threads: uncaught exception in run-7-watcher" in text
    assert "in watch" in text and "ConnectionResetError: the SSH connection went away" in text
    assert "gpuplanner.launch.manager: run 7: watcher failed" in text and "OSError: host unreachable" in text


def test_the_log_rotates_and_removing_it_detaches_the_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_log, "MAX_BYTES", 2_000)
    log = app_log.install(tmp_path / "gpuplanner.log")
    try:
        for index in range(100):
            logging.getLogger("gpuplanner.history").warning("line %d of a long afternoon", index)
    finally:
        log.remove()
    assert (tmp_path / "gpuplanner.log.1").exists() and not (tmp_path / "gpuplanner.log.4").exists()
    assert log.path.stat().st_size <= 2_000
    assert "line 99 of a long afternoon" in log.path.read_text(encoding="utf-8")
    logging.getLogger("gpuplanner.history").warning("after the window closed")
    assert "after the window closed" not in log.path.read_text(encoding="utf-8")


def test_help_show_log_shows_the_files_content(qtbot: Any, services: Any) -> None:
    window = MainWindow(services)
    qtbot.addWidget(window)
    try:
        help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
        action = next(a for a in help_menu.actions() if a.text() == "Show &log")
        path = app_log.log_path()
        assert not path.exists()
        action.trigger()
        dialog = window.log_dialog
        assert dialog.isVisible() and not dialog.isModal() and dialog.text.isReadOnly()
        assert dialog.text.toPlainText() == "" and f"The log will be {path}" in dialog.where.text()
        path.parent.mkdir(parents=True)
        path.write_text("2026-11-27 18:00:00 ERROR [run-3-watcher] gpuplanner.launch.manager: boom\n", encoding="utf-8")
        action.trigger()  # the same viewer, reloaded
        assert window.log_dialog is dialog
        assert "gpuplanner.launch.manager: boom" in dialog.text.toPlainText()
        assert str(path) in dialog.where.text()
        with path.open("a", encoding="utf-8") as out:
            out.write("Traceback (most recent call last):\nValueError: later\n")
        dialog.reload_button.click()
        assert dialog.text.toPlainText().endswith("ValueError: later\n")
        dialog.close()
    finally:
        window.shutdown(stop_runs=True)
        window._closing_done = True


def test_a_log_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    handlers, hook = list(logging.getLogger("gpuplanner").handlers), threading.excepthook
    with pytest.raises(OSError):
        app_log.install(blocker / "logs" / "gpuplanner.log")  # app.main then opens the window without one
    assert logging.getLogger("gpuplanner").handlers == handlers and threading.excepthook is hook
