"""Several runs overlaid, as experiment trackers show them: loss, tokens/s, GPU utilisation and spend,
against time since each run's start or against its optimizer step, one colour and one legend entry per run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from gpuplanner.app.run_series import OverlaySeries
from gpuplanner.ui.widgets.empty_chart import EmptyMessage
from gpuplanner.ui.widgets.legend import add_legend

RUN_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")
PLOTS = (
    ("loss", "Loss"),
    ("tokens", "Tokens/s"),
    ("util", "GPU utilisation (%, mean of the run's GPUs)"),
    ("spend", "Spend ($)"),
)
EMPTY = {
    "loss": "no loss recorded",
    "tokens": "no tokens/s recorded",
    "util": "no GPU samples recorded",
    "spend": "no spend recorded (no price set)",
}
X_AXES = (("time", "minutes since the run started"), ("step", "optimizer step"))


class ComparePlots(QWidget):
    """The overlay: a choice of x axis above four linked plots; :meth:`show_runs` draws the runs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.x_combo = QComboBox()
        for key, label in X_AXES:
            self.x_combo.addItem(f"against {label}", key)
        self.x_combo.setToolTip("Compare runs by wall-clock time or by training progress")
        self.x_combo.currentIndexChanged.connect(lambda _i: self._draw())
        self.caption = QLabel()
        bar = QHBoxLayout()
        bar.addWidget(self.caption, 1)
        bar.addWidget(QLabel("x axis:"))
        bar.addWidget(self.x_combo)
        self.graphics = pg.GraphicsLayoutWidget()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.graphics, 1)
        self.plots: dict[str, pg.PlotItem] = {}
        for i, (key, title) in enumerate(PLOTS):
            plot = self.graphics.addPlot(row=i // 2, col=i % 2, title=title)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMenuEnabled(False)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).enableAutoSIPrefix(False)
            plot.getAxis("left").setWidth(60)
            if self.plots:
                plot.setXLink(next(iter(self.plots.values())))
            self.plots[key] = plot
        self.empty = {key: EmptyMessage(plot) for key, plot in self.plots.items()}
        self.legend = add_legend(self.plots["loss"], offset=(-5, 5), labelTextSize="8pt")
        self.series: list[OverlaySeries] = []
        self.apply_palette()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "legend"):
            self.apply_palette()

    def apply_palette(self) -> None:
        palette = self.palette()
        fg = palette.color(QPalette.ColorRole.Text)
        self.graphics.setBackground(palette.color(QPalette.ColorRole.Base))
        for plot in self.plots.values():
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(fg))
            plot.titleLabel.setText(plot.titleLabel.text, color=fg.name())
        self.legend.setLabelTextColor(fg)

    @property
    def x_axis(self) -> str:
        return str(self.x_combo.currentData())

    def set_x_axis(self, key: str) -> None:
        self.x_combo.setCurrentIndex(self.x_combo.findData(key))

    def show_runs(self, series: Sequence[OverlaySeries]) -> None:
        self.series = list(series)
        self._draw()

    def legend_names(self) -> list[str]:
        return [label.text for _sample, label in self.legend.items]

    def _draw(self) -> None:
        by_step = self.x_axis == "step"
        for plot in self.plots.values():
            plot.clear()
        self.legend.clear()
        for plot in self.plots.values():
            plot.setLabel("bottom", dict(X_AXES)[self.x_axis])
        drawn: set[str] = set()
        for i, s in enumerate(self.series):
            pen = pg.mkPen(RUN_COLORS[i % len(RUN_COLORS)], width=1.5)
            x = s.step if by_step else s.minutes
            for key, y in (("loss", s.loss), ("tokens", s.tokens_per_s), ("spend", s.spend_usd)):
                if len(x) and np.isfinite(y).any():
                    drawn.add(key)
                    item = self.plots[key].plot(x, y, pen=pen, connect="finite")
                    if key == "loss":
                        self.legend.addItem(item, s.label)
            if len(s.util_minutes):
                drawn.add("util")
                ux = np.interp(s.util_minutes, s.minutes, s.step) if by_step and len(s.minutes) > 1 else s.util_minutes
                self.plots["util"].plot(ux, s.util_pct, pen=pen, connect="finite")
            if not np.isfinite(s.loss).any():  # a run without steps still gets its legend entry
                self.legend.addItem(pg.PlotDataItem(pen=pen), s.label)
        count = len(self.series)
        self.caption.setText(f"{count} runs overlaid" if count else "")
        fg = self.palette().color(QPalette.ColorRole.Text)
        for key, empty in self.empty.items():  # nothing to draw: the reason alone, no axes around nothing
            empty.show(None if key in drawn else EMPTY[key] if count else "", fg)
        for plot in self.plots.values():
            plot.enableAutoRange()
