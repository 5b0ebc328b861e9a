"""One finished run's four linked plots in History (utilisation, memory, tokens/s, loss), with its
checkpoints, preemptions, resumes and stops as dashed lines and a key saying which colour is which."""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QWidget

from gpuplanner.app.run_series import RunSeries, with_gaps
from gpuplanner.ui.widgets.empty_chart import EmptyMessage
from gpuplanner.ui.widgets.legend import add_legend

EVENT_PENS = {
    "checkpoint": "#59a14f",
    "preempted": "#d64545",
    "resumed": "#2f6fde",
    "stopped": "#8a8f98",
    "run_start": "#8a8f98",
    "run_end": "#8a8f98",
    "failed": "#e8590c",
}
MARKED_EVENTS = {
    "checkpoint": "checkpoint",
    "preempted": "preempted",
    "resumed": "resumed",
    "stopped": "stopped",
    "failed": "failed",
}
GPU_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")
PLOTS = (
    ("util", "GPU utilisation (%)"),
    ("mem", "GPU memory (GiB)"),
    ("tokens", "Tokens/s"),
    ("loss", "Loss"),
)
NO_GPU_SAMPLES = "no GPU samples recorded"
NO_STEPS = "no training steps recorded"


def event_key(kinds: set[str]) -> str:
    """Rich text naming the dashed lines' colours, for the event kinds the run has (empty when none)."""
    parts = [
        f"<span style='color:{EVENT_PENS[kind]}'>- - -</span> {html.escape(label)}"
        for kind, label in MARKED_EVENTS.items()
        if kind in kinds
    ]
    return "&nbsp;&nbsp;&nbsp;".join(parts)


class RunPlots(pg.GraphicsLayoutWidget):
    """Four linked plots of one finished run: utilisation, memory, tokens/s and loss, with event markers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plots: dict[str, pg.PlotItem] = {}
        for i, (key, label) in enumerate(PLOTS):
            plot = self.addPlot(row=i // 2, col=i % 2, title=label)
            plot.setDownsampling(auto=True, mode="peak")
            plot.setClipToView(True)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setLabel("bottom", "minutes since the run started")
            plot.setMenuEnabled(False)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).enableAutoSIPrefix(False)  # no "x1e+1" offsets
            plot.getAxis("left").setWidth(56)  # one width: the columns' plots and markers line up
            if self.plots:
                plot.setXLink(next(iter(self.plots.values())))
            self.plots[key] = plot
        self.empty = {key: EmptyMessage(plot) for key, plot in self.plots.items()}
        self.key_label = self.addLabel("", row=2, col=0, colspan=2, size="9pt")
        self.key_text = ""
        self.util_legend = add_legend(self.plots["util"], offset=(5, 5), labelTextSize="7pt", colCount=4)
        self.apply_palette()
        self.clear_all()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "util_legend"):  # light/dark switched
            self.apply_palette()

    def apply_palette(self) -> None:
        palette = self.palette()
        self.setBackground(palette.color(QPalette.ColorRole.Base))
        fg = palette.color(QPalette.ColorRole.Text)
        for plot in self.plots.values():
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(fg))
            plot.titleLabel.setText(plot.titleLabel.text, color=fg.name())
        self.key_label.setText(self.key_text, color=fg.name())

    def clear_all(self) -> None:
        """No run shown: blank plots, no axes around nothing."""
        for key, plot in self.plots.items():
            plot.clear()
            self.empty[key].show("")
        self._set_key(set())

    def _set_key(self, kinds: set[str]) -> None:
        self.key_text = event_key(kinds)
        self.key_label.setText(self.key_text, color=self.palette().color(QPalette.ColorRole.Text).name())
        self.key_label.setVisible(bool(self.key_text))
        self.key_label.setMaximumHeight(10_000 if self.key_text else 0)

    def show_series(self, series: RunSeries) -> None:
        self.clear_all()
        legend = 2 <= len(series.gpu) <= 8
        self.util_legend.clear()
        self.util_legend.setVisible(legend)
        for i, (label, (t, util, mem, _power)) in enumerate(sorted(series.gpu.items())):
            pen = pg.mkPen(GPU_COLORS[i % len(GPU_COLORS)], width=1)
            t, util, mem = with_gaps(t, util, mem)
            self.plots["util"].plot(t / 60.0, util, pen=pen, name=label if legend else None, connect="finite")
            self.plots["mem"].plot(t / 60.0, mem, pen=pen, connect="finite")
        t, loss, tokens = with_gaps(*series.steps)
        if len(t):
            self.plots["loss"].plot(t / 60.0, loss, pen=pg.mkPen("#e15759", width=1), connect="finite")
            self.plots["tokens"].plot(t / 60.0, tokens, pen=pg.mkPen("#4e79a7", width=1), connect="finite")
        marked: set[str] = set()
        drawn: set[tuple[float, str]] = set()
        for at, kind, _step, detail in series.events:
            if kind == "run_end" and detail.startswith("failed"):
                kind = "failed"  # where the run failed (not the failure record: it is dated when it was read)
            if kind not in MARKED_EVENTS or (at, kind) in drawn:
                continue
            marked.add(kind)
            drawn.add((at, kind))
            pen = pg.mkPen(EVENT_PENS[kind], style=Qt.PenStyle.DashLine)
            for plot in self.plots.values():
                plot.addItem(pg.InfiniteLine(at / 60.0, angle=90, pen=pen))
        self._set_key(marked)
        fg = self.palette().color(QPalette.ColorRole.Text)
        for key, plot in self.plots.items():
            has_data = bool(series.gpu) if key in ("util", "mem") else bool(len(t))
            self.empty[key].show(None if has_data else NO_GPU_SAMPLES if key in ("util", "mem") else NO_STEPS, fg)
            plot.enableAutoRange()
