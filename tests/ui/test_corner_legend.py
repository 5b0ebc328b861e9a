"""CornerLegend (gpuplanner/ui/widgets/legend.py): placed as pyqtgraph's legend is, and safe once its parent is
deleted (pyqtgraph's own anchor raised "Internal C++ object already deleted" in a window's teardown)."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
import pytest
import shiboken6

from gpuplanner.ui.widgets.legend import CornerLegend, add_legend


def _placed(qtbot: Any, offset: tuple[float, float]) -> tuple[pg.LegendItem, pg.LegendItem, pg.GraphicsWidget, Any]:
    """Our legend and pyqtgraph's on one parent; the view is returned too (its scene owns the items)."""
    view = pg.GraphicsLayoutWidget()
    qtbot.addWidget(view)
    view.resize(400, 300)
    parent = pg.GraphicsWidget()
    view.addItem(parent)
    ours, theirs = CornerLegend(offset=offset), pg.LegendItem(offset=offset)
    for legend in (ours, theirs):
        legend.setParentItem(parent)
        legend.addItem(pg.PlotDataItem([0, 1]), "a curve with a long name")
    view.show()
    qtbot.waitExposed(view)
    return ours, theirs, parent, view


@pytest.mark.parametrize("offset", [(1, 1), (-5, 5), (2, 0)])
def test_it_sits_where_pyqtgraphs_legend_sits_also_after_a_resize(qtbot: Any, offset: tuple[float, float]) -> None:
    ours, theirs, parent, _view = _placed(qtbot, offset)
    assert ours.pos() == theirs.pos()
    parent.resize(parent.size().width() - 60, parent.size().height() - 40)
    assert ours.pos() == theirs.pos()
    if offset[0] < 0:  # anchored to the right edge: it moved with it
        rect = parent.boundingRect()
        assert ours.mapRectToParent(ours.boundingRect()).right() == pytest.approx(rect.right() + offset[0])


def test_a_deleted_parent_is_left_alone(qtbot: Any) -> None:
    ours, theirs, parent, _view = _placed(qtbot, (1, 1))
    view_parent = pg.GraphicsWidget()
    theirs.setParentItem(view_parent)  # pyqtgraph's anchor follows this parent now
    shiboken6.delete(view_parent)
    with pytest.raises(RuntimeError, match="already deleted"):
        theirs._GraphicsWidgetAnchor__geometryChanged()  # what pyqtgraph's slot does on the next signal
    shiboken6.delete(parent)  # its child, our legend, goes with it
    ours._place()  # the slot on a late signal: nothing happens, nothing raises


def test_add_legend_collects_the_plots_named_items(qtbot: Any) -> None:
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    legend = add_legend(widget.getPlotItem(), offset=(5, 5), labelTextSize="7pt")
    widget.plot([0, 1], name="loss")
    assert widget.getPlotItem().legend is legend and [label.text for _, label in legend.items] == ["loss"]
