"""Cost against time for every option of the comparison (pyqtgraph scatter).

Usable options in colour (circles on-demand, triangles spot), options that fit but miss the
deadline or the budget in grey, the winner as a star; the deadline and the budget as lines. A ring marks
the option the Plan pane's details describe (:meth:`CostChart.set_focus`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QGuiApplication, QPalette
from PySide6.QtWidgets import QWidget

from gpuplanner.plan.compare import CompareRow
from gpuplanner.ui.human import human_hours, human_money, money_tick, significant
from gpuplanner.ui.widgets.empty_chart import set_axes_shown
from gpuplanner.ui.widgets.legend import CornerLegend

ON_DEMAND = "#4e79a7"
SPOT = "#f28e2b"
WINNER = "#2e9d4f"
BAD = "#d64545"
GROUPS = (
    ("on-demand", "o", ON_DEMAND),
    ("spot (expected)", "t", SPOT),
    ("misses deadline/budget", "x", "#9a9a9a"),
    ("recommended", "star", WINNER),
    ("above the scale", "t1", "#9a9a9a"),
)
TITLE_MARGIN_PX = 80.0  # the cost axis and the margins beside the title row
LEGEND_SYMBOL_PX = 42.0  # a legend row's symbol, its gap and the legend's margins, left of the name
FOCUS = "in the details"  # the legend's name of the ring around the option the details describe
LABELLED = 3  # the best options get a label next to their point
HEADROOM = 1.35  # the y axis reaches this far above the dearest usable option (or the budget)


TICK_PX = 64  # at least this many pixels between labelled ticks of the hours axis


def hour_ticks(lo: float, hi: float, width_px: float) -> list[tuple[float, str]]:
    """Labelled ticks (log10 hours, text) for the x range ``[lo, hi]`` (log10 hours) over ``width_px``:
    1-2-5 steps when there is room, else powers of ten, else every other or third power, so labels never
    collide however many decades the options span."""
    decades = max(hi - lo, 1e-9)
    px_per_decade = width_px / decades
    options = (
        ((1, 2, 3, 4, 5, 6, 7, 8, 9), 1),
        ((1, 2, 5), 1),
        ((1, 3), 1),
        ((1,), 1),
        ((1,), 2),
        ((1,), 3),
        ((1,), 5),
    )
    for mantissas, every in options:
        # the closest two labels of this set, in decades (1-9: 8 to 9; 1-2-5: 1 to 2; 1-3: 3 to 10)
        gap = {9: math.log10(9 / 8), 3: math.log10(2), 2: math.log10(10 / 3)}.get(len(mantissas), float(every))
        if gap * px_per_decade >= TICK_PX or every == 5:
            break
    values = [m * 10.0**e for e in range(math.floor(lo) - 1, math.ceil(hi) + 1) if e % every == 0 for m in mantissas]
    ticks = [(math.log10(v), _hours_label(v)) for v in values if lo <= math.log10(v) <= hi]
    if len(ticks) < 3:  # a narrow range: evenly spaced hours with a round step
        lo_h, hi_h = 10.0**lo, 10.0**hi
        raw = (hi_h - lo_h) / 4
        step = min(
            m * 10.0 ** math.floor(math.log10(raw))
            for m in (1, 2, 5, 10)
            if m * 10.0 ** math.floor(math.log10(raw)) >= raw
        )
        first = math.ceil(lo_h / step) * step
        count = int((hi_h - first) / step) + 1
        ticks = [(math.log10(first + i * step), _hours_label(first + i * step, step)) for i in range(count)]
    return ticks


def _hours_label(hours: float, step: float = 1.0) -> str:
    if step < 1:
        places = min(4, math.ceil(-math.log10(step) - 1e-9))
        return f"{hours:,.{places}f}"
    if hours >= 1:
        return f"{hours:,.0f}"
    return significant(hours, 1 if _is_round(hours) else 2).rstrip("0").rstrip(".")  # "0.00001", never "1e-05"


def _is_round(value: float) -> bool:
    mantissa = value / 10.0 ** math.floor(math.log10(value))
    return abs(mantissa - round(mantissa)) < 1e-6


class MoneyAxis(pg.AxisItem):
    """Dollars written out ("$1,200", "$0.50"): no "x1e+3" offset however large or small the costs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.enableAutoSIPrefix(False)

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph naming)
        """Labelled ticks only: each tick is also a grid line across the plot, and the minor levels'
        translucent lines cost most of the chart's repaint while saying little."""
        return super().tickSpacing(minVal, maxVal, size)[:1]

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph naming)
        """Ticks from $0 to the top of the data: none in the margin under $0 (room for the labels of the
        cheapest points) or in the strip above the data (the legend and the key)."""
        top = self.data_top if self.data_top is not None else maxVal
        return [
            (spacing, [v for v in values if -1e-9 <= v <= top * (1 + 1e-9)])
            for spacing, values in super().tickValues(max(minVal, 0.0), min(maxVal, top), size)
        ]

    data_top: float | None = None

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph naming)
        places = 0 if spacing >= 1 else min(6, max(2, math.ceil(-math.log10(spacing))))
        return [money_tick(v, places) for v in values]


