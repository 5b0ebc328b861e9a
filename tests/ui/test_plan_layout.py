"""The Plan pane as a new user meets it at 1280x800 and 1024x700 (issue 29, items 2 and 3): the table shows at
least 8 rows without sideways scrolling, no GiB value elides, the chart's legend and title lie inside the
chart, the headline and memory bar stay in view, the memory bar's parts say what holds the memory, and the
form puts the deadline and budget early."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QRect, QRectF, Qt
from PySide6.QtWidgets import QComboBox, QStyleOptionViewItem, QWidget

from gpuplanner.ui.plan.compare_model import COLUMNS
from gpuplanner.ui.plan.memory_bar import RUNTIME, STEP_TEMPORARIES, bar_height, title_lines
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import wait_for_result

# the Plan pane's size in a window of that size (less the sidebar, the menu and the status bar)
PANE_1280 = (1160, 760)
PANE_1024 = (904, 650)
# a 70B full fine-tune that fits no option of the table: 32k-token sequences keep more activations on each
# GPU than FSDP over 8 of the largest leaves room for (at the default 2k-token sequences it fits 8 MI300X)
PLAN_70B = {
    "model": "llama-3.1-70b",
    "method": "full",
    "gpu": "RTX 4090",
    "gpus": "1",
    "micro-batch": "1",
    "seq-len": "32768",
}


def show(qtbot: Any, pane: PlanPane, size: tuple[int, int], values: dict[str, str] | None = None) -> None:
    if values:
        pane.form.set_values(values)
        with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
            pane.recalculate()
        wait_for_result(qtbot, pane)
    pane.resize(*size)
    qtbot.waitUntil(lambda: pane.width() == size[0] and pane.height() == size[1], timeout=5_000)
    qtbot.wait(30)  # the layouts' posted events (no clock is asserted on)


def inside(widget: QWidget, ancestor: QWidget) -> bool:
    """Whether all of ``widget`` lies inside ``ancestor`` and is shown (not scrolled or clipped away)."""
    top_left = widget.mapTo(ancestor, widget.rect().topLeft())
    rect = QRect(top_left, widget.size())
    return (
        widget.isVisible() and ancestor.rect().contains(rect) and widget.visibleRegion().boundingRect() == widget.rect()
    )


def whole_rows(pane: PlanPane) -> int:
    table = pane.table
    viewport = table.viewport().rect()
    return sum(1 for r in range(pane.proxy.rowCount()) if viewport.contains(table.visualRect(pane.proxy.index(r, 1))))


def elided_cells(pane: PlanPane, name: str) -> list[str]:
    """The texts of a column's visible cells that do not fit their cell."""
    table, column = pane.table, [c[1] for c in COLUMNS].index(name)
    metrics, width = table.fontMetrics(), table.columnWidth(column)
    return [
        text
        for r in range(pane.proxy.rowCount())
        if (text := pane.proxy.index(r, column).data()) and metrics.horizontalAdvance(text) + 8 > width
    ]


def chart_texts_outside(pane: PlanPane) -> list[str]:
    """The chart's legend labels and title that reach outside the chart's view."""
    chart = pane.chart
    view = QRectF(chart.viewport().rect())
    items = [(label.text, label) for _sample, label in chart.legend.items]
    title = chart.getPlotItem().titleLabel
    if title.isVisible() and title.text:
        items.append((title.text, title))
    out = []
    for text, item in items:
        rect = chart.mapFromScene(item.sceneBoundingRect()).boundingRect()
        if not view.contains(QRectF(rect)):
            out.append(f"{text} at {rect}")
    return out


@pytest.mark.parametrize("values", [None, PLAN_70B], ids=["first-plan", "70b"])
def test_at_1280x800_the_table_shows_8_rows_whole_and_nothing_is_cut(
    qtbot: Any, plan_pane: PlanPane, values: dict[str, str] | None
) -> None:
    show(qtbot, plan_pane, PANE_1280, values)
    assert plan_pane.proxy.rowCount() >= 8
    assert whole_rows(plan_pane) >= 8, plan_pane.splitter.sizes()
    assert not plan_pane.table.horizontalScrollBar().isVisible()
    assert not elided_cells(plan_pane, "mem_gib")
    assert not elided_cells(plan_pane, "reason"), "a short phrase: the whole reason is in the tooltip"
    assert not chart_texts_outside(plan_pane)
    assert inside(plan_pane.recommendation_label, plan_pane) and inside(plan_pane.memory_bar, plan_pane)
    if values:  # the reason in full is the row's tooltip
        row = plan_pane.proxy.index(0, len(COLUMNS) - 1)
        assert row.data().startswith("needs 1,")
        assert "GiB usable" in row.data(Qt.ItemDataRole.ToolTipRole)


