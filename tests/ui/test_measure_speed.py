""""Measure speed" in the launch dialog: trainer bench of the dialog's settings on the host, off the GUI
thread, reported in the Runs pane and handed to the Plan pane."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QDialog

from gpuplanner.ui.launch_dialog import LaunchDialog, demo_dir
from tests.ui.runs_fixtures import CORPUS, runs_pane, services  # noqa: F401

SETTINGS = {"model": None, "model_config": str(demo_dir() / "tiny-gpt2.json"), "method": "full", "lora_rank": 0,
            "precision": "fp32", "micro_batch": 4, "grad_accum": 1, "seq_len": 32, "grad_checkpointing": "none",
            "epochs": 1, "gpus": 1, "device": "cpu", "data": [str(CORPUS)]}


def test_measure_button_validates_then_ends_the_dialog_with_measure(qtbot: Any) -> None:
    dialog = LaunchDialog([("local", "This machine", None)], {**SETTINGS, "data": []})
    qtbot.addWidget(dialog)
    dialog.measure_button.click()
    assert dialog.result() != LaunchDialog.MEASURE and "training data" in dialog.error_label.text()
    dialog.data_edit.setText(str(CORPUS))
    dialog.measure_button.click()
    assert dialog.result() == LaunchDialog.MEASURE
    request = dialog.request()
    assert request.host_name == "local" and "--seq-len" in request.trainer_args and "--device" in request.trainer_args


@pytest.mark.slow
def test_measure_runs_trainer_bench_on_the_host_and_reports_it(qtbot: Any, runs_pane: Any,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LaunchDialog, "exec", lambda dialog: (dialog.measure(), dialog.result())[1])
    results: list[dict] = []
    runs_pane.speedMeasured.connect(results.append)
    runs_pane.open_launch_dialog(SETTINGS)
    assert "Measuring the speed on local" in runs_pane.message_label.text()
    qtbot.waitUntil(lambda: bool(results), timeout=120_000)
    result = results[0]
    assert result["device"] == "cpu" and result["measured_steps"] == 30 and result["tokens_per_s"] > 0
    assert result["seq_len"] == 32 and result["micro_batch"] == 4 and result["method"] == "full"
    text = runs_pane.message_label.text()
    assert f"{result['tokens_per_s']:,.0f} tokens/s" in text and "Not recorded (measured on the CPU" in text
    assert "b00020" not in runs_pane.message_label.styleSheet()  # a result, not an error
    assert not runs_pane.runs  # no run was started


@pytest.mark.slow
def test_a_failed_measurement_says_why(qtbot: Any, runs_pane: Any, tmp_path: Any) -> None:  # noqa: F811
    from gpuplanner.ui.launch_dialog import LaunchRequest

    runs_pane.measure(LaunchRequest("local", ["--model-config", SETTINGS["model_config"], "--data",
                                              str(tmp_path / "missing"), "--device", "cpu"]))
    qtbot.waitUntil(lambda: "Measuring failed" in runs_pane.message_label.text(), timeout=120_000)
    assert "data not found" in runs_pane.message_label.text() and "b00020" in runs_pane.message_label.styleSheet()
