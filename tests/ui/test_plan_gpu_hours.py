"""The Plan pane's "Max GPU-hours" field: options over the cap are marked like those over budget."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplanner.plan.compare import compare
from gpuplanner.planning import comparison_request
from gpuplanner.ui.plan.compare_model import EXPORT_COLUMNS
from gpuplanner.ui.plan.plan_form_fields import default_values
from gpuplanner.ui.plan.plan_inputs import request_from_values
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import wait_for_result
from tests.ui.test_plan_pane import type_into


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def test_max_gpu_hours_field_marks_rows(qtbot: Any, pane: PlanPane, services: Any) -> None:
    column = EXPORT_COLUMNS.index("within_gpu_hours")
    assert pane.table.isColumnHidden(column)  # no cap: no column
    values = default_values()
    free = compare(comparison_request(request_from_values(values)), services.catalog)
    hours = sorted(r.plan.runtime.gpu_hours for r in free if r.usable and r.pricing == "on-demand")
    cap = round(hours[len(hours) // 2], 3)
    type_into(qtbot, pane, "max-gpu-hours", f"{cap}")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    assert pane.result is not None and pane.result.request.max_gpu_hours == cap
    assert not pane.table.isColumnHidden(column)
    expected = compare(comparison_request(request_from_values({**values, "max-gpu-hours": str(cap)})), services.catalog)
    shown = {
        (
            pane.proxy.index(r, EXPORT_COLUMNS.index("gpu")).data(),
            pane.proxy.index(r, EXPORT_COLUMNS.index("gpus")).data(),
            pane.proxy.index(r, EXPORT_COLUMNS.index("pricing")).data(),
        ): (pane.proxy.index(r, column).data(), pane.proxy.index(r, EXPORT_COLUMNS.index("reason")).data())
        for r in range(pane.proxy.rowCount())
    }
    over = [row for row in expected if row.plan.gpu_hours_ok is False]
    within = [row for row in expected if row.plan.gpu_hours_ok is True]
    assert over and within
    for row in over:
        mark, reason = shown[(row.gpu, str(row.gpus), row.pricing)]
        assert mark == "no" and "over GPU-h" in reason  # the short phrase; the tooltip has the whole reason
    for row in within:
        assert shown[(row.gpu, str(row.gpus), row.pricing)][0] == "yes"
    assert "GPU-hour cap" in pane.summary_label.text()


def test_bad_cap_is_named_at_the_field(qtbot: Any, pane: PlanPane) -> None:
    type_into(qtbot, pane, "max-gpu-hours", "-2")
    qtbot.waitUntil(lambda: pane.form.error_text("max-gpu-hours") != "", timeout=5000)
    assert "GPU-hours" in pane.form.error_text("max-gpu-hours")
