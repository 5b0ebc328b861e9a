"""The launch dialog fits small screens (the buttons stay visible), opens at a size that fits its screen,
and remembers the values typed last time (private QSettings per test, tests/ui/conftest.py)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QWidget

from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog
from gpuplanner.ui.runs.launch_memory import merged_settings

HOSTS = [("local", "This machine", None), ("box", "box (SSH)", 2.0)]


def _inside(widget: QWidget, area: QRect) -> bool:
    top_left = widget.mapToGlobal(widget.rect().topLeft())
    return area.contains(QRect(top_left, widget.size()))


def test_fits_1280x800_with_buttons_visible(qtbot: Any) -> None:
    screen = QApplication.primaryScreen()
    dialog = LaunchDialog(HOSTS, {"data": ["/data/a.txt"]})
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    wanted = dialog.preferred_size()
    assert wanted.width() <= 1280 - 40 and wanted.height() <= 800 - 60, wanted  # two columns: no scrolling
    room = screen.availableGeometry()
    assert dialog.width() <= room.width() and dialog.height() <= room.height()
    area = dialog.frameGeometry()
    for button in (dialog.launch_button, dialog.measure_button):
        assert button.isVisible() and _inside(button, area)


def test_opens_smaller_than_its_screen_and_scrolls(qtbot: Any) -> None:
    screen = QApplication.primaryScreen()
    room = screen.availableGeometry()
    dialog = LaunchDialog(HOSTS, {})
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.width() <= room.width() and dialog.height() <= room.height()
    dialog.resize(700, 420)  # a tiny screen: the fields scroll, the buttons stay
    qtbot.waitUntil(lambda: dialog.scroll_area.verticalScrollBar().maximum() > 0)
    assert dialog.launch_button.isVisible() and dialog.launch_button.geometry().bottom() < dialog.height()


def test_remembers_the_values_typed(qtbot: Any) -> None:
    first = LaunchDialog(HOSTS, {})
    qtbot.addWidget(first)
    first.model_config_edit.setText("/models/tiny.json")
    first.data_edit.setText("/data/a.txt; /data/b.jsonl")
    first.seq_spin.setValue(128)
    first.micro_spin.setValue(3)
    first.host_combo.setCurrentIndex(1)
    first.extra_edit.setText("--lr 1e-4")
    first.name_edit.setText("only-this-run")
    first.accept()

    again = LaunchDialog(HOSTS, {}, defaults={"data": ["/demo/corpus"]})
    qtbot.addWidget(again)
    v = again.values()
    assert v["model_config"] == "/models/tiny.json" and v["data"] == ["/data/a.txt", "/data/b.jsonl"]
    assert v["seq_len"] == 128 and v["micro_batch"] == 3 and v["host"] == "box" and v["extra"] == "--lr 1e-4"
    assert v["name"] is None  # a run name is per run

    from_plan = LaunchDialog(HOSTS, {"model": "gpt2", "model_config": None, "seq_len": 256, "spot": False})
    qtbot.addWidget(from_plan)
    v = from_plan.values()
    assert v["model"] == "gpt2" and v["model_config"] is None  # the plan's model, not last run's config
    assert v["seq_len"] == 256 and v["data"] == ["/data/a.txt", "/data/b.jsonl"]


def test_merge_order() -> None:
    merged = merged_settings({"seq_len": 64, "data": ["x"]}, {"seq_len": None, "epochs": 2}, {"data": ["demo"]})
    assert merged == {"seq_len": 64, "data": ["x"], "epochs": 2}


def test_launch_this_plan_from_a_preset_uses_its_hugging_face_id(qtbot: Any) -> None:
    dialog = LaunchDialog(HOSTS, {"model": "llama-3.1-8b", "model_config": None, "seq_len": 2048})
    qtbot.addWidget(dialog)
    assert dialog.model_edit.text() == "meta-llama/Llama-3.1-8B"
    args = dialog.request().trainer_args
    assert args[args.index("--model") + 1] == "meta-llama/Llama-3.1-8B"
    custom = LaunchDialog(HOSTS, {"model": "my-org/my-model"}, remember=False)
    qtbot.addWidget(custom)
    assert custom.model_edit.text() == "my-org/my-model"


def test_a_budget_on_a_host_without_a_price_is_refused_at_the_field(qtbot: Any) -> None:
    dialog = LaunchDialog(HOSTS, {"model_config": "/models/tiny.json", "data": ["/data/a.txt"]})
    qtbot.addWidget(dialog)
    dialog.host_combo.setCurrentIndex(0)  # this machine: no price
    dialog.budget_spin.setValue(5.0)
    problem = dialog.validate()
    assert problem is not None and problem.startswith("Budget: This machine has no price per GPU-hour")
    assert "Hosts pane" in problem and "--" not in problem  # the window's words, not CLI flags
    dialog.host_combo.setCurrentIndex(1)  # $2.00 per GPU-hour: the budget can be reached
    assert dialog.validate() is None
    dialog.host_combo.setCurrentIndex(0)
    dialog.budget_spin.setValue(0.0)  # no budget: fine without a price
    assert dialog.validate() is None


def test_settings_fitted_by_the_comparison_are_shown_and_launched(qtbot: Any) -> None:
    """A plan whose own settings do not fit its GPU launches with the ones compare fitted: the fields
    hold them, a note says so, and the trainer gets them (FSDP as --fsdp)."""
    from PySide6.QtWidgets import QLabel

    from gpuplanner.ui.runs.launch_request import trainer_args

    settings = {
        "model": "gpt2",
        "micro_batch": 2,
        "grad_accum": 16,
        "grad_checkpointing": "full",
        "gpus": 2,
        "extra": "--fsdp",
        "fitted": ["micro-batch 2 x 16 accumulation", "FSDP over 2 GPUs"],
    }
    dialog = LaunchDialog(HOSTS, settings)
    qtbot.addWidget(dialog)
    note = dialog.findChild(QLabel, "fittedNote")
    assert note is not None and "micro-batch 2 x 16 accumulation" in note.text()
    args = trainer_args(dialog.values())
    assert args[args.index("--micro-batch") + 1] == "2" and args[args.index("--grad-accum") + 1] == "16"
    assert args[args.index("--grad-checkpointing") + 1] == "every" and "--fsdp" in args
    plain = LaunchDialog(HOSTS, {"model": "gpt2"})
    qtbot.addWidget(plain)
    assert plain.findChild(QLabel, "fittedNote") is None


def test_a_command_of_ones_own_with_workdir_and_environment(qtbot: Any) -> None:
    checked: list[Any] = []
    dialog = LaunchDialog(HOSTS, {}, on_check=lambda values, d: checked.append(values))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert not dialog.command_box.isVisible() and dialog.model_box.isVisible()
    dialog.command_radio.setChecked(True)
    # only what applies to a command shows: no trainer settings, no benchmark of them
    assert dialog.command_box.isVisible() and not dialog.model_box.isVisible() and not dialog.train_box.isVisible()
    assert not dialog.measure_button.isVisible() and dialog.launch_button.isVisible()
    assert dialog.windowTitle() == "Launch a command"
    assert dialog.validate() == "Command: what to run, e.g. python train.py (or choose the bundled trainer)."
    dialog.command_edit.setText('torchrun --nproc-per-node 2 "my train.py" --lr 1e-4')
    dialog.workdir_edit.setText("/home/me/proj")
    dialog.env_edit.setPlainText("HF_HOME=/data/hf\n# a comment\n\nWANDB_MODE=offline\n1BAD=x")
    assert dialog.validate() == "Environment: line 5: NAME=VALUE with a name of letters, digits and _, not '1BAD=x'"
    dialog.env_edit.setPlainText("HF_HOME=/data/hf\nWANDB_MODE=offline")
    dialog.command_edit.setText('python "unclosed')
    assert dialog.validate() is not None and dialog.validate().startswith("Command: ")
    dialog.command_edit.setText('torchrun --nproc-per-node 2 "my train.py" --lr 1e-4')
    dialog.gpus_spin.setValue(2)
    request = dialog.request()
    assert request.command == ["torchrun", "--nproc-per-node", "2", "my train.py", "--lr", "1e-4"]
    assert request.trainer_args == [] and request.workdir == "/home/me/proj" and request.gpus == 2
    assert request.env == {"HF_HOME": "/data/hf", "WANDB_MODE": "offline"}
    dialog.accept()
    assert dialog.result() == LaunchDialog.DialogCode.Accepted and checked == []  # no trainer checks for a command
    again = LaunchDialog(HOSTS, {})
    qtbot.addWidget(again)
    assert again.command_mode and again.request().command == request.command  # remembered
    again.trainer_radio.setChecked(True)
    assert again.request().command == [] and again.request().env == {}
