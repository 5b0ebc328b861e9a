"""The Plan form fits its column (nothing cut on the right, no sideways scrolling when tabbing through it)
and the keyboard can leave the comparison table with Tab."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from gpuplanner.ui.plan.plan_pane import PlanPane


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def test_form_fits_its_column_and_tab_never_scrolls_it_sideways(qtbot: Any, pane: PlanPane) -> None:
    scroll = pane.form_scroll
    viewport = scroll.viewport().width()
    assert pane.form.minimumSizeHint().width() <= viewport
    assert pane.form.width() <= viewport
    widgets = [pane.form.browse_button, *pane.form.editors.values()]
    for widget in widgets:
        if not widget.isVisibleTo(pane.form):
            continue
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        scroll.ensureWidgetVisible(widget)  # what focusing does inside a scroll area
        QApplication.processEvents()
        assert scroll.horizontalScrollBar().value() == 0, widget.objectName()
        right = widget.mapTo(scroll.viewport(), QPoint(widget.width(), 0)).x()
        assert right <= viewport + 1, (widget.objectName(), right, viewport)
    for label in pane.form.findChildren(type(pane.form.hint)):
        if label.isVisibleTo(pane.form) and label.text():
            assert label.mapTo(scroll.viewport(), QPoint(0, 0)).x() >= 0


def test_tab_leaves_the_comparison_table(qtbot: Any, pane: PlanPane) -> None:
    table = pane.table
    table.setFocus(Qt.FocusReason.OtherFocusReason)
    table.setCurrentIndex(table.model().index(0, 0))
    assert table.hasFocus()
    qtbot.keyClick(table, Qt.Key.Key_Tab)
    assert not table.hasFocus()
