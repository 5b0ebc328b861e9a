"""Alerts in the window: History shows each stored alert with its diagnosis and carries the suggestion
into the Plan form; the alert settings (dialog, saved with the window) change what fires."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QUrl

from gpuplanner.history.alert_rules import AlertSettings
from gpuplanner.history.alerts import stored_alerts
from gpuplanner.history.db import open_db
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.ui.dialogs.alert_settings_dialog import AlertSettingsDialog
from gpuplanner.ui.main_window import MainWindow, app_settings
from gpuplanner.ui.runs.alert_banner import AlertBanner
from tests.history.streams import GIB, StreamBuilder
from tests.history.test_alerts import _start, _steps
from tests.ui.helpers import wait_for_history, wait_for_result


def _ingest(db_path: Path, s: StreamBuilder, name: str) -> int:
    db = open_db(db_path)
    try:
        run_id = create_run(db, name=name, gpu_type="H100 SXM", gpu_count=1, price_usd_per_gpu_hour=4.0)
        ingest_records(db, run_id, s.records)
    finally:
        db.close()
    return run_id


def memory_run() -> StreamBuilder:
    """Memory at 90% for 4 minutes with micro-batch 8 (gpt2, 1024 tokens)."""
    s = StreamBuilder()
    _start(s)
    for i in range(30):
        s.gpu(i * 60.0, 0, 95.0, mem_used=(72 if 10 <= i < 14 else 40) * GIB)
    _steps(s, 30)
    return s


def starved_run() -> StreamBuilder:
    """0% and 80% alternating for 90 minutes (40% on average)."""
    s = StreamBuilder(t0=1_763_810_000.0)
    _start(s)
    for i in range(90 * 4):
        s.gpu(i * 15.0, 0, 0.0 if i % 2 == 0 else 80.0)
    _steps(s, 90)
    return s


@pytest.fixture
def window(qtbot: Any, services: Any) -> Any:
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    wait_for_result(qtbot, win.plan_pane)
    yield win
    if not win._closing_done:
        win.shutdown(stop_runs=True)
        win._closing_done = True


def test_history_shows_stored_alerts_and_carries_the_suggestion_to_the_plan(
    qtbot: Any, window: MainWindow, services: Any
) -> None:
    run_id = _ingest(services.db_path, memory_run(), "tight")
    window.show_place("History")
    pane = window.history_pane
    wait_for_history(qtbot, pane)
    pane.select_runs([run_id])
    html = pane.summary_view.toPlainText()
    assert "Memory pressure: GPU 0 on n0 memory above 85% of capacity (peak 90%) in 4 min" in html
    assert "lower the micro-batch from 8 to 4 and raise accumulation to 2" in html
    assert "Carry to plan" in html
    db = open_db(services.db_path)
    try:  # the History load stored them with the run
        assert [a.kind for a in stored_alerts(db, run_id)] == ["mem_pressure"]
    finally:
        db.close()

    assert pane.carry_button.isEnabled()
    with qtbot.waitSignal(pane.carryToPlan) as carried:
        pane.carry_button.click()
    assert carried.args[0]["micro_batch"] == 4 and carried.args[0]["grad_accum"] == 2
    assert window.current_place() == "Plan"
    values = window.plan_pane.form.values()
    assert (values["micro-batch"], values["grad-accum"], values["gpu"]) == ("4", "2", "H100 SXM")
    assert (values["model"], values["seq-len"], values["precision"]) == ("gpt2", "1024", "bf16-mixed")
    wait_for_result(qtbot, window.plan_pane)
    assert window.plan_pane.result.plan.setup.micro_batch == 4

    window.plan_pane.form.set_value("micro-batch", "8")
    window.show_place("History")  # the link in the summary does the same
    pane.summary_view.anchorClicked.emit(QUrl("carry:0"))
    assert window.plan_pane.form.values()["micro-batch"] == "4"


def test_alert_settings_change_what_history_shows_and_are_remembered(
    qtbot: Any, window: MainWindow, services: Any
) -> None:
    run_id = _ingest(services.db_path, starved_run(), "starved")
    window.show_place("History")
    pane = window.history_pane
    wait_for_history(qtbot, pane)
    pane.select_runs([run_id])
    assert "averaged 40% utilisation" in pane.summary_view.toPlainText()
    assert not pane.carry_button.isEnabled() or pane.suggestions(run_id)

    window.runs_pane.apply_alert_settings(AlertSettings(low_util_pct=30))
    wait_for_history(qtbot, pane)
    pane.select_runs([run_id])
    assert "Alerts" not in pane.summary_view.toPlainText()
    assert json.loads(app_settings().value("alerts/settings"))["low_util_pct"] == 30
    db = open_db(services.db_path)
    try:
        assert stored_alerts(db, run_id) == []
    finally:
        db.close()
    window.save_settings()
    second = MainWindow(type(services)(services.db_path, services.config_dir))
    qtbot.addWidget(second)
    assert second.services.alert_settings.low_util_pct == 30
    second.shutdown()
    second._closing_done = True


def test_the_dialog_edits_every_setting_and_restores_defaults(qtbot: Any) -> None:
    dialog = AlertSettingsDialog(AlertSettings(low_util_minutes=30))
    qtbot.addWidget(dialog)
    assert dialog.boxes["low_util_minutes"].value() == 30
    dialog.boxes["mem_pct"].setValue(92)
    dialog.boxes["low_util_pct"].setValue(500)  # clamped to the setting's range
    assert dialog.settings() == AlertSettings(low_util_minutes=30, mem_pct=92, low_util_pct=100)
    dialog.restore_defaults()
    assert dialog.settings() == AlertSettings()


def test_the_runs_banner_shows_each_diagnosis(qtbot: Any) -> None:
    banner = AlertBanner()
    qtbot.addWidget(banner)
    banner.set_alerts([("input_bound", "data wait is 38% of step time", "Data wait is 38%: raise the workers")])
    assert banner.text() == "Input-bound: data wait is 38% of step time\n  Data wait is 38%: raise the workers"
    assert "raise the workers" in banner.label.text()
