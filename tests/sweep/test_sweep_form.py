"""Issue 29 item 5: the Sweep pane's run form speaks the form's words (not the CLI's), its search-space
editor writes the TOML file the CLI reads, and the caps' verdict is never cut off."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect

from gpuplanner.sweep.space import SpaceError, load_space
from gpuplanner.ui.services import AppServices
from gpuplanner.ui.sweep.space_editor import SpaceRow, space_toml
from gpuplanner.ui.sweep.sweep_pane import SweepPane


@pytest.fixture
def pane(qtbot: Any, db_path: Path, tmp_path: Path) -> Any:
    widget = SweepPane(AppServices(db_path=db_path, config_dir=tmp_path / "config"))
    qtbot.addWidget(widget)
    widget.resize(1024, 700)
    widget.show()
    yield widget
    widget.shutdown()


def test_no_trainer_flags_is_a_form_message_on_the_field(qtbot: Any, pane: SweepPane) -> None:
    pane.flags_edit.setText("")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        pane.start_button.click()
    text = blocker.args[0]
    assert (
        text.startswith("Trainer flags: fill in the flags every trial gives the trainer")
        and text == pane.error_label.text()
    )
    assert "TRAINER FLAGS" not in text and "after --" not in text
    assert "border" in pane.flags_edit.styleSheet() and pane.runner is None
    pane.flags_edit.setText("--data x")
    pane.run_budget_edit.setText("5")
    pane.hosts_edit.setText("")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        pane.start_button.click()
    assert blocker.args[0] == "Hosts: name at least one host"
    assert pane.flags_edit.styleSheet() == "" and "border" in pane.hosts_edit.styleSheet()  # the mark moved


def test_the_space_editor_writes_the_toml_the_cli_reads(qtbot: Any, pane: SweepPane, db_path: Path) -> None:
    editor = pane.space_editor
    assert [r.name for r in editor.rows()] == ["lr"]  # a starter row
    editor.add_row("warmup_steps", "int", "0", "40")
    editor.add_row("micro_batch", "categorical", choices="4, 8, 16")
    pane.study_edit.setText("first-search")
    request = pane.run_request()
    assert Path(request.space) == db_path.parent / "searches" / "first-search.toml"
    space = load_space(request.space)  # the CLI's reader
    params = {p.name: p for p in space.params}
    assert (params["lr"].type, params["lr"].low, params["lr"].high, params["lr"].log) == ("float", 1e-4, 1e-2, True)
    assert (params["warmup_steps"].low, params["warmup_steps"].high, params["warmup_steps"].flag) == (
        0,
        40,
        "--warmup-steps",
    )
    assert params["micro_batch"].choices == (4, 8, 16) and params["micro_batch"].type == "categorical"
    # a file given instead wins over the rows (the TOML file option stays)
    other = db_path.parent / "mine.toml"
    other.write_text('[params.lr]\ntype = "float"\nlow = 0.001\nhigh = 0.1\n', encoding="utf-8")
    pane.space_edit.setText(str(other))
    assert pane.run_request().space == str(other)


def test_space_editor_rows_are_checked_like_a_file() -> None:
    with pytest.raises(SpaceError, match="params.lr: low must be a number"):
        space_toml([SpaceRow("lr", "float", "abc", "1")])
    with pytest.raises(SpaceError, match=r"params.lr: low \(1.0\) must be below high \(0.5\)"):
        space_toml([SpaceRow("lr", "float", "1", "0.5")])
    with pytest.raises(SpaceError, match="in two rows"):
        space_toml([SpaceRow("lr", "float", "0.1", "0.5"), SpaceRow("lr", "float", "0.1", "0.5")])
    with pytest.raises(SpaceError, match="it cannot be searched"):
        space_toml([SpaceRow("max_steps", "int", "1", "5")])
    assert 'choices = [true, false, "full"]' in space_toml([SpaceRow("x", "categorical", choices="true, false, full")])


def test_the_verdict_wraps_in_full_above_the_estimate(qtbot: Any, pane: SweepPane) -> None:
    caps = {"binding": "budget_usd", "budget_usd_share": 3.2, "max_gpu_hours_share": 1.4}
    caps |= {"finishes_under_cap": False, "trials_within_cap": 5}
    document = {"caps": caps, "search": {"budget_usd": 10.0, "max_gpu_hours": 2.0, "trials": 27}}
    pane._on_done(
        "plan", 0, (document, "<p>estimate</p>", SimpleNamespace(trials=27, budget_usd=10.0, max_gpu_hours=2.0))
    )
    label = pane.verdict_label
    qtbot.waitUntil(lambda: label.isVisible() and label.width() > 0)
    assert "Does not finish under the cap" in label.text() and "after 5 of 27 trials" in label.text()
    assert label.wordWrap() and label.height() >= label.heightForWidth(label.width())  # every line shown
    assert pane.rect().contains(QRect(label.mapTo(pane, QPoint(0, 0)), label.size()))  # inside the pane
    assert (pane.run_trials_spin.value(), pane.run_budget_edit.text(), pane.run_hours_edit.text()) == (27, "10", "2")