def _tip(x: float, y: float, data: object) -> str:
    return str(data)


class _Point:
    """A point's option: its key (GPU, GPU count, pricing) and its tooltip text, written when asked for
    (hovering), not for every point at every recalculation."""

    __slots__ = ("row",)

    def __init__(self, row: CompareRow) -> None:
        self.row = row

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.row.gpu, self.row.gpus, self.row.pricing)

    def __str__(self) -> str:
        r = self.row
        return (
            f"{r.gpus} x {r.gpu} {r.pricing} ({r.provider or '-'}): {human_hours(r.hours)}, "
            f"{human_money(r.cost_usd)}" + ("" if r.usable else f" ({r.reason})") + " (click: details)"
        )


def _points(rows: Sequence[CompareRow]) -> list[CompareRow]:
    out = []
    for row in rows:
        cost = row.cost_usd
        if (
            not row.plan.fits
            or cost is None
            or not math.isfinite(cost)
            or not math.isfinite(row.hours)
            or row.hours <= 0
        ):
            continue
        out.append(row)
    return out


class CostChart(pg.PlotWidget):
    """Scatter of the comparison's options: x hours (log), y cost in dollars.

    Signals:
        optionClicked(object): a point was clicked, with its option's key (GPU, GPU count, pricing).
    """

    optionClicked = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, axisItems={"left": MoneyAxis(orientation="left")})
        self.setAccessibleName("Cost against time")
        self.setMinimumHeight(220)  # a chart, not a strip, whatever room the table wants
        item = self.getPlotItem()
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        item.setLogMode(x=True, y=False)
        item.showGrid(x=False, y=True, alpha=0.18)
        item.setLabel("bottom", "wall-clock hours (log)")
        item.setLabel("left", "cost ($)")
        item.setMenuEnabled(False)
        # The cost labels widen the axis for "$10,000" but never narrow it again: a plot area that moved at
        # every recalculation would lay the chart out and paint it twice or three times.
        item.getAxis("left").setStyle(autoReduceTextSpace=False)
        # the legend in a column of its own right of the plot, where it hides no point (a placeholder in the
        # plot's layout holds its place; pyqtgraph's legend sizes itself, so it cannot be a layout item)
        self.legend_column = pg.GraphicsWidget()
        item.layout.addItem(self.legend_column, 2, 3)
        self.legend = CornerLegend(offset=(2, 0), labelTextSize="8pt", colCount=1, verSpacing=-6)
        self.legend.setParentItem(self.legend_column)
        item.legend = self.legend
        self.rows_shown: list[CompareRow] = []
        # Persistent items, updated in place (re-creating them costs more than the engine's answer).
        self.series: dict[str, pg.ScatterPlotItem] = {}
        for name, symbol, color in GROUPS:
            size = 16 if symbol == "star" else 8
            self.series[name] = pg.ScatterPlotItem(
                symbol=symbol,
                size=size,
                pen=pg.mkPen(QColor(color).darker(130)),
                brush=pg.mkBrush(color),
                hoverable=True,
                tip=_tip,
                name=name,
            )
            self.series[name].sigClicked.connect(self._on_points_clicked)
            item.addItem(self.series[name])
        self.focus_ring = pg.ScatterPlotItem(
            symbol="o", size=24, pen=pg.mkPen("#8e44ad", width=2.5), brush=pg.mkBrush(0, 0, 0, 0), name=FOCUS
        )
        item.addItem(self.focus_ring)
        self.focus_row: CompareRow | None = None
        self._groups_drawn: tuple[str, ...] = ()
        self.deadline_line = pg.InfiniteLine(
            angle=90,
            pen=pg.mkPen(BAD, style=Qt.PenStyle.DashLine),
            label="deadline",
            # the label lies along the line, on its left (inside the plot even at the right edge), low
            # enough that the legend at the top right does not cover it
            labelOpts={"position": 0.3, "color": BAD, "rotateAxis": (1, 0), "anchors": [(0.5, 1), (0.5, 1)]},
        )
        self.budget_line = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(BAD, style=Qt.PenStyle.DotLine),
            label="budget",
            labelOpts={"position": 0.5, "color": BAD},  # mid-way: the legend covers the top right
        )
        for line in (self.deadline_line, self.budget_line):
            line.setVisible(False)
            item.addItem(line, ignoreBounds=True)
        self._legend_names: tuple[str, ...] | None = None
        self._key_color = "#1d1f23"
        self._title = ""
        self._title_shown = ""  # the title as set (its lines joined with <br>)
        self.point_labels: list[pg.TextItem] = []
        self._make_point_labels()
        self.key = ""  # the best options' key and what is above the scale: the title row, over the plot
        self.y_top: float | None = None
        self.y_range: tuple[float, float] | None = None  # the view's y range: the data's and the label margins
        item.getViewBox().sigResized.connect(self._on_view_resized)
        self._ticks: list[tuple[float, str]] | None = None
        self.best_key = ""
        self.apply_palette()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "budget_line"):  # light/dark switched
            self.apply_palette()

    def apply_palette(self) -> None:
        palette = QGuiApplication.palette()
        for label in self.point_labels:
            label.setColor(palette.color(QPalette.ColorRole.Text))
        self.setBackground(palette.color(QPalette.ColorRole.Base))
        fg = palette.color(QPalette.ColorRole.Text)
        self.legend.setLabelTextColor(fg)
        for _sample, label in self.legend.items:  # pyqtgraph keeps a shown label's colour until it is set again
            label.setText(label.text, color=fg)
        self._key_color = fg.name()  # the key in the text colour: small type needs the contrast
        if self._title:
            self._title_shown = ""
            self._fit_title()
        for name in ("left", "bottom"):
            axis = self.getPlotItem().getAxis(name)
            axis.setPen(pg.mkPen(fg))
            axis.setTextPen(pg.mkPen(fg))

    def set_rows(self, rows: Sequence[CompareRow], deadline_hours: float | None, budget_usd: float | None) -> None:
        item = self.getPlotItem()
        shown = _points(rows)
        self.rows_shown = shown
        top = self._y_top(shown, budget_usd)
        self.y_top = top
        above = [r for r in shown if top is not None and (r.cost_usd or 0) > top]
        inside = [r for r in shown if top is None or (r.cost_usd or 0) <= top]
        groups = {
            "on-demand": [r for r in inside if r.usable and r.pricing == "on-demand" and r.rank != 1],
            "spot (expected)": [r for r in inside if r.usable and r.pricing == "spot" and r.rank != 1],
            "misses deadline/budget": [r for r in inside if not r.usable],
            "recommended": [r for r in inside if r.rank == 1],
            "above the scale": above,
        }
        for name, group in groups.items():
            xs = np.log10(np.array([r.hours for r in group], dtype=float))
            ys = np.array([r.cost_usd for r in group], dtype=float)
            if name == "above the scale" and top is not None:
                ys = np.full(len(group), top * 0.985)  # pinned to the top edge, pointing up
            tips = [_Point(r) for r in group]
            self.series[name].setData(xs, ys, data=tips)
        self._groups_drawn = tuple(name for name, group in groups.items() if group)
        self._draw_focus()
        self._label_best(inside)
        parts = [self.best_key] if self.best_key else []
        if above and top is not None:
            parts.append(f"▲ {len(above)} above {human_money(top)}, not to scale")
        self.key = " · ".join(parts)
        self.deadline_line.setVisible(bool(deadline_hours))
        if deadline_hours:
            self.deadline_line.setValue(math.log10(deadline_hours))
        self.budget_line.setVisible(bool(budget_usd))
        if budget_usd:
            self.budget_line.setValue(budget_usd)
        set_axes_shown(item, bool(shown))  # nothing fits: the message alone, no empty $0-$1 axes or lines
        if not shown:
            self.deadline_line.setVisible(False)
            self.budget_line.setVisible(False)
            self._set_title("no option fits in memory: nothing to chart")
            return
        self._set_title(self.key)
        self._apply_y_range()
        hours = [r.hours for r in shown]
        lo = math.log10(min(hours + ([deadline_hours] if deadline_hours else [])))
        hi = math.log10(max(hours + ([deadline_hours] if deadline_hours else [])))
        pad = 0.08 * max(hi - lo, 0.5)  # room for the end points and the deadline's label
        self._x_range = (lo - pad, hi + pad)
        item.setXRange(*self._x_range, padding=0)
        self._update_ticks()
        # The view box applies a new range to its items when the next paint starts; a transform changed
        # during a paint makes Qt paint the plot area once more. Applied now, one paint shows the result.
        item.getViewBox().prepareForPaint()

    def _set_title(self, text: str) -> None:
        """The title row: the key of the best options (and what is above the scale) in small type."""
        if text == self._title:
            return
        self._title = text
        self._title_shown = ""
        self._fit_title()

    def _fit_title(self) -> None:
        """Show the title row on as many lines as the chart's width needs (its parts, split at " · "): one
        wide line would widen the plot's layout past the chart and push the legend out of view."""
        item = self.getPlotItem()
        if item is None:
            return
        text = self._title
        if not text:
            if self._title_shown != "":
                item.setTitle(None)
                self._title_shown = ""
            return
        font = QFont(self.font())
        font.setPointSizeF(8.0)
        metrics = QFontMetricsF(font)
        room = max(120.0, self.width() - TITLE_MARGIN_PX - self.legend_column.minimumWidth())
        lines: list[str] = []
        for part in text.split(" · "):
            if lines and metrics.horizontalAdvance(lines[-1] + " · " + part) <= room:
                lines[-1] += " · " + part
            else:
                lines.append(part)
        shown = "<br>".join(html.escape(line, quote=False) for line in lines)
        if shown != self._title_shown:
            self._title_shown = shown
            item.setTitle(shown, size="8pt", color=self._key_color)

    def _fit_legend_column(self) -> None:
        """The legend's column as wide as its widest name needs (measured with the labels' font: the legend's
        own size is only known after it is laid out, which left "spot (expec" cut off at the first paint)."""
        width = 0.0
        if self._legend_names:
            font = QFont(self.font())
            font.setPointSizeF(8.0)  # the legend's labelTextSize
            widest = max(QFontMetricsF(font).horizontalAdvance(name) for name in self._legend_names)
            width = max(self.legend.boundingRect().width(), widest + LEGEND_SYMBOL_PX) + 8.0
        self.legend_column.setMinimumWidth(width)
        self.legend_column.setMaximumWidth(width)
        self.legend.setVisible(bool(self._legend_names))

    def _on_view_resized(self, _view: object) -> None:
        if self.y_range is not None:  # the margins are in pixels: a new height, a new range
            self._apply_y_range()

    def _apply_y_range(self) -> None:
        """$0 to the data's top, and margins under $0 and over the top as tall as a point's label, so the
        labels of the cheapest and the dearest options stay inside the chart (no tick in the margins)."""
        item = self.getPlotItem()
        if item is None:  # the widget is going away
            return
        top = self.y_top if self.y_top is not None else 1.0
        item.getAxis("left").data_top = top
        height = item.getViewBox().height()
        # a label sits 1.1 of its height from its point (under it for the best option, over it for the next)
        margin = 1.1 * max((lab.boundingRect().height() for lab in self.point_labels), default=16.0) + 2.0
        per_px = top / max(height - 2 * margin, 40.0)
        y_range = (-margin * per_px, top + margin * per_px)
        if y_range != self.y_range:
            self.y_range = y_range
            item.setYRange(*y_range, padding=0)

    def _on_points_clicked(self, _item: object, points: Sequence[object], _event: object) -> None:
        for point in points:
            data = point.data()  # type: ignore[attr-defined]
            if isinstance(data, _Point):
                self.optionClicked.emit(data.key)
                return

    def set_focus(self, row: CompareRow | None) -> None:
        """Ring the point of ``row`` (the option the details describe); None or an option not drawn: no ring."""
        self.focus_row = row
        self._draw_focus()

    def focus_point(self) -> tuple[float, float] | None:
        """Where the ring is (log10 hours, dollars), or None when it is not drawn."""
        if not self.focus_ring.isVisible():
            return None
        xs, ys = self.focus_ring.getData()
        return (float(xs[0]), float(ys[0])) if len(xs) else None

    def _draw_focus(self) -> None:
        key = None if self.focus_row is None else (self.focus_row.gpu, self.focus_row.gpus, self.focus_row.pricing)
        match = next((r for r in self.rows_shown if (r.gpu, r.gpus, r.pricing) == key), None)
        if match is None:
            self.focus_ring.setData([], [])
            self.focus_ring.setVisible(False)
        else:
            y = float(match.cost_usd or 0.0)
            if self.y_top is not None and y > self.y_top:
                y = self.y_top * 0.985  # pinned to the top edge, as its triangle
            self.focus_ring.setData([math.log10(match.hours)], [y])
            self.focus_ring.setVisible(True)
        names = self._groups_drawn + ((FOCUS,) if match is not None else ())
        if names != self._legend_names:
            self.legend.clear()
            for name in names:
                self.legend.addItem(self.focus_ring if name == FOCUS else self.series[name], name)
            self._legend_names = names
            self._fit_legend_column()
            self._fit_title()

    @staticmethod
    def _y_top(shown: Sequence[CompareRow], budget_usd: float | None) -> float | None:
        """The top of the cost axis: the whole range when the costs are alike, else a bit above the dearest
        usable option (or the budget), so the options worth reading are not squashed at the bottom by a
        few very dear ones (those are pinned to the top edge and counted)."""
        costs = [r.cost_usd for r in shown if r.cost_usd is not None]
        if not costs:
            return None
        highest = max(costs)
        usable = [r.cost_usd for r in shown if r.usable and r.cost_usd is not None]
        reference = max(usable + ([budget_usd] if budget_usd else [])) if (usable or budget_usd) else None
        if reference is None:
            reference = sorted(costs)[len(costs) // 2] * 2
        clipped = reference * HEADROOM
        return highest * 1.08 if highest <= clipped * 1.15 else clipped

    def _label_best(self, inside: Sequence[CompareRow]) -> None:
        """The best few usable options: their rank next to the point, and what each is in the key at the
        top left ("1: 1 x H100 PCIe spot"), so close points never get overlapping sentences. The labels
        are made once and moved (making text items at every recalculation cost more than the rest)."""
        best = sorted((r for r in inside if r.usable and r.rank is not None), key=lambda r: r.rank or 0)[:LABELLED]
        for index, label in enumerate(self.point_labels):
            if index < len(best):
                row = best[index]
                if label.textItem.toPlainText() != str(row.rank):
                    label.setText(str(row.rank))
                label.setToolTip(self.describe(row))
                label.setPos(math.log10(row.hours), row.cost_usd or 0.0)
            label.setVisible(index < len(best))
        self.best_key = " · ".join(f"{r.rank}: {self.describe(r)}" for r in best)

    def _make_point_labels(self) -> None:
        # around its point: rank 1 below right, 2 above left, 3 above right (close points stay apart)
        item = self.getPlotItem()
        for anchor in ((-0.3, -0.1), (1.3, 1.1), (-0.3, 1.1))[:LABELLED]:
            label = pg.TextItem("", anchor=anchor)
            font = label.textItem.font()
            font.setBold(True)
            label.setFont(font)
            label.setVisible(False)
            item.addItem(label, ignoreBounds=True)
            self.point_labels.append(label)

    @staticmethod
    def describe(row: CompareRow) -> str:
        return f"{row.gpus} x {row.gpu} {row.pricing}"

    def _update_ticks(self) -> None:
        x_range: tuple[float, float] | None = getattr(self, "_x_range", None)  # None until the first chart
        if x_range is None:
            return
        item = self.getPlotItem()
        if item is None:  # the widget is going away
            return
        width = max(item.getViewBox().width(), 200.0)
        ticks = hour_ticks(*x_range, width)
        if ticks != self._ticks:  # new ticks repaint the axis: not when the labels are the same
            self._ticks = ticks
            item.getAxis("bottom").setTicks([ticks, []])

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        self._update_ticks()
        if hasattr(self, "legend_column"):
            self._fit_title()
