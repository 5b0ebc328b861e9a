"""A failed run says why: the pre-launch check catches what it can, and after a failure the error and the
tail of the trainer's stderr are shown in Runs and in History (Summary and Events) and kept in the history."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuplanner.history.failures import load_failure
from gpuplanner.launch.run_failure import error_line, read_tail, tail_text
from gpuplanner.ui.runs.launch_request import demo_dir
from tests.ui.helpers import tiny_request, wait_for_history

pytestmark = pytest.mark.xdist_group("ui_runs")


def test_tail_of_a_long_stderr() -> None:
    data = b"".join(f"line {i}\n".encode() for i in range(100_000)) + b"Traceback\nIndexError: index out of range\n"

    def read(path: str, offset: int, size: int) -> bytes:
        return data[offset : offset + size]

    tail = tail_text(read_tail(read, "x.err"), lines=3)
    assert tail == "line 99999\nTraceback\nIndexError: index out of range"
    assert error_line(tail) == "IndexError: index out of range"
    assert tail_text(b"10%\r50%\r100%\n\n") == "100%"


def test_the_dialog_checks_before_launching(qtbot: Any, runs_pane: Any) -> None:
    dialog = runs_pane.make_launch_dialog({"model_config": str(demo_dir() / "tiny-gpt2.json"), "seq_len": 512})
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.accept()
    qtbot.waitUntil(lambda: "Sequence length (tokens): 512" in dialog.error_label.text(), timeout=20_000)
    assert dialog.isVisible() and dialog.launch_button.isEnabled()
    assert "64 positions" in dialog.error_label.text()
    dialog.seq_spin.setValue(64)  # fixed: the check passes and the dialog launches
    with qtbot.waitSignal(dialog.accepted, timeout=20_000):
        dialog.accept()


@pytest.mark.slow
def test_failed_run_shows_its_error_and_stderr_in_runs_and_history(qtbot: Any, runs_pane: Any) -> None:
    from gpuplanner.history.db import connect
    from gpuplanner.ui.history.history_pane import HistoryPane

    request = tiny_request(20, name="too-long")
    args = request.trainer_args
    args[args.index("--seq-len") + 1] = "512"  # the demo model has 64 positions: IndexError in the trainer
    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    runs_pane.launch(request)
    qtbot.waitUntil(lambda: runs_pane.current() is not None, timeout=30_000)
    entry = runs_pane.current()
    qtbot.waitUntil(lambda: finished == [entry.run_id], timeout=90_000)
    assert entry.state == "failed" and entry.failure is not None
    runs_pane._update_text()
    assert runs_pane.failure_panel.isVisible()
    assert "IndexError" in runs_pane.failure_label.text() and "exit 1" in runs_pane.failure_label.text()
    assert "IndexError: index out of range" in runs_pane.failure_text.toPlainText()
    assert 'File "' in runs_pane.failure_text.toPlainText()  # the traceback's frames
    assert not runs_pane.resume_button.isEnabled()  # no checkpoint: nothing to resume from
    assert "nothing to resume" in runs_pane.resume_button.toolTip()

    db = connect(runs_pane.services.db_path)
    try:
        stored = load_failure(db, entry.run_id)
    finally:
        db.close()
    assert stored is not None and "IndexError" in stored["error"] and "IndexError" in stored["stderr_tail"]

    history = HistoryPane(runs_pane.services)
    qtbot.addWidget(history)
    history.resize(1280, 800)
    history.show()
    history.refresh()
    wait_for_history(qtbot, history)
    with qtbot.waitSignal(history.seriesShown, timeout=10_000):
        history.select_runs([entry.run_id])
    text = history.summary_view.toPlainText()
    assert "Why it failed (exit 1)" in text and "IndexError: index out of range" in text and 'File "' in text
    kinds = [history.events_table.item(r, 2).text() for r in range(history.events_table.rowCount())]
    assert "failure" in kinds and "run_end" in kinds
    row = kinds.index("failure")
    assert "IndexError" in history.events_table.item(row, 4).text()
    history.shutdown()


@pytest.mark.slow
def test_a_failed_run_is_recorded_the_same_from_the_cli_and_the_window(
    qtbot: Any, runs_pane: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launcher records the stderr tail (not the pane): ``gpuplanner run`` stores what the window does."""
    import sys

    from gpuplanner.cli import main
    from gpuplanner.history.db import connect
    from gpuplanner.ui.runs.launch_request import LaunchRequest
    from tests.conftest import REPO_ROOT

    command = [sys.executable, str(REPO_ROOT / "tests" / "data" / "user_scripts" / "hold.py"), "--fail"]
    db_path = runs_pane.services.db_path
    assert main(["run", "--db", str(db_path), "--host", "local", "--json", "--", *command]) == 1
    cli_run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["run_id"]

    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    runs_pane.launch(LaunchRequest(host_name="local", trainer_args=[], name="fails", command=command))
    qtbot.waitUntil(lambda: len(finished) == 1, timeout=60_000)
    entry = runs_pane.runs[finished[0]]
    assert entry.state == "failed"

    db = connect(db_path)
    try:
        stored = {run_id: load_failure(db, run_id) for run_id in (cli_run, entry.run_id)}
    finally:
        db.close()
    cli, window = stored[cli_run], stored[entry.run_id]
    assert cli is not None and window is not None
    assert cli["stderr_tail"].endswith("ValueError: no rows in the data set")
    assert "Traceback (most recent call last):" in cli["stderr_tail"]
    assert cli["error"] == "ValueError: no rows in the data set" and cli["exit_code"] == 3
    same = ("error", "exit_code", "stderr_tail")
    assert {k: cli[k] for k in same} == {k: window[k] for k in same}
    assert entry.failure is not None and entry.failure["stderr_tail"] == window["stderr_tail"]  # the pane shows it
