"""Cost against time for every option of the comparison (pyqtgraph scatter).

Usable options in colour (circles on-demand, triangles spot), options that fit but miss the
deadline or the budget in grey, the winner as a star; the deadline and the budget as lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QWidget

from gpuplanner.plan.compare import CompareRow

ON_DEMAND = "#4e79a7"
SPOT = "#f28e2b"
WINNER = "#2e9d4f"
BAD = "#d64545"
GROUPS = (
    ("on-demand", "o", ON_DEMAND),
    ("spot (expected)", "t", SPOT),
    ("misses deadline/budget", "x", "#9a9a9a"),
    ("recommended", "star", WINNER),
)


_NICE_HOURS = tuple(m * 10.0**e for e in range(-2, 5) for m in (1, 2, 5))


def _tip(x: float, y: float, data: object) -> str:
    return str(data)


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
    """Scatter of the comparison's options: x hours (log), y cost in dollars."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Cost against time")
        item = self.getPlotItem()
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        item.setLogMode(x=True, y=False)
        item.showGrid(x=False, y=True, alpha=0.18)
        item.setLabel("bottom", "wall-clock hours (log)")
        item.setLabel("left", "cost ($)")
        item.setMenuEnabled(False)
        self.legend = item.addLegend(offset=(-10, 10), labelTextSize="8pt")
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
            item.addItem(self.series[name])
        self.deadline_line = pg.InfiniteLine(
            angle=90,
            pen=pg.mkPen(BAD, style=Qt.PenStyle.DashLine),
            label="deadline",
            labelOpts={"position": 0.5, "color": BAD, "rotateAxis": (1, 0)},
        )
        self.budget_line = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(BAD, style=Qt.PenStyle.DotLine),
            label="budget",
            labelOpts={"position": 0.95, "color": BAD},
        )
        for line in (self.deadline_line, self.budget_line):
            line.setVisible(False)
            item.addItem(line, ignoreBounds=True)
        self._legend_names: tuple[str, ...] | None = None
        self.apply_palette()

    def apply_palette(self) -> None:
        palette = QGuiApplication.palette()
        self.setBackground(palette.color(QPalette.ColorRole.Base))
        fg = palette.color(QPalette.ColorRole.Text)
        self.legend.setLabelTextColor(fg)
        self.legend.setBrush(pg.mkBrush(palette.color(QPalette.ColorRole.Base)))
        for name in ("left", "bottom"):
            axis = self.getPlotItem().getAxis(name)
            axis.setPen(pg.mkPen(fg))
            axis.setTextPen(pg.mkPen(fg))

    def set_rows(self, rows: Sequence[CompareRow], deadline_hours: float | None, budget_usd: float | None) -> None:
        item = self.getPlotItem()
        shown = _points(rows)
        self.rows_shown = shown
        groups = {
            "on-demand": [r for r in shown if r.usable and r.pricing == "on-demand" and r.rank != 1],
            "spot (expected)": [r for r in shown if r.usable and r.pricing == "spot" and r.rank != 1],
            "misses deadline/budget": [r for r in shown if not r.usable],
            "recommended": [r for r in shown if r.rank == 1],
        }
        for name, group in groups.items():
            xs = np.log10(np.array([r.hours for r in group], dtype=float))
            ys = np.array([r.cost_usd for r in group], dtype=float)
            tips = [
                f"{r.gpus} x {r.gpu} {r.pricing} ({r.provider or '-'}): {r.hours:,.1f} h, ${r.cost_usd:,.2f}"
                for r in group
            ]
            self.series[name].setData(xs, ys, data=tips)
        names = tuple(name for name, group in groups.items() if group)
        if names != self._legend_names:
            self.legend.clear()
            for name in names:
                self.legend.addItem(self.series[name], name)
            self._legend_names = names
        self.deadline_line.setVisible(bool(deadline_hours))
        if deadline_hours:
            self.deadline_line.setValue(math.log10(deadline_hours))
        self.budget_line.setVisible(bool(budget_usd))
        if budget_usd:
            self.budget_line.setValue(budget_usd)
        if not shown:
            item.setTitle("no option fits in memory: nothing to chart")
            return
        item.setTitle(None)
        costs = [r.cost_usd for r in shown if r.cost_usd is not None]
        hours = [r.hours for r in shown]
        top = max(costs + ([budget_usd] if budget_usd else []))
        item.setYRange(0, top * 1.08, padding=0)
        lo = math.log10(min(hours + ([deadline_hours] if deadline_hours else [])))
        hi = math.log10(max(hours + ([deadline_hours] if deadline_hours else [])))
        item.setXRange(lo - 0.1, hi + 0.1, padding=0)
        ticks = [v for v in _NICE_HOURS if lo - 0.1 <= math.log10(v) <= hi + 0.1]
        item.getAxis("bottom").setTicks([[(math.log10(v), f"{v:g}") for v in ticks], []])
