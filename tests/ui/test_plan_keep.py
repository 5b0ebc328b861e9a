"""The Plan form's "Keep as given": pinned settings are never fitted per GPU, unpinned ones are and Launch
uses them; the choice is a form value (saved with plans and the window's settings)."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt

from gpuplanner.commands.plan import PIN_FLAGS
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.ui.plan.compare_model import EXPORT_COLUMNS
from gpuplanner.ui.plan.plan_form import KeepList
from gpuplanner.ui.plan.plan_form_fields import KEEP_CHOICES, default_values
from gpuplanner.ui.plan.plan_inputs import (
    inputs_with_form,
    kept_settings,
    pinned_fields,
    request_from_values,
    values_from_inputs,
)
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import select_form_option, wait_for_result

# 8 x 4,096 tokens per micro-batch with full checkpointing: an 8B LoRA needs ~75 GiB, so a 48 GB RTX A6000
# fits it only with a smaller micro-batch (the optimizer is always kept and one GPU has nothing to shard).
TIGHT = {"gpu": "RTX A6000", "micro-batch": "8", "grad-accum": "2", "seq-len": "4096", "grad-checkpointing": "full"}


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def a6000_row(pane: PlanPane) -> Any:
    return next(r for r in pane.result.rows if r.gpu == "RTX A6000" and r.gpus == 1 and r.pricing == "on-demand")


def shown_cells(pane: PlanPane, row: Any) -> dict[str, str]:
    """The table's texts of one option's row, by column name."""
    model = pane.model
    source = next(i for i, r in enumerate(model.rows()) if r is row)
    index = pane.proxy.mapFromSource(model.index(source, 0))
    return {name: pane.proxy.index(index.row(), c).data() for c, name in enumerate(EXPORT_COLUMNS)}


def shown_tip(pane: PlanPane, row: Any) -> str:
    """The tooltip of one option's row (its whole reason, or the settings fitted to it)."""
    source = next(i for i, r in enumerate(pane.model.rows()) if r is row)
    return str(pane.model.data(pane.model.index(source, 0), Qt.ItemDataRole.ToolTipRole))


def test_pinned_micro_batch_does_not_fit_unpinned_is_fitted_and_launched(qtbot: Any, pane: PlanPane) -> None:
    keep = pane.form.editors["keep"]
    assert isinstance(keep, KeepList)
    pane.form.set_values(TIGHT)
    pane.recalculate()
    wait_for_result(qtbot, pane)

    # unpinned: the option fits with a smaller micro-batch and more accumulation, same effective batch
    row = a6000_row(pane)
    assert row.plan.fits and row.usable
    assert row.fitted == ("micro-batch 2 x 8 accumulation",)
    assert (row.plan.setup.micro_batch, row.plan.setup.grad_accum) == (2, 8)
    cells = shown_cells(pane, row)
    assert cells["fits"] == "yes" and cells["reason"] == "fitted settings"
    assert "with fitted settings (micro-batch 2 x 8 accumulation)" in shown_tip(pane, row)
    select_form_option(pane)  # Launch runs the option the details describe
    with qtbot.waitSignal(pane.launchRequested) as launched:
        pane.launch()
    settings = launched.args[0]
    assert (settings["micro_batch"], settings["grad_accum"]) == (2, 8)
    assert settings["fitted"] == ["micro-batch 2 x 8 accumulation"]

    # pinned by ticking the box (as a user does): the same option does not fit, and nothing was fitted
    box = keep.boxes["micro-batch"]
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))  # on its indicator
    wait_for_result(qtbot, pane)
    assert pane.form.values()["keep"].split(",") == ["micro-batch", "method"]
    row = a6000_row(pane)
    assert row.plan.fits is False and not row.usable and row.fitted == ()
    assert (row.plan.setup.micro_batch, row.plan.setup.grad_accum) == (8, 2)
    cells = shown_cells(pane, row)
    assert cells["fits"] == "no" and cells["reason"].startswith("needs ")
    assert not any("micro-batch" in change for r in pane.result.rows for change in r.fitted)
    select_form_option(pane)  # Launch runs the option the details describe
    with qtbot.waitSignal(pane.launchRequested) as launched:
        pane.launch()
    assert (launched.args[0]["micro_batch"], launched.args[0]["grad_accum"]) == (8, 2)
    assert "fitted" not in launched.args[0]


