"""The window's Sweep pane with real widgets: the estimate matches `gpuplanner sweep plan`, bad input is
shown under the form and starts nothing, and a search runs off the GUI thread while the pane watches it, and
can be stopped. The searches' trials are the protocol fake under the real monitor (tests/sweep/fake_trials.py);
tests/sweep/test_show.py keeps one search with the real trainer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QTimer

from gpuplanner.cli import main
from gpuplanner.history.db import connect
from gpuplanner.history.tags import tags_of
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.sweep.sweep_pane import SweepPane
from tests import protocol_fake as fake
from tests.sweep import fake_trials
from tests.sweep.conftest import trainer_flags


@pytest.fixture
def pane(qtbot: Any, db_path: Path, tmp_path: Path) -> Any:
    widget = SweepPane(AppServices(db_path=db_path, config_dir=tmp_path / "config"))
    qtbot.addWidget(widget)
    widget.resize(1280, 800)
    widget.show()
    yield widget
    widget.shutdown()


def test_estimate_matches_the_cli(qtbot: Any, pane: SweepPane, capsys: pytest.CaptureFixture[str]) -> None:
    pane.model_combo.setCurrentText("gpt2")
    pane.gpu_combo.setCurrentText("A100 80GB")
    assert pane.gpu_combo.currentText() == "A100 80GB" and pane.model_combo.currentText() == "gpt2"
    pane.samples_edit.setText("20k")
    pane.epochs_spin.setValue(9)
    pane.plan_trials_spin.setValue(27)
    pane.min_epochs_spin.setValue(1.0)
    pane.parallel_spin.setValue(3)
    pane.plan_budget_edit.setText("50")
    pane.plan_hours_edit.setText("12")
    with qtbot.waitSignal(pane.planned, timeout=90_000) as blocker:
        pane.plan_button.click()
    document = blocker.args[0]
    assert main([
        "sweep", "plan", "--model", "gpt2", "--gpu", "A100 80GB", "--samples", "20k", "--epochs", "9",
        "--trials", "27", "--min-epochs", "1", "--parallel", "3", "--budget-usd", "50", "--max-gpu-hours", "12",
        "--json",
    ]) == 0  # fmt: skip
    cli = json.loads(capsys.readouterr().out)
    assert document["pruned"] == cli["pruned"] and document["unpruned"] == cli["unpruned"]
    assert document["caps"] == cli["caps"]
    text = pane.estimate_view.toPlainText()
    assert "With pruning" in text and "Without pruning" in text
    saving = cli["saving"]
    assert f"Pruning saves ${saving['cost_usd']:,.2f} ({saving['pct']:.0f}%)" in text
    assert f"{cli['search']['trials']} trials of gpt2, 3 at a time, pruned by successive halving." in text
    assert "One full trial on 1 x A100 80GB" in text
    if not cli["caps"]["finishes_under_cap"]:  # the verdict on its own word-wrapped line above the estimate
        assert f"after {cli['caps']['trials_within_cap']} of 27 trials" in pane.verdict_label.text()
    # what was estimated is what the Run tab starts
    assert pane.run_trials_spin.value() == 27
    assert pane.run_budget_edit.text() == "50" and pane.run_hours_edit.text() == "12"
    assert "_usd" not in text and "_hours" not in text  # no JSON keys in the window


@pytest.mark.parametrize(
    ("field", "text", "needle"),
    [
        ("plan_budget_edit", "abc", "--budget-usd"),
        ("samples_edit", "-5", "--samples"),
    ],
)
def test_bad_plan_input_is_shown(qtbot: Any, pane: SweepPane, field: str, text: str, needle: str) -> None:
    getattr(pane, field).setText(text)
    with qtbot.waitSignal(pane.inputError, timeout=60_000) as blocker:
        pane.plan_button.click()
    assert needle in blocker.args[0] and needle in pane.error_label.text()


def test_bad_run_input_starts_nothing(qtbot: Any, pane: SweepPane, db_path: Path, space_file: Path) -> None:
    pane.space_edit.setText(str(space_file))
    pane.flags_edit.setText("--data x")
    pane.run_budget_edit.setText("")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        pane.start_button.click()
    assert blocker.args[0] == "Budget ($): a search needs a cap: fill in Budget ($), Max GPU-hours or both"
    pane.run_budget_edit.setText("5")
    pane.tags_edit.setText("foo")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        pane.start_button.click()
    assert "Tags: 'foo' is not key=value" in blocker.args[0]
    assert pane.runner is None and pane.start_button.isEnabled()
    conn = connect(db_path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
    finally:
        conn.close()


def test_runs_and_watches_a_search_off_the_gui_thread(
    qtbot: Any,
    pane: SweepPane,
    db_path: Path,
    space_file: Path,
    model_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_trials.patch(monkeypatch)  # each trial is the protocol fake under the real monitor
    pane.hosts_edit.setText("local")
    pane.space_edit.setText(str(space_file))
    pane.study_edit.setText("window-search")
    pane.run_trials_spin.setValue(2)
    pane.max_steps_spin.setValue(6)
    pane.min_steps_spin.setValue(3)
    pane.run_eta_spin.setValue(2)
    pane.run_budget_edit.setText("10000")
    pane.tags_edit.setText("project=window")
    pane.flags_edit.setText(" ".join(trainer_flags(model_config, tmp_path / "cache")))
    with qtbot.waitSignal(pane.started, timeout=5000):
        pane.start_button.click()
    assert not pane.start_button.isEnabled() and pane.stop_button.isEnabled()
    # the GUI thread stays free while the search runs: a timer on it fires all along (counted, not timed)
    turns = [0]
    ticker = QTimer()
    ticker.setInterval(50)
    ticker.timeout.connect(lambda: turns.__setitem__(0, turns[0] + 1))
    ticker.start()
    try:  # the search's end is the state waited for; the timeout only ends a test whose search hangs
        with qtbot.waitSignal(pane.finished, timeout=240_000, raising=False) as ended:
            pass
    finally:
        ticker.stop()
    assert ended.signal_triggered and pane.runner is None, f"the search should end; {_diagnosis(pane, db_path)}"
    assert turns[0] > 20
    assert pane.result is not None and pane.result.stop_reason == "done: all 2 trials ran"
    # the review shown in the end is the one read after the search ended (a look under way when the
    # last trial ended, with its spend still growing, is followed by another)
    final = pane.result.spent_usd
    qtbot.waitUntil(
        lambda: pane.review is not None and len(pane.review.trials) == 2 and abs(pane.review.spent_usd - final) < 1e-6,
        timeout=15_000,
    )
    assert pane.table.rowCount() == 2
    assert "trial 0: run" in pane.log_view.toPlainText()
    conn = connect(db_path)
    try:
        tags = tags_of(conn)
    finally:
        conn.close()
    assert {t["run_id"]: tags[t["run_id"]] for t in pane.result.trials} == {
        t["run_id"]: {"project": "window", "sweep": "window-search"} for t in pane.result.trials
    }


def _diagnosis(pane: SweepPane, db_path: Path) -> str:
    """What a search that did not end was doing: its log and its runs' states in the history."""
    conn = connect(db_path)
    try:
        runs = conn.execute("SELECT id, status FROM runs ORDER BY id").fetchall()
    finally:
        conn.close()
    return f"runs {runs}; log: {pane.log_view.toPlainText()!r}"


