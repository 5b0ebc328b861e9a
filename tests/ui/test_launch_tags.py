"""The launch dialog's Tags field: key=value pairs go with the run; a bad tag is refused at the field."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt

from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

HOSTS = [("local", "This machine", None), ("box", "box (SSH)", 2.0)]


def test_tags_field_fills_the_request_and_refuses_bad_tags(qtbot: Any) -> None:
    dialog = LaunchDialog(HOSTS, {"model_config": "/models/tiny.json", "data": ["/data/a.txt"]})
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.keyClicks(dialog.tags_edit, "project=search, owner=ana")
    assert dialog.validate() is None
    assert dialog.request().tags == {"project": "search", "owner": "ana"}
    for bad, needle in (("foo", "'foo' is not key=value"), ("=x", "empty key"), ("a=1 a=2", "given twice")):
        dialog.tags_edit.selectAll()
        qtbot.keyClick(dialog.tags_edit, Qt.Key.Key_Delete)
        qtbot.keyClicks(dialog.tags_edit, bad)
        problem = dialog.validate()
        assert problem is not None and problem.startswith("Tags: ") and needle in problem, problem
    dialog.tags_edit.clear()
    assert dialog.validate() is None and dialog.request().tags == {}
