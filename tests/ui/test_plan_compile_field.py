"""The Plan form's torch.compile switch (issue 24): read into the inputs, reopened from a saved plan's
inputs, shown among the plan's settings."""

from __future__ import annotations

from typing import Any

from gpuplanner.ui.plan.plan_form import PlanForm
from gpuplanner.ui.plan.plan_inputs import inputs_from_values, values_from_inputs
from gpuplanner.ui.plan.plan_settings_text import settings_rows


def test_the_form_sets_and_reopens_it(qtbot: Any) -> None:
    form = PlanForm(["RTX 4090"])
    qtbot.addWidget(form)
    assert inputs_from_values(form.values()).compile is False
    form.set_value("compile", "on")
    inputs = inputs_from_values(form.values())
    assert inputs.compile is True
    document = {"compile": True, "engine": "torchtune"}
    assert values_from_inputs(document)["compile"] == "on"
    assert values_from_inputs({"compile": False})["compile"] == "off"
    assert ("torch.compile", "on") in settings_rows(document)
