"""The Plan pane's details follow the table's selected option (the recommended one when none is selected),
say which option they describe, and say exactly what to rent."""

from __future__ import annotations

import math
from typing import Any

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt

from gpuplanner.plan.compare import CompareRow
from gpuplanner.plan.planner import GIB
from gpuplanner.ui.human import human_hours
from gpuplanner.ui.plan.plan_details import option_key
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import wait_for_result


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def click_row(pane: PlanPane, row: CompareRow) -> None:
    """Select the table row of ``row`` through the selection model, as a click does."""
    source = pane.model.rows().index(row)
    index = pane.proxy.mapFromSource(pane.model.index(source, 0))
    pane.table.selectionModel().select(
        index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
    )


def usable_other(pane: PlanPane) -> CompareRow:
    """A usable option on another GPU than the recommended one."""
    rows = pane.result.rows
    best = next(r for r in rows if r.rank == 1)
    return next(r for r in rows if r.usable and r.gpu != best.gpu)


def test_details_describe_the_recommendation_until_a_row_is_selected(pane: PlanPane) -> None:
    rows = pane.result.rows
    best = next(r for r in rows if r.rank == 1)
    assert pane.focus.row == best and pane.focus.why == "recommended"
    assert pane.recommendation_label.text() == pane.result.recommendation
    assert "recommended option" in pane.focus_label.text()
    assert f"{best.gpus} x {best.gpu}" in pane.focus_label.text()
    assert pane.memory_bar.view.total_gib == pytest.approx(best.plan.memory.total / GIB)
    assert pane.memory_bar.view.gpu == best.gpu
    assert pane.summary_label.text().startswith(f"{best.gpus} x {best.gpu}: ")
    x, y = pane.chart.focus_point()
    assert x == pytest.approx(math.log10(best.hours)) and y == pytest.approx(best.cost_usd)


def test_selecting_another_row_moves_the_details_bar_and_chart_to_it(qtbot: Any, pane: PlanPane) -> None:
    other = usable_other(pane)
    before = (pane.memory_bar.view.total_gib, pane.summary_label.text())
    click_row(pane, other)
    assert pane.focus.why == "selected" and pane.focus.row == other
    bar = pane.memory_bar.view
    assert bar.gpu == other.gpu
    assert bar.total_gib == pytest.approx(other.plan.memory.total / GIB)
    assert bar.capacity_gib == pytest.approx(other.plan.capacity_gib)
    summary = pane.summary_label.text()
    assert (bar.total_gib, summary) != before
    assert summary.startswith(f"{other.gpus} x {other.gpu}: {other.plan.memory.total / GIB:.1f} GiB per GPU")
    assert f"{human_hours(other.plan.runtime.hours)}, " in summary  # "10 h 11 min", never "10.18 h"
    headline = pane.recommendation_label.text()
    assert headline.startswith(f"Selected: #{other.rank} {other.gpus} x {other.gpu}, {other.pricing}")
    assert "selected option" in pane.focus_label.text()
    x, y = pane.chart.focus_point()
    assert x == pytest.approx(math.log10(other.hours))
    # the selection survives a recalculation (the ranks move rows around) and follows its option
    pane.form.set_values({"epochs": "3"})
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.recalculate()
    wait_for_result(qtbot, pane)
    assert pane.focus.why == "selected" and option_key(pane.focus.row) == option_key(other)
    selected = pane.table.selectionModel().selectedRows()
    assert len(selected) == 1
    assert option_key(pane.model.rows()[pane.proxy.mapToSource(selected[0]).row()]) == option_key(other)
    # Esc in the table goes back to the recommendation
    pane.table.setFocus()
    qtbot.keyClick(pane.table, Qt.Key.Key_Escape)
    assert pane.focus.why == "recommended"
    assert pane.recommendation_label.text() == pane.result.recommendation