@pytest.mark.parametrize("values", [None, PLAN_70B], ids=["first-plan", "70b"])
def test_at_1024x700_the_headline_and_memory_bar_stay_and_nothing_scrolls_sideways(
    qtbot: Any, plan_pane: PlanPane, values: dict[str, str] | None
) -> None:
    show(qtbot, plan_pane, PANE_1024, values)
    assert inside(plan_pane.recommendation_label, plan_pane)
    assert inside(plan_pane.memory_bar, plan_pane)
    bar = plan_pane.memory_bar  # its title whole, on two lines where one is too narrow ("does NOT fit ...")
    titles = title_lines(bar.view, bar.width() - 12, bar.font())
    assert not any("…" in line for line in titles) and bar.height() >= bar_height(bar.view, bar.width(), bar.font())
    assert not plan_pane.table.horizontalScrollBar().isVisible()
    assert not elided_cells(plan_pane, "mem_gib")
    assert whole_rows(plan_pane) >= 4
    assert not chart_texts_outside(plan_pane)


def test_the_70b_memory_bar_names_what_holds_the_memory(qtbot: Any, plan_pane: PlanPane) -> None:
    show(qtbot, plan_pane, PANE_1280, PLAN_70B)
    view = plan_pane.memory_bar.view
    memory = plan_pane.focus.plan.memory
    assert view.total_gib == pytest.approx(memory.total / 2**30)
    parts = dict(view.parts)
    assert "overhead" not in parts  # no one "overhead" of hundreds of GiB
    assert parts[STEP_TEMPORARIES] > 100 and parts[RUNTIME] < 0.1 * view.total_gib
    assert view.moment == "optimizer-step"
    # activations are freed by the optimizer step: not drawn as "0.0", and the tooltip says when they peak
    assert "activations" not in dict(view.shown_parts)
    assert "backward pass peaks at" in plan_pane.memory_bar.toolTip()


def test_the_first_plans_memory_bar_shows_its_activations(qtbot: Any, plan_pane: PlanPane) -> None:
    view = plan_pane.memory_bar.view
    shown = dict(view.shown_parts)
    assert (
        shown["activations"] == pytest.approx(plan_pane.focus.plan.memory.activations / 2**30)
        and shown["activations"] > 0.5
    )


def test_the_form_asks_for_deadline_and_budget_early_and_folds_the_spot_inputs(qtbot: Any, plan_pane: PlanPane) -> None:
    form = plan_pane.form
    chain, widget = [], form.editors["model-source"]
    for _ in range(200):  # the tab order from the first field
        chain.append(widget)
        widget = widget.nextInFocusChain()
        if widget is form.editors["model-source"]:
            break
    editors = {id(e): key for key, e in form.editors.items()}
    order = [editors[id(w)] for w in chain if id(w) in editors]
    assert order.index("deadline-hours") < order.index("samples") < order.index("gpu")
    assert order.index("budget-usd") < 15
    spot = form.sections["Spot"]
    assert spot.collapsed and not form.editors["spot-discount"].isVisible()
    # an input error in a folded section opens it
    plan_pane.form.set_values({"spot-discount": "7"})
    plan_pane.recalculate()
    qtbot.waitUntil(lambda: plan_pane.last_error is not None, timeout=10_000)
    assert not spot.collapsed and form.editors["spot-discount"].isVisible()


def test_a_long_input_error_is_shown_whole(qtbot: Any, plan_pane: PlanPane) -> None:
    show(qtbot, plan_pane, PANE_1024)
    plan_pane.form.set_values({"samples": "lots"})
    plan_pane.recalculate()
    qtbot.waitUntil(lambda: plan_pane.last_error is not None, timeout=10_000)
    label = plan_pane.form.error_labels["samples"]
    qtbot.waitUntil(label.isVisible, timeout=5_000)
    qtbot.wait(30)
    assert len(label.text()) > 40 and label.width() < label.fontMetrics().horizontalAdvance(label.text())  # it wraps
    assert label.height() >= label.heightForWidth(label.width()), (label.height(), label.heightForWidth(label.width()))


def test_the_gpu_list_shows_each_gpus_memory(qtbot: Any, plan_pane: PlanPane) -> None:
    combo = plan_pane.form.editors["gpu"]
    assert isinstance(combo, QComboBox)
    index = combo.findText("RTX 4090")
    option = QStyleOptionViewItem()
    combo.itemDelegate().initStyleOption(option, combo.model().index(index, 0))
    memory = plan_pane.catalog.gpu("RTX 4090").memory_gib
    assert option.text == f"RTX 4090  ·  {memory:,.1f} GiB"
    combo.setCurrentIndex(index)
    assert plan_pane.form.values()["gpu"] == "RTX 4090"  # the field's value stays the name


def test_columns_left_out_when_narrow_come_back_when_wide(qtbot: Any, plan_pane: PlanPane) -> None:
    names = [c[1] for c in COLUMNS]
    provider = names.index("provider")
    show(qtbot, plan_pane, PANE_1024)
    qtbot.waitUntil(lambda: plan_pane.table.isColumnHidden(provider), timeout=5_000)
    show(qtbot, plan_pane, (1920 - 120, 1080 - 60))
    qtbot.waitUntil(lambda: not plan_pane.table.isColumnHidden(provider), timeout=5_000)
    assert not any(plan_pane.table.isColumnHidden(names.index(n)) for n in ("p90_cost_usd", "fits"))
