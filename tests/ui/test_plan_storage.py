"""The Plan pane's storage inputs (issue 31 item 3): a dataset size and where it lives add the bill's storage
and transfer lines to the result, the comparison ranks by the total, and a bad size is named at its field."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplanner.plan.storage_cost import describe_bill, plan_bill
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import wait_for_result
from tests.ui.test_plan_pane import choose, type_into


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def test_dataset_size_and_place_add_storage_and_transfer(qtbot: Any, pane: PlanPane) -> None:
    assert "storage" not in pane.summary_label.text()  # no size: compute only
    choose(pane, "data-location", "other-provider")
    choose(pane, "data-provider", "gcp")
    type_into(qtbot, pane, "dataset-gb", "2000")
    qtbot.waitUntil(lambda: pane.result is not None and pane.result.request.storage is not None, timeout=10_000)
    wait_for_result(qtbot, pane)
    storage = pane.result.request.storage
    assert storage is not None
    assert (storage.dataset_gb, storage.data_location, storage.data_provider) == (2000.0, "other-provider", "gcp")
    shown = pane.summary_label.text()
    # 2,000 GB leaving GCP at its $0.12/GB internet egress = $240.00, whatever option the details describe
    assert "transfer $240.00: egress of the 2,000 GB dataset from gcp (another provider) at $0.12/GB" in shown
    assert "+ storage $" in shown and "+ transfer $240.00" in shown
    rows = pane.result.rows
    totals = [row.total_usd for row in rows if row.usable and row.total_usd is not None]
    assert totals and totals == sorted(totals)
    # the recommendation names the total, and selecting a row shows its total in the headline
    assert "(compute + storage + transfer)" in pane.result.recommendation
    best = next(row for row in rows if row.usable)
    assert pane.select_option(best.gpu, best.gpus, best.pricing)
    qtbot.waitUntil(lambda: "with storage and transfer" in pane.recommendation_label.text(), timeout=5000)
    assert f"${best.total_usd:,.2f}" in pane.recommendation_label.text()
    focus_bills = [plan_bill(row.plan) for row in rows if row.usable]
    assert any(bill is not None and " ".join(describe_bill(bill)[0].split()) in shown for bill in focus_bills)


def test_a_bad_dataset_size_is_named_at_its_field(qtbot: Any, pane: PlanPane) -> None:
    type_into(qtbot, pane, "dataset-gb", "-2")
    qtbot.waitUntil(lambda: pane.form.error_text("dataset-gb") != "", timeout=5000)
    assert "GB" in pane.form.error_text("dataset-gb")
