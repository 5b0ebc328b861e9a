"""The Logs tab (History's details; the Runs pane uses the same view): a run's job output as the history
keeps it, read on the tab's worker thread, monospace, following the end as output arrives."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QFontInfo
from PySide6.QtWidgets import QDialog

from gpuplanner.history.db import open_db
from gpuplanner.history.run_logs import save_log_tail
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.widgets import log_view
from tests.conftest import REPO_ROOT
from tests.ui.helpers import wait_for_history

SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"


def test_the_logs_tab_reads_on_a_worker_and_follows_the_end(qtbot: Any, tmp_services: Any, monkeypatch: Any) -> None:
    lines = "".join(f"step {i}: loss 2.{i:03d}\n" for i in range(400)).encode()
    db = open_db(tmp_services.db_path)
    run_id = create_run(db, name="talky", host="box")
    save_log_tail(db, run_id, 0, "out", "box:/r/node0.out", 10 * len(lines), lines)
    save_log_tail(db, run_id, 0, "err", "box:/r/node0.err", 40, b"Traceback (most recent call last):\nValueError: x\n")
    threads: list[threading.Thread] = []
    real = log_view.load_logs
    monkeypatch.setattr(
        log_view, "load_logs", lambda path, rid: threads.append(threading.current_thread()) or real(path, rid)
    )

    pane = HistoryPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(1000, 700)
    pane.show()
    try:
        wait_for_history(qtbot, pane)
        pane.select_runs([run_id])
        pane.detail_tabs.setCurrentWidget(pane.log_view)
        view = pane.log_view
        qtbot.waitUntil(lambda: view.text.toPlainText().endswith("step 399: loss 2.399\n"))
        assert threads and all(t is not threading.main_thread() for t in threads)  # never on the GUI thread
        assert QFontInfo(view.text.font()).fixedPitch()
        assert len(lines) == 8290 and view.note.text().startswith("The last 8 KiB of 81 KiB")  # 8,290 of 82,900 bytes
        assert f"gpuplanner runs logs {run_id}" in view.note.text()
        bar = view.text.verticalScrollBar()
        assert bar.maximum() > 0 and bar.value() == bar.maximum()  # at the end

        more = lines + b"step 400: loss 1.999\n"
        save_log_tail(db, run_id, 0, "out", "box:/r/node0.out", 10 * len(lines) + 21, more)
        view.refresh()
        qtbot.waitUntil(lambda: view.text.toPlainText().endswith("step 400: loss 1.999\n"))
        assert bar.value() == bar.maximum()  # it followed the new end

        view.stream_combo.setCurrentIndex(view.stream_combo.findData("err"))
        assert view.text.toPlainText() == "Traceback (most recent call last):\nValueError: x\n"
    finally:
        pane.shutdown()
        db.close()


@pytest.mark.slow
def test_the_runs_panes_logs_tab_follows_a_live_run(
    qtbot: Any, runs_pane: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    """A real command launched from the Runs pane, held at a barrier: its output shows in the Logs tab while
    it runs, and what it writes after the barrier opens shows too."""
    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

    gate = tmp_path / "gate"

    def accept(dialog: LaunchDialog) -> int:
        dialog.command_radio.setChecked(True)
        dialog.command_edit.setText(f"{sys.executable} talk.py {gate}")
        dialog.workdir_edit.setText(str(SCRIPTS))
        dialog.accept()
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(LaunchDialog, "exec", accept)
    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    runs_pane.open_launch_dialog({})
    qtbot.waitUntil(lambda: runs_pane.current() is not None, timeout=30_000)
    entry = runs_pane.current()
    runs_pane.detail_tabs.setCurrentWidget(runs_pane.log_view)
    view = runs_pane.log_view
    assert view.run_id == entry.run_id
    qtbot.waitUntil(lambda: view.text.toPlainText() == "talk: before the gate\n", timeout=60_000)
    assert entry.state not in ("finished", "failed")  # still held at the gate
    gate.touch()
    qtbot.waitUntil(lambda: finished == [entry.run_id], timeout=60_000)
    qtbot.waitUntil(lambda: view.text.toPlainText().endswith("talk: after the gate\n"), timeout=30_000)
    view.stream_combo.setCurrentIndex(view.stream_combo.findData("err"))
    assert view.text.toPlainText().endswith("talk: a warning before the gate\ntalk: done\n")