def test_the_details_say_exactly_what_to_rent(pane: PlanPane, services: Any) -> None:
    rows = pane.result.rows
    # an option run on fewer GPUs than its cheapest instance holds says the whole instance is billed
    partial = next(
        (r for r in rows if r.pricing == "on-demand" and r.plan.on_demand and r.plan.on_demand.billed_gpus > r.gpus),
        None,
    )
    for row in [r for r in rows if r.usable][:3] + ([partial] if partial else []):
        click_row(pane, row)
        choice = row.plan.on_demand if row.pricing == "on-demand" else row.plan.spot.price
        text = pane.rent_label.text()
        assert text.startswith(f"Rent at {choice.provider}: ")
        assert choice.instance_type in text
        assert f"region {choice.region or 'any'}" in text
        assert f"${choice.usd_per_gpu_hour:,.2f}/GPU-h" in text
        assert f"${choice.usd_per_gpu_hour * choice.billed_gpus:,.2f}/h per instance" in text
        assert f"prices as of {choice.as_of}" in text and choice.source in text
        counts = sorted({o.gpu_count for o in services.catalog.offers_for(row.gpu) if o.provider == choice.provider})
        assert f"{choice.provider} rents {row.gpu} in instances of {', '.join(map(str, counts))} GPU" in text
        idle = choice.billed_gpus - row.gpus
        assert (f"billed as a whole instance: {idle} GPU" in text) == (idle > 0)


def wait_new_result(qtbot: Any, pane: PlanPane, values: dict[str, str]) -> None:
    pane.form.set_values(values)
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.recalculate()
    wait_for_result(qtbot, pane)


def test_new_results_do_not_move_the_splitter(qtbot: Any, pane: PlanPane) -> None:
    qtbot.wait(50)
    before = pane.splitter.sizes()
    summary, note = pane.summary_label.text(), pane.form_note_label.isVisible()
    # a full fine-tune on a small card: the form's option does not fit (said at the top), every text changes
    wait_new_result(qtbot, pane, {"method": "full", "gpu": "RTX 4090", "grad-checkpointing": "none"})
    qtbot.wait(50)
    assert pane.summary_label.text() != summary and pane.form_note_label.isVisible() != note
    assert pane.splitter.sizes() == before
    # a handle the user dragged stays where it was put, whatever the pane's size
    pane.splitter.moveSplitter(before[0] + 40, 1)
    pane.splitter.splitterMoved.emit(before[0] + 40, 1)
    dragged = pane.splitter.sizes()
    wait_new_result(qtbot, pane, {"method": "lora", "gpu": "H100 SXM", "grad-checkpointing": "full"})
    assert pane.splitter.sizes() == dragged


def test_the_chart_gets_a_real_height_at_1920x1080(qtbot: Any, pane: PlanPane) -> None:
    pane.resize(1920 - 120, 1080 - 60)  # the Plan pane of a 1920x1080 window (sidebar, menu and status bar)
    qtbot.waitUntil(lambda: pane.chart.height() > 0 and pane.splitter.height() > 900, timeout=5_000)
    qtbot.wait(50)
    assert pane.chart.height() >= 0.3 * pane.splitter.height()
    details, table, chart = pane.splitter.sizes()
    assert chart >= 300 and table >= 200
    # the details get the height their text needs: no scroll bar where there is room for them
    assert not pane.details_scroll.verticalScrollBar().isVisible()