def test_stop_ends_the_running_trials(
    qtbot: Any,
    pane: SweepPane,
    db_path: Path,
    space_file: Path,
    model_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_trials.patch(monkeypatch)
    barriers = fake.Barriers(tmp_path / "barriers")  # the trial holds after its first step until it is stopped
    monkeypatch.setenv(fake.ARGS_ENV, f"--hold-at-step 1 --barrier-dir {barriers.folder}")
    pane.space_edit.setText(str(space_file))
    pane.study_edit.setText("stopped-search")
    pane.run_trials_spin.setValue(4)
    pane.max_steps_spin.setValue(2000)
    pane.min_steps_spin.setValue(1000)
    pane.run_budget_edit.setText("100000")
    pane.flags_edit.setText(" ".join(trainer_flags(model_config, tmp_path / "cache")))
    with qtbot.waitSignal(pane.started, timeout=5000):
        pane.start_button.click()
    qtbot.waitUntil(lambda: "trial 0: run" in pane.log_view.toPlainText(), timeout=60_000)
    qtbot.waitUntil(lambda: barriers.reached("step-1"), timeout=60_000)
    with qtbot.waitSignal(pane.finished, timeout=120_000) as blocker:
        pane.stop_button.click()
    result = blocker.args[0]
    assert result.stop_reason == "stopped by the user"
    assert len(result.trials) == 1 and result.trials[0]["end"] == "stopped"
    conn = connect(db_path)
    try:
        run_id = result.trials[0]["run_id"]
        (status,) = conn.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()
        stops = conn.execute("SELECT detail_json FROM events WHERE run_id = ? AND kind = 'user_stop'", [run_id])
        stops = [json.loads(r[0]) for r in stops.fetchall()]
    finally:
        conn.close()
    assert status == "stopped"  # the search's stop is a stop, never a preemption (it held: it cannot have finished)
    assert [(s["by"], s["reason"]) for s in stops] == [("sweep", "stopped")]
