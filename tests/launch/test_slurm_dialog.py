"""The Hosts pane's add dialog makes a Slurm login node: its settings show for that kind only, bad
settings are named in the dialog, and what it returns is stored and read back as entered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplanner.launch.hosts import add_host, get_host
from gpuplanner.ui.dialogs.host_dialog import HostDialog


def test_dialog_adds_and_edits_a_slurm_login_node(qtbot: Any, db_path: Path) -> None:
    dialog = HostDialog()
    qtbot.addWidget(dialog)
    form = dialog._form
    assert not form.isRowVisible(dialog.partition_edit)  # an SSH host by default
    dialog.kind_combo.setCurrentIndex(dialog.kind_combo.findData("slurm"))
    assert form.isRowVisible(dialog.partition_edit) and dialog.windowTitle() == "Add Slurm cluster"
    dialog.name_edit.setText("hpc")
    dialog.hostname_edit.setText("login.hpc.example.org")
    dialog.partition_edit.setText("gpu")
    dialog.gpus_spin.setValue(4)
    dialog.nodes_spin.setValue(2)
    dialog.time_edit.setText("soon")
    dialog.accept()
    assert dialog.result() != HostDialog.DialogCode.Accepted
    assert "time_limit" in dialog.error_label.text() and "'soon'" in dialog.error_label.text()
    dialog.time_edit.setText("12:00:00")
    dialog.requeue_check.setChecked(True)
    dialog.root_edit.setText("/shared/me/gp")
    dialog.price_spin.setValue(2.5)
    dialog.accept()
    assert dialog.result() == HostDialog.DialogCode.Accepted
    add_host(db_path, dialog.result_host())
    host = get_host(db_path, "hpc")
    assert (host.kind, host.hostname, host.remote_root, host.price_usd_per_gpu_hour) == (
        "slurm",
        "login.hpc.example.org",
        "/shared/me/gp",
        2.5,
    )
    s = host.slurm_settings
    assert (s.partition, s.gpus_per_node, s.nodes, s.time_limit, s.requeue) == ("gpu", 4, 2, "12:00:00", True)

    edit = HostDialog(host)
    qtbot.addWidget(edit)
    assert edit.kind == "slurm" and edit._form.isRowVisible(edit.partition_edit)
    assert (edit.partition_edit.text(), edit.gpus_spin.value(), edit.time_edit.text()) == ("gpu", 4, "12:00:00")
    edit.kind_combo.setCurrentIndex(edit.kind_combo.findData("ssh"))  # turned into a plain SSH host
    assert not edit._form.isRowVisible(edit.partition_edit)
    plain = edit.result_host()
    assert (plain.kind, plain.slurm) == ("ssh", None)
