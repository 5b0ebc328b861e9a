""" "Measure speed" in the launch dialog: trainer bench of the dialog's settings on the host, off the GUI
thread, reported in the Runs pane and handed to the Plan pane."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QDialog

from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog
from gpuplanner.ui.runs.launch_request import demo_dir
from tests.ui.helpers import CORPUS

SETTINGS = {
    "model": None,
    "model_config": str(demo_dir() / "tiny-gpt2.json"),
    "method": "full",
    "lora_rank": 0,
    "precision": "fp32",
    "micro_batch": 4,
    "grad_accum": 1,
    "seq_len": 32,
    "grad_checkpointing": "none",
    "epochs": 1,
    "gpus": 1,
    "device": "cpu",
    "data": [str(CORPUS)],
}


def test_measure_button_validates_then_ends_a_standalone_dialog_with_measure(qtbot: Any) -> None:
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
def test_measure_runs_trainer_bench_on_the_host_and_reports_it(
    qtbot: Any,
    runs_pane: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dialogs: list[LaunchDialog] = []

    def show_and_measure(dialog: LaunchDialog) -> int:  # the user clicks "Measure speed" (the dialog stays)
        dialogs.append(dialog)
        dialog.show()
        dialog.measure_button.click()
        return QDialog.DialogCode.Rejected  # (exec would go on; the test looks at the open dialog below)

    monkeypatch.setattr(LaunchDialog, "exec", show_and_measure)
    results: list[dict] = []
    runs_pane.speedMeasured.connect(results.append)
    runs_pane.open_launch_dialog(SETTINGS)
    dialog = dialogs[0]
    assert "Measuring the speed on local" in runs_pane.message_label.text()
    assert dialog.isVisible() and not dialog.measure_button.isEnabled() and "Measuring" in dialog.measure_label.text()
    qtbot.waitUntil(lambda: bool(results), timeout=120_000)
    assert dialog.measure_button.isEnabled() and "tokens/s" in dialog.measure_label.text()  # launch next, same values
    assert dialog.measure_label.text() == runs_pane.message_label.text()
    dialog.close()
    result = results[0]
    assert result["device"] == "cpu" and result["measured_steps"] == 30 and result["tokens_per_s"] > 0
    assert result["seq_len"] == 32 and result["micro_batch"] == 4 and result["method"] == "full"
    text = runs_pane.message_label.text()
    assert f"{result['tokens_per_s']:,.0f} tokens/s" in text and "Not recorded (measured on the CPU" in text
    assert "b00020" not in runs_pane.message_label.styleSheet()  # a result, not an error
    assert not runs_pane.runs  # no run was started


@pytest.mark.slow
def test_a_failed_measurement_says_why(qtbot: Any, runs_pane: Any, tmp_path: Any) -> None:
    from gpuplanner.ui.runs.launch_request import LaunchRequest

    runs_pane.measure(
        LaunchRequest(
            "local",
            ["--model-config", SETTINGS["model_config"], "--data", str(tmp_path / "missing"), "--device", "cpu"],
        )
    )
    qtbot.waitUntil(lambda: "Measuring failed" in runs_pane.message_label.text(), timeout=120_000)
    assert "data not found" in runs_pane.message_label.text() and "b00020" in runs_pane.message_label.styleSheet()


def test_the_message_says_when_the_planner_cannot_use_a_measurement(runs_pane: Any) -> None:
    from gpuplanner.ui.runs.launch_request import LaunchRequest

    request = LaunchRequest("box", [])
    base = {
        "device": "NVIDIA GX9",
        "precision": "bfloat16",
        "tokens_per_s": 12_345.0,
        "step_time_s": 0.25,
        "mfu": 0.41,
        "recorded_id": 7,
        "recorded_gpu_type": "NVIDIA GX9",
    }
    runs_pane._on_measured({**base, "catalog_knows_gpu": False}, request)
    text = runs_pane.message_label.text()
    assert "12,345 tokens/s" in text and "MFU 41.0%" in text and "cannot use it" in text
    runs_pane._on_measured({**base, "catalog_knows_gpu": True}, request)
    assert "the Plan pane uses it" in runs_pane.message_label.text()


def test_a_bench_neither_blocks_other_jobs_nor_shutdown(qtbot: Any) -> None:
    import threading

    from gpuplanner.ui.runs.launch_request import LaunchRequest
    from gpuplanner.ui.runs.run_controller import RunController

    release = threading.Event()

    class SlowBench:  # a manager whose bench takes as long as the test wants
        closed = False
        released = False  # the bench ended because close() released it, not after its own 30 s

        def bench(self, host: str, args: list[str]) -> dict:
            SlowBench.released = release.wait(30)
            return {"device": "cpu"}

        def probe(self, host: str) -> dict:
            return {"ok": True}

        def live_runs(self) -> list[int]:
            return []

        def close(self) -> None:
            SlowBench.closed = True
            release.set()  # closing a bench's manager ends it (its connection or process)

    controller = RunController(SlowBench)
    results: list[Any] = []
    controller.bench(LaunchRequest("box", []), results.append, results.append)
    controller.submit(lambda manager: manager.probe("box"), results.append)
    qtbot.waitUntil(lambda: results == [{"ok": True}], timeout=5_000)  # the probe did not wait for the bench
    controller.shutdown(stop_runs=False)
    assert SlowBench.closed  # shutdown closed the bench's manager ...
    # ... which ended the bench (only close() sets the event: released is False if it waited its own 30 s)
    qtbot.waitUntil(lambda: SlowBench.released, timeout=60_000)
