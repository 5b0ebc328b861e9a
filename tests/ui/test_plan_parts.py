"""The details' small stacked bars (issue 29, "Also"): the step's parts and the cost's parts of the described
option, each part's number on hover, and one sentence of verdict."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QPoint

from gpuplanner.ui.plan.parts_bar import PartsBar
from gpuplanner.ui.plan.plan_pane import PlanPane
from gpuplanner.ui.plan.plan_parts import cost_parts, step_seconds
from tests.ui.helpers import wait_for_result


def test_the_step_bar_holds_the_step_models_parts(plan_pane: PlanPane) -> None:
    step = plan_pane.focus.plan.throughput.step
    assert step is not None
    bar = plan_pane.details_view.parts.step_bar
    parts = dict(bar.parts)
    assert parts["compute"] == pytest.approx(step.compute_s) and parts["recompute"] == pytest.approx(step.recompute_s)
    assert bar.total == pytest.approx(step.step_s)
    assert bar.label_text() == f"Step {step_seconds(step.step_s)}"
    # hovering a part gives its number and share
    name, value, rect = bar.segments()[0]
    assert bar.part_at(rect.center().x()) == (name, value)
    assert (
        bar.part_text(name, value)
        == f"compute: {step_seconds(value)} ({value / step.step_s:.0%} of {step_seconds(step.step_s)})"
    )


def test_the_cost_bar_adds_up_to_the_options_cost(qtbot: Any, plan_pane: PlanPane) -> None:
    focus = plan_pane.focus
    assert focus.row is not None and focus.row.pricing == "spot"  # the example's recommended option
    bar = plan_pane.details_view.parts.cost_bar
    names = [name for name, _ in bar.parts]
    assert names[0] == "training" and "checkpoints" in names
    assert bar.total == pytest.approx(focus.plan.spot.cost_usd)
    on_demand = next(r for r in plan_pane.result.rows if r.usable and r.pricing == "on-demand")
    assert plan_pane.select_option(on_demand.gpu, on_demand.gpus, on_demand.pricing)
    assert bar.parts == (("GPU time", pytest.approx(on_demand.plan.on_demand_cost_usd)),)
    verdict = plan_pane.details_view.parts.verdict_label.text()
    assert verdict.startswith("Fits with ") and "% of each step is " in verdict and verdict.count(".") <= 3


def test_a_bar_draws_any_named_part(qtbot: Any, plan_pane: PlanPane) -> None:
    """Cost lines other than GPU time (storage, transfer) are drawn as they come, with their numbers."""
    parts = cost_parts(plan_pane.focus, extra=[("storage", 1.25), ("transfer", 0.0), ("egress", 0.5)])
    assert [name for name, _ in parts][-2:] == ["storage", "egress"]
    bar = PartsBar("Cost", lambda usd: f"${usd:.2f}")
    qtbot.addWidget(bar)
    bar.resize(400, 20)
    bar.set_parts(parts)
    bar.show()
    (storage,) = [(n, v, r) for n, v, r in bar.segments() if n == "storage"]
    assert storage[2].width() > 0 and bar.part_at(storage[2].center().x()) == ("storage", 1.25)
    assert bar.part_text("storage", 1.25).startswith("storage: $1.25 (")


def test_a_plan_that_does_not_fit_says_so_in_its_verdict(qtbot: Any, plan_pane: PlanPane) -> None:
    # 128k-token sequences: each checkpointed block's kept input alone (80 x 131072 x 8192 x 2 B, 160 GiB) is
    # more than any GPU holds, so no option of the table fits and the form's own plan is described
    values = {"model": "llama-3.1-70b", "method": "full", "gpu": "RTX 4090", "gpus": "1", "seq-len": "131072"}
    plan_pane.form.set_values(values)
    with qtbot.waitSignal(plan_pane.resultsUpdated, timeout=10_000):
        plan_pane.recalculate()
    wait_for_result(qtbot, plan_pane)
    verdict = plan_pane.details_view.parts.verdict_label.text()
    assert plan_pane.focus.why == "form" and plan_pane.focus.plan.fits is False
    needs = plan_pane.focus.plan.memory.total / 2**30
    assert needs > 1000
    assert verdict.startswith(f"Does not fit ({needs:,.1f} GiB per GPU)"), verdict
    bar = plan_pane.details_view.parts.step_bar
    assert bar.isVisible() and bar.mapTo(plan_pane, QPoint(0, 0)).y() < plan_pane.height() // 2