def test_kept_checkpointing_is_never_changed(qtbot: Any, pane: PlanPane) -> None:
    """With checkpointing off and kept, no row turns it on; unkept, some row does."""
    values = {**TIGHT, "grad-checkpointing": "none", "micro-batch": "2", "grad-accum": "8"}
    pane.form.set_values({**values, "keep": "checkpointing"})
    pane.recalculate()
    wait_for_result(qtbot, pane)
    assert all(r.plan.setup.grad_checkpointing == "none" for r in pane.result.rows)
    pane.form.set_values({**values, "keep": ""})
    pane.recalculate()
    wait_for_result(qtbot, pane)
    assert any(r.plan.setup.grad_checkpointing != "none" for r in pane.result.rows)


def test_the_optimizer_is_always_kept(pane: PlanPane) -> None:
    keep = pane.form.editors["keep"]
    assert isinstance(keep, KeepList)
    box = keep.boxes["optimizer"]
    assert box.isChecked() and not box.isEnabled()
    keep.setText("")
    assert box.isChecked() and keep.text() == ""
    assert pinned_fields({"keep": ""}) == ("optimizer",)
    assert not any(r.plan.setup.optimizer == "adamw-8bit" for r in pane.result.rows)


def test_keep_is_a_form_value_saved_with_the_plan() -> None:
    values = {**default_values(), "keep": "sharding,micro-batch"}
    assert kept_settings(values) == ("micro-batch", "sharding", "optimizer")  # the method not kept: QLoRA allowed
    assert pinned_fields(values) == ("micro_batch", "sharding", "optimizer")
    document = inputs_with_form(request_from_values(values), values)
    assert values_from_inputs(document)["keep"] == "sharding,micro-batch"


def test_keep_names_are_the_clis_pin_names() -> None:
    """Each kept setting is a `compare --pin` name; Method stands for `compare --allow-qlora` (unticked)."""
    assert {name: field for name, field, _ in KEEP_CHOICES if name != "method"} == PIN_FLAGS
    assert default_values()["keep"] == "method"  # QLoRA only when the user allows it


def test_qlora_only_when_the_method_is_not_kept(qtbot: Any, pane: PlanPane) -> None:
    """An 8B LoRA's 16-bit weights alone overflow a 16 GB T4: kept (the default) it does not fit; with Method
    unticked the comparison fits it as QLoRA and Launch runs QLoRA."""
    pane.form.set_values({"gpu": "T4", "micro-batch": "4", "grad-accum": "4", "seq-len": "1024"})
    pane.recalculate()
    wait_for_result(qtbot, pane)
    t4 = [r for r in pane.result.rows if r.gpu == "T4" and r.gpus == 1]  # (8 of them fit with FSDP)
    assert t4 and all(r.plan.fits is False and r.plan.setup.method == "lora" for r in t4)
    keep = pane.form.editors["keep"]
    assert isinstance(keep, KeepList) and keep.boxes["method"].isChecked()
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        keep.boxes["method"].setChecked(False)
    wait_for_result(qtbot, pane)
    assert "method" not in pane.form.values()["keep"].split(",")
    row = next(r for r in pane.result.rows if r.gpu == "T4" and r.gpus == 1 and r.pricing == "on-demand")
    assert row.plan.fits and row.plan.setup.method == "qlora" and row.fitted[0] == "QLoRA (4-bit base weights)"
    assert shown_cells(pane, row)["reason"] == "fitted settings"
    assert "with fitted settings (QLoRA (4-bit base weights)" in shown_tip(pane, row)
    assert all(
        r.plan.setup.method == "lora"
        for r in pane.result.rows
        if r.plan.request.setup.method == "lora" and not r.fitted
    )
    select_form_option(pane)  # Launch runs the option the details describe
    with qtbot.waitSignal(pane.launchRequested) as launched:
        pane.launch()
    assert launched.args[0]["method"] == "qlora"


def test_an_unknown_kept_setting_names_the_field() -> None:
    with pytest.raises(PlanInputError) as caught:
        kept_settings({"keep": "micro-batch,precision"})
    assert caught.value.field == "keep" and "'precision'" in caught.value.message