def test_why_not_wraps_instead_of_cutting_the_reason(qtbot: Any, pane: PlanPane) -> None:
    pane.resize(1000, 760)  # a narrow "Why not" column
    wait_new_result(
        qtbot, pane, {"method": "full", "grad-checkpointing": "none", "deadline-hours": "2", "budget-usd": "5"}
    )
    qtbot.wait(50)
    table = pane.table
    column = len(pane.model.COLUMNS) - 1
    style = table.style()
    margin = style.pixelMetric(style.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    width = table.columnWidth(column) - 2 * margin
    metrics = table.fontMetrics()
    wrapped = 0
    for r in range(pane.proxy.rowCount()):
        text = pane.proxy.index(r, column).data()
        if not text or text == "–":
            continue
        needed = metrics.boundingRect(0, 0, width, 10_000, int(Qt.TextFlag.TextWordWrap), text).height()
        assert table.rowHeight(r) >= needed, (text, table.rowHeight(r), needed)
        wrapped += metrics.horizontalAdvance(text) > width
    assert wrapped > 0, "the test needs reasons longer than the column"


def test_input_messages_name_the_field_in_the_windows_words(qtbot: Any, pane: PlanPane) -> None:
    pane.form.set_values({"epochs": ""})
    with qtbot.waitSignal(pane.inputError, timeout=5000):
        pane.recalculate()
    assert pane.status_label.text().startswith("Cannot plan: Epochs: needs a value.")
    pane.form.set_values({"epochs": "1", "spot-price": "1", "spot-discount": "0.5"})
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        pane.recalculate()
    key, message = blocker.args
    assert "--" not in message and '"Spot discount (share)"' in message  # the form's labels, not CLI flags
    assert "--" not in pane.form.error_text(key) and "--" not in pane.status_label.text()


def test_huge_hours_and_costs_keep_to_their_columns(pane: PlanPane) -> None:
    """5,000 epochs of a small model take years: the cells say "19k" hours and "2.5M" dollars instead of
    being cut ("19,..."), in the widths the table gives those columns."""
    from gpuplanner.ui.plan.compare_model import EXPORT_COLUMNS, _text

    hours, cost = EXPORT_COLUMNS.index("hours"), EXPORT_COLUMNS.index("cost_usd")
    assert [_text(hours, v) for v in (10.64, 999.9, 9047.2, 19_197.0, 2_000_000.0)] == [
        "10.6",
        "999.9",
        "9,047",
        "19k",
        "2.0M",
    ]
    assert [_text(cost, v) for v in (5.62, 9_999.99, 12_345.6, 2_500_000.0)] == ["5.62", "9,999.99", "12,346", "2.5M"]
    # and tiny ones (a 1M-parameter model on 100 samples) never read as zero
    assert _text(cost, 0.0000219) == "0.000022" and _text(hours, 0.00006) == "<0.1" and _text(hours, 0.06) == "0.1"
    metrics = pane.table.fontMetrics()
    for column, values in ((hours, (0.001, 9_999.0, 999_999.0, 99e6)), (cost, (0.0000219, 9_999.99, 999_999.0, 99e6))):
        for value in values:
            assert metrics.horizontalAdvance(_text(column, value)) + 8 <= pane.table.columnWidth(column), value


def test_a_longer_note_under_a_field_gets_its_height(qtbot: Any, pane: PlanPane) -> None:
    """The history's note grows from four lines to more (a parameter count names a longer model): its row
    grows with it instead of cutting the text at the top and the bottom."""
    label = pane.form.note_labels["calibration"]
    pane.resize(1280 - 120, 800 - 60)
    qtbot.wait(50)
    before = label.text()
    wait_new_result(qtbot, pane, {"model-source": "parameter count", "params": "1M", "samples": "100"})
    qtbot.wait(50)
    assert label.text() != before and len(label.text()) > len(before)
    assert label.height() >= label.heightForWidth(label.width())


def test_clicking_a_point_of_the_chart_selects_its_option(pane: PlanPane) -> None:
    series = pane.chart.series["on-demand"]
    point = series.points()[-1]
    series.sigClicked.emit(series, [point], None)  # what a click on the point sends
    key = point.data().key
    assert pane.focus.why == "selected" and option_key(pane.focus.row) == key
    selected = pane.table.selectionModel().selectedRows()
    assert option_key(pane.model.rows()[pane.proxy.mapToSource(selected[0]).row()]) == key
    x, y = pane.chart.focus_point()
    assert x == pytest.approx(point.pos().x()) and y == pytest.approx(point.pos().y())
