"""The Plan form's fields for the planner's inputs are the shared table's (gpuplanner/app/plan_fields.py):
label with unit, tooltip (the CLI's --help text), group box and choices; its numbers are refused outside the
input layer's ranges, naming the field. A label or tooltip written out for the form alone fails here."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QWidget

from gpuplanner.app.plan_fields import PLAN_FIELDS
from gpuplanner.plan.inputs import CHOICES
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.ui.plan.plan_form import FormSection, PlanForm
from gpuplanner.ui.plan.plan_inputs import CHOICE_KEYS, inputs_from_values

GPUS = ["H100 SXM", "RTX 4090"]


@pytest.fixture
def form(qtbot: Any) -> PlanForm:
    widget = PlanForm(GPUS)
    qtbot.addWidget(widget)
    return widget


def _label_of(form: PlanForm, editor: QWidget) -> QLabel:
    (label,) = [label for label in form.findChildren(QLabel) if label.buddy() is editor]
    return label


def _group_of(editor: QWidget) -> str:
    parent = editor.parentWidget()
    while parent is not None and not isinstance(parent, FormSection):
        parent = parent.parentWidget()
    assert parent is not None
    return parent.name


def test_every_shown_input_has_the_tables_label_tooltip_group_and_choices(form: PlanForm) -> None:
    shown = [row for row in PLAN_FIELDS if row.shown_in_form]
    assert {row.flag for row in PLAN_FIELDS} - {row.flag for row in shown} == {"tokens"}
    for row in shown:
        editor = form.editors[row.flag]
        label = _label_of(form, editor)
        assert label.text() == row.form_label, row.flag
        assert label.toolTip() == row.help == editor.toolTip(), row.flag
        assert editor.accessibleName() == row.form_label
        assert _group_of(editor) == row.form_group, row.flag
        if row.kind == "choice":
            assert isinstance(editor, QComboBox)
            assert tuple(editor.itemText(i) for i in range(editor.count())) == CHOICES[row.flag]
        elif row.kind == "number":
            assert isinstance(editor, QLineEdit)
    assert form.editors["gpu"].toolTip().startswith("A catalog GPU, or GPU:COUNT")
    assert _label_of(form, form.editors["micro-batch"]).text() == "Micro-batch (sequences/GPU)"
    # the form's own fields keep their own texts
    assert _label_of(form, form.editors["model-source"]).text() == "Model from"
    assert set(CHOICE_KEYS) == set(CHOICES)


def test_the_forms_numbers_are_refused_outside_the_input_layers_ranges(form: PlanForm) -> None:
    for row in PLAN_FIELDS:
        if row.range is None or not row.shown_in_form:
            continue
        values = {**form.values(), row.flag: f"{row.range.high * 10 + 1:g}"}
        if row.flag == "params":
            values["model-source"] = "parameter count"
        for other in row.exclusive_with:  # only this one given
            if other != row.flag and other in values and other not in ("model", "model-config"):
                values[other] = ""
        with pytest.raises(PlanInputError) as refused:
            inputs_from_values(values)
        assert refused.value.field == row.flag
        assert row.range.describe() in refused.value.message
    inputs = inputs_from_values({**form.values(), "micro-batch": "3", "pricing": "spot", "memory": "trace"})
    assert (inputs.micro_batch, inputs.pricing, inputs.memory) == (3, "spot", "trace")
