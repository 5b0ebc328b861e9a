"""Live plots of one run: GPU utilisation (and SM activity), memory against capacity, power, tokens/s,
loss, and cumulative spend with the budget line; vertical markers for checkpoints, preemptions and resumes.

:class:`LivePlots` never pulls data by itself: the Runs pane's redraw timer calls :meth:`LivePlots.redraw`
with a :class:`RunTelemetry` (ring buffers) at 10-20 Hz, and it skips the work when nothing changed.
Both ranges are driven here: x (a scrolling window of the last minutes, or the full history) and y
(fitted to the points in the window, :meth:`LivePlots._fit_y`; no pyqtgraph auto-range). Each series is
peak-decimated to about a point per pixel column; the lines of a plot are drawn by two light items (the
settled bodies and the live ends, :class:`PlotLines`), markers by one per plot (:class:`MarkerLines`),
so a frame's cost does not grow with the number of lines' pyqtgraph items or of markers.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QGraphicsItem, QVBoxLayout, QWidget

from gpuplanner.ui.human import human_money
from gpuplanner.ui.palette import is_dark
from gpuplanner.ui.runs.plot_axis import ElapsedAxis, TimeGrid, nice_step, use_title_label
from gpuplanner.ui.runs.plot_crosshair import Crosshair, value_at
from gpuplanner.ui.runs.plot_lines import PlotLines, SeriesLine, fit_range, make_pen, visible_extent
from gpuplanner.ui.runs.plot_markers import EventLabels, MarkerLines
from gpuplanner.ui.runs.ring_buffer import PeakDecimator, RingBuffer
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from gpuplanner.ui.widgets.empty_chart import set_axes_shown
from gpuplanner.ui.widgets.legend import CornerLegend

GPU_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DEFAULT_WINDOW_S = 600.0
LEFT_AXIS_PX = 62
NO_PRICE = "No price set for this host: set one in the Hosts pane to see the spend."
NO_GPU_SAMPLES = "no GPU samples recorded"
NO_STEPS = "no training steps recorded"
GPU_CURVES = ("util", "mem", "power", "sm", "util_mean")  # a GPU's curves, drawn from these buffer columns:
GPU_SERIES = ("util", "mem_used_gib", "power_w", "sm_active", "util_mean")
RAW_ALPHA = "55"  # the raw utilisation samples (1-2 Hz, a barcode when drawn bold): faint under their mean
STEP_SERIES = ("tokens_per_s", "loss", "spend_usd")  # tokens_curve, loss_curve, spend_curve

# (light, dark) colours of the spend plot's line labels: >= 4.5:1 against the plot's background
LINE_LABEL_COLORS = {"budget": ("#c62828", "#ff7b7b"), "plan": ("#4d4d4d", "#c8c8c8")}


class LivePlots(QWidget):
    """Six linked plots fed from a :class:`RunTelemetry` by :meth:`redraw`."""

    PLOTS = (
        ("util", "GPU utilisation (%)"),
        ("mem", "GPU memory (GiB)"),
        ("power", "Power (W)"),
        ("tokens", "Tokens/s"),
        ("loss", "Loss"),
        ("spend", "Spend (USD)"),
    )
    COLUMNS = 3  # two rows of three: wide plots on a landscape screen, the time axis under the bottom row
    UTIL_TICKS = [[(float(v), str(v)) for v in (0, 25, 50, 75, 100)]]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_s = DEFAULT_WINDOW_S
        self.follow = True  # True: scrolling window of window_s; False: the full history
        self._telemetry: RunTelemetry | None = None
        self._drawn_version = -1
        self._drawn_mode: tuple[bool, float] | None = None
        self._markers_drawn = 0
        self._gaps_drawn: tuple = ()
        self._capacity = 0.0
        self._x_range: tuple[float, float] | None = None
        self._y_ranges: dict[str, tuple[float, float]] = {}  # set here (no pyqtgraph auto-range)
        self._extents: dict[object, tuple[np.ndarray, np.ndarray]] = {}  # visible min/max per series family
        self._decimators: dict[int, PeakDecimator] = {}  # by id() of the ring buffer they summarise
        self._signatures: dict[object, tuple] = {}  # what each curve family was last drawn from
        self.graphics = pg.GraphicsLayoutWidget(self)
        self.graphics.setBackground("w")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics)
        self.plots: dict[str, pg.PlotItem] = {}
        self._grids: list[TimeGrid] = []
        for i, (key, title) in enumerate(self.PLOTS):
            plot = self.graphics.addPlot(
                row=i // self.COLUMNS, col=i % self.COLUMNS, axisItems={"bottom": ElapsedAxis(orientation="bottom")}
            )
            use_title_label(plot)
            plot.setTitle(title)
            plot.showGrid(x=False, y=True, alpha=0.2)
            self._grids.append(TimeGrid(plot.getViewBox()))
            plot.setMenuEnabled(False)
            plot.hideButtons()  # no pyqtgraph "A" auto-range button: the ranges are driven here
            plot.enableAutoRange(x=False, y=False)  # x driven here; y fitted here to the visible data
            plot.getViewBox().setMouseEnabled(x=False, y=False)
            plot._line_items = (PlotLines(), PlotLines())  # the settled bodies and the live ends of its lines
            for item in plot._line_items:
                plot.addItem(item)
            # x axes only under the bottom row (every plot shows the same x range, set on each view by
            # redraw: no pyqtgraph view links, whose range propagation cost more than setting six ranges);
            # hidden axes are unlinked from their view, so a range change does not re-tick them
            hidden = ("top", "right") if i >= len(self.PLOTS) - self.COLUMNS else ("top", "right", "bottom")
            for name in hidden:
                plot.hideAxis(name)
                plot.getAxis(name).unlinkFromView()
            for axis in ("left", "bottom"):  # repaint axes from a pixmap unless their range changed
                plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
                plot.getAxis(axis).enableAutoSIPrefix(False)  # no "x1e+3" offsets: the values as they are
            plot.getAxis("left").setWidth(LEFT_AXIS_PX)  # one width: the plots (and markers) line up
            self.plots[key] = plot
        self._text_color = "#1d1f23"
        self.plots["util"].setYRange(0, 100)
        self.plots["util"].getAxis("left").setTicks(self.UTIL_TICKS)  # 0-100 %, whatever room the labels take
        # the GPUs' legend in a row of its own under the plots, where it covers no data; the utilisation
        # plot adds its named lines to it (PlotItem.legend)
        self.legend_row = pg.GraphicsWidget()
        self.graphics.addItem(self.legend_row, row=len(self.PLOTS) // self.COLUMNS, col=0, colspan=self.COLUMNS)
        legend = CornerLegend(offset=(1, 1), labelTextSize="8pt", colCount=10, horSpacing=10)
        legend.setParentItem(self.legend_row)
        self.plots["util"].legend = legend
        self._legend_height = -1.0
        self._fit_legend_row()
        self.marker_lines = {key: MarkerLines(plot.getViewBox()) for key, plot in self.plots.items()}
        self.crosshair = Crosshair(self.graphics.scene(), self.plots, self._readout)
        self.event_labels = EventLabels(self.plots["util"].getViewBox())
        self.plots["util"].getViewBox().sigResized.connect(lambda _view: self._fit_util_range())
        self._titles: dict[str, str] = {}
        self.gpu_curves: dict[tuple[str, int], dict[str, SeriesLine]] = {}
        self.capacity_line = pg.InfiniteLine(angle=0, pen=make_pen("#d62728", dashed=True), movable=False)
        self.capacity_line.setVisible(False)
        self.plots["mem"].addItem(self.capacity_line, ignoreBounds=True)
        self.tokens_curve = SeriesLine(self.plots["tokens"], make_pen("#1f77b4"))
        self.loss_curve = SeriesLine(self.plots["loss"], make_pen("#1f77b4"))
        self.eval_curve = self.plots["loss"].plot(
            pen=None, symbol="o", symbolSize=5, symbolBrush="#ff7f0e", symbolPen=None
        )
        self.spend_curve = SeriesLine(self.plots["spend"], make_pen("#2ca02c"))
        self.budget_line = pg.InfiniteLine(
            angle=0,
            pen=make_pen("#d62728", dashed=True),
            movable=False,
            label="budget ${value:,.2f}",
            labelOpts={"position": 0.05, "color": "#d62728", "anchors": [(0, 0), (0, 0)]},
        )
        self.plan_line = pg.InfiniteLine(  # its label above the line at the left, where spend is still low
            angle=0,
            pen=make_pen("#7f7f7f", dashed=True),
            movable=False,
            label="plan ${value:,.2f}",
            labelOpts={"position": 0.05, "color": "#555555", "anchors": [(0, 1), (0, 1)]},
        )
        for line in (self.budget_line, self.plan_line):
            line.setVisible(False)
            self.plots["spend"].addItem(line, ignoreBounds=True)
        # an empty spend axis says why it is empty (in the view's own pixels, centred at each redraw)
        self.no_price_label = pg.TextItem(NO_PRICE, anchor=(0.5, 0.5))
        self.no_price_label.setParentItem(self.plots["spend"].getViewBox())
        self.no_price_label.setVisible(False)
        spend_view = self.plots["spend"].getViewBox()
        spend_view.sigResized.connect(self._place_no_price)
        # an empty plot says so (a run that failed before its first sample or step), not a bare axis
        self.empty_labels: dict[str, pg.TextItem] = {}
        for key, plot in self.plots.items():
            label = pg.TextItem(NO_GPU_SAMPLES if key in ("util", "mem", "power") else NO_STEPS, anchor=(0.5, 0.5))
            view = plot.getViewBox()
            label.setParentItem(view)
            label.setVisible(False)
            view.sigResized.connect(lambda v, label=label: label.setPos(v.rect().center()))
            self.empty_labels[key] = label
        self.apply_palette()

    # -- configuration -------------------------------------------------------------------------
    def set_follow(self, follow: bool, window_s: float | None = None) -> None:
        """Scrolling window (``follow``) of ``window_s`` seconds, or the full history."""
        self.follow = follow
        if window_s is not None:
            self.window_s = float(window_s)

    def set_telemetry(self, telemetry: RunTelemetry | None) -> None:
        """Show another run: clears the curves and draws it from scratch at the next redraw."""
        if telemetry is self._telemetry:
            return
        self._telemetry = telemetry
        self.crosshair.hide()
        for curves in self.gpu_curves.values():
            for line in curves.values():
                line.remove()
        self.gpu_curves.clear()
        self.plots["util"].legend.clear()
        self._fit_legend_row()
        for lines in self.marker_lines.values():
            lines.set_markers([])
        self._markers_drawn = 0
        self._gaps_drawn = ()
        for plot in self.plots.values():
            for plot_lines in plot._line_items:
                plot_lines.gaps = np.empty((0, 2))
        self.event_labels.clear()
        for line in (self.tokens_curve, self.loss_curve, self.spend_curve):
            line.clear()
        self.eval_curve.setData([], [])
        self.capacity_line.setVisible(False)
        self._capacity = 0.0
        self._x_range = None
        self._y_ranges = {"util": (0.0, 100.0)}
        self.plots["util"].setYRange(0.0, 100.0, padding=0)
        for key, plot in self.plots.items():  # no range left over from the run shown before
            if key != "util":
                plot.setYRange(0.0, 1.0, padding=0)
        self._extents.clear()
        self.budget_line.setVisible(False)
        self.plan_line.setVisible(False)
        self.no_price_label.setVisible(False)
        for key, label in self.empty_labels.items():
            label.setVisible(False)
            self._show_axes(key, True)
        self._drawn_version = -1
        self._drawn_mode = None
        self._decimators.clear()
        self._signatures.clear()

    @property
    def telemetry(self) -> RunTelemetry | None:
        return self._telemetry

    # -- drawing -------------------------------------------------------------------------------
    def _set_titles(self, tel: RunTelemetry) -> None:
        sim = " (sim.)" if tel.simulated else ""  # the pane's badge says SIMULATED in full
        titles = {key: title for key, title in self.PLOTS}
        titles["util"] = "GPU utilisation (%)" + (" · dashed: SM" if tel.sm_reported else "") + sim
        capacity = f" · <span style='color:#d62728'>capacity {self._capacity:,.0f}</span>" if self._capacity else ""
        titles["mem"] = "Memory (GiB)" + capacity + sim
        titles["power"] = "Power (W)" + sim
        no_price = not tel.price_per_gpu_hour and not tel.budget_usd and not (tel.spend_usd() or 0)
        self.no_price_label.setVisible(no_price)
        no_gpus, no_steps = not tel.gpus, not len(tel.steps)
        for key, label in self.empty_labels.items():
            empty = no_gpus if key in ("util", "mem", "power") else no_steps and not (key == "spend" and no_price)
            if label.isVisible() != empty:
                label.setVisible(empty)
                label.setPos(self.plots[key].getViewBox().rect().center())
            self._show_axes(key, not (empty or (key == "spend" and no_price)))
        if no_price:
            titles["spend"] = "Spend: no price set"
            self._place_no_price()
        elif tel.budget_usd:
            titles["spend"] = "Spend (USD) vs budget"
        for key, title in titles.items():
            if self._titles.get(key) != title:
                self._titles[key] = title
                self._set_title(key, title)

    def _show_axes(self, key: str, shown: bool) -> None:
        """A plot with nothing to draw says why, alone: no axes, grid or marker lines around nothing."""
        set_axes_shown(self.plots[key], shown)
        self._grids[list(self.plots).index(key)].setVisible(shown)
        self.marker_lines[key].setVisible(shown)

    def _place_no_price(self, *_: object) -> None:
        """The unpriced run's words centred in the spend plot and wrapped to its width (never clipped)."""
        rect = self.plots["spend"].getViewBox().rect()
        self.no_price_label.setTextWidth(max(40.0, rect.width() - 8))
        self.no_price_label.setPos(rect.center())

    def _readout(self, key: str, x: float) -> list[str]:
        """Plot ``key``'s values at time ``x`` for the hover readout (the newest sample at or before it)."""
        tel = self._telemetry
        if tel is None:
            return []
        if key in ("tokens", "loss", "spend"):
            column = {"tokens": "tokens_per_s", "loss": "loss", "spend": "spend_usd"}[key]
            value = value_at(tel.steps, column, x) if len(tel.steps) else None
            if value is None:
                return []
            text = {"tokens": f"{value:,.0f} tokens/s", "loss": f"loss {value:.4g}", "spend": human_money(value)}
            return [text[key]]
        rows = []
        for gpu in tel.gpu_keys:
            buf, name = tel.gpus[gpu], f"GPU {gpu[1]}"
            if key == "util":
                mean, raw = value_at(buf, "util_mean", x), value_at(buf, "util", x)
                if mean is not None:
                    sample = f" (sample {raw:.0f}%)" if raw is not None else ""
                    rows.append(f"{name} {mean:.0f}% mean of 10 s{sample}")
            else:
                column, unit = {"mem": ("mem_used_gib", " GiB"), "power": ("power_w", " W")}[key]
                value = value_at(buf, column, x)
                if value is not None:
                    rows.append(f"{name} {value:,.1f}{unit}" if key == "mem" else f"{name} {value:,.0f}{unit}")
        return rows

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().leaveEvent(event)
        self.crosshair.hide()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "empty_labels"):  # light/dark switched
            self.apply_palette()

    def _set_title(self, key: str, title: str) -> None:
        self.plots[key].setTitle(title, color=self._text_color)

    def apply_palette(self) -> None:
        """Background, axes and titles in the palette's colours (titles in the normal text colour)."""
        palette = self.palette()
        self._text_color = palette.color(QPalette.ColorRole.Text).name()
        self.graphics.setBackground(palette.color(QPalette.ColorRole.Base))
        for key, plot in self.plots.items():
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(self._text_color))
            self._set_title(key, self._titles.get(key, dict(self.PLOTS)[key]))
        self.no_price_label.setColor(self._text_color)
        for label in self.empty_labels.values():
            label.setColor(self._text_color)
        dark = is_dark(palette)
        self.event_labels.set_colors(palette.color(QPalette.ColorRole.Base), QColor(LINE_LABEL_COLORS["plan"][dark]))
        self.budget_line.label.setColor(LINE_LABEL_COLORS["budget"][dark])
        self.plan_line.label.setColor(LINE_LABEL_COLORS["plan"][dark])
        legend = self.plots["util"].legend
        legend.setLabelTextColor(self._text_color)
        base = QColor(palette.color(QPalette.ColorRole.Base))
        base.setAlpha(210)
        legend.setBrush(pg.mkBrush(base))

    def _curves_for(self, key: tuple[str, int]) -> dict[str, SeriesLine]:
        curves = self.gpu_curves.get(key)
        if curves is None:
            color = GPU_COLORS[len(self.gpu_curves) % len(GPU_COLORS)]
            node, index = key
            name = f"GPU {index}" + (f" ({node})" if node and len({k[0] for k in self.gpu_curves} | {node}) > 1 else "")
            raw = SeriesLine(self.plots["util"], make_pen(color + RAW_ALPHA))
            curves = {  # colours follow GPU order; the legend (bottom right, below busy GPUs) names them
                "util": raw,
                "util_mean": SeriesLine(self.plots["util"], make_pen(color, width=2.0), name=name, companions=(raw,)),
                "mem": SeriesLine(self.plots["mem"], make_pen(color)),
                "power": SeriesLine(self.plots["power"], make_pen(color)),
            }
            self.gpu_curves[key] = curves
            self._fit_legend_row()
        return curves

    def _fit_legend_row(self) -> None:
        """The legend row as tall as the legend (nothing for one line or none)."""
        legend = self.plots["util"].legend
        shown = len(legend.items) >= 2  # one GPU's line needs no name
        height = float(legend.height()) + 2.0 if shown else 0.0
        if height != self._legend_height:
            self._legend_height = height
            self.legend_row.setMinimumHeight(height)
            self.legend_row.setMaximumHeight(height)
            legend.setVisible(shown)

    def _fit_util_range(self) -> None:
        """0-100 %, with a strip above 100 as tall as the preemption and resume labels need, so they never
        cover a sample (the ticks stay 0-100)."""
        height = self.plots["util"].getViewBox().rect().height()
        strip = self.event_labels.strip_height()
        top = 100.0 if strip <= 0 or height <= strip + 24 else 100.0 * height / (height - strip)
        if self._y_ranges.get("util") != (0.0, top):
            self._y_ranges["util"] = (0.0, top)
            self.plots["util"].setYRange(0.0, top, padding=0)

    def _sm_curve(self, key: tuple[str, int]) -> SeriesLine:
        curves = self._curves_for(key)
        if "sm" not in curves:
            color = GPU_COLORS[(list(self.gpu_curves).index(key)) % len(GPU_COLORS)]
            curves["sm"] = SeriesLine(
                self.plots["util"],
                make_pen(color, dashed=True),
                name="SM active" if key == min(self.gpu_curves) else None,
            )
            self._fit_legend_row()
        return curves["sm"]

    def _window(self, tel: RunTelemetry) -> tuple[float, float, float]:
        """The x range to show and the decimation bucket (seconds) for it."""
        end = max(tel.elapsed_s(), 1.0)
        if self.follow:
            start = max(0.0, end - self.window_s)
            x_range = (start, max(end, start + min(self.window_s, 60.0)))
            span = self.window_s
        else:
            # the full history grows in steps of ~2% so axes and transforms stay put between steps
            step = nice_step(end * 0.02)
            x_range = (0.0, math.ceil(end / step) * step)
            span = x_range[1]
        # one bucket per pixel column or so, rounded to a power of two so the bucket grid (and the
        # decimators' summaries) only change when the span grows by ~40%, not at every range step
        bucket = 2.0 ** round(math.log2(max(span, 1e-9) / self._pixel_width()))
        return x_range[0], x_range[1], bucket

    def _pixel_width(self) -> int:
        return max(int(self.plots["util"].getViewBox().width()), 100)

    def _decimator(self, buffer: RingBuffer, columns: tuple[str, ...]) -> PeakDecimator:
        dec = self._decimators.get(id(buffer))
        if dec is None or dec.buffer is not buffer:
            dec = self._decimators[id(buffer)] = PeakDecimator(buffer, columns)
        return dec

    def _apply_mode(self) -> None:
        """Plot settings for the mode. A scrolling window moves the x range at every frame, and a bottom
        axis would then re-render its cache pixmap each time: no cache for them while following. (The
        lines need no clip-to-view or auto downsampling in either mode: they hold only the window, and at
        most a chunk before it, see :meth:`PeakDecimator.curves`, at about a point per pixel column.)"""
        cache = QGraphicsItem.CacheMode.NoCache if self.follow else QGraphicsItem.CacheMode.DeviceCoordinateCache
        for plot in self.plots.values():
            plot.getAxis("bottom").setCacheMode(cache)
            plot.getAxis("bottom").scrolling = self.follow
            plot._line_items[0].setCacheMode(cache)  # still x range: bodies repaint from a pixmap until they change

    def _changed(self, name: object, signature: tuple) -> bool:
        if self._signatures.get(name) == signature:
            return False
        self._signatures[name] = signature
        return True

    def _fit_y(self, tel: RunTelemetry, x_lo: float, x_hi: float) -> None:
        """Explicit y ranges from the visible points of each plot's lines (their min and max, kept by
        family as the curves are made), plus the eval points in the window (loss) and the budget and plan
        lines (spend); memory until its capacity is known. Utilisation is fixed at 0-100 %. Replaces
        pyqtgraph's auto-range, which went over every point of every item at each frame and moved the
        axes whenever an extreme scrolled by: here the range only changes when the data leave it or fill
        less than ~half of it (:func:`fit_range`)."""
        gpu_rows = {"mem": GPU_CURVES.index("mem"), "power": GPU_CURVES.index("power")}
        wanted: dict[str, list[float]] = {key: [] for key in ("mem", "power", "tokens", "loss", "spend")}
        for key in tel.gpu_keys:
            ext = self._extents.get(key)
            if ext is not None:
                for plot, row in gpu_rows.items():
                    wanted[plot] += [ext[0][row], ext[1][row]]
        ext = self._extents.get("steps")
        if ext is not None:
            for row, plot in enumerate(("tokens", "loss", "spend")):
                wanted[plot] += [ext[0][row], ext[1][row]]
        if len(tel.evals):
            ex, ey = tel.evals.view("x"), tel.evals.view("eval_loss")
            inside = ey[(ex >= x_lo) & (ex <= x_hi)]
            if len(inside):
                wanted["loss"] += [float(np.fmin.reduce(inside)), float(np.fmax.reduce(inside))]
        wanted["spend"] += [v for v in (tel.budget_usd, tel.planned_cost_usd) if v]
        for plot_key, values in wanted.items():
            if not values or (plot_key == "mem" and self._capacity > 0):
                continue
            values_arr = np.asarray(values, dtype=float)
            current = self._y_ranges.get(plot_key)
            lo, hi = float(np.fmin.reduce(values_arr)), float(np.fmax.reduce(values_arr))
            if plot_key == "spend":  # cumulative spend: the axis starts at $0 (never a negative-dollar axis)
                lo, hi = 0.0, hi if hi > 0 else 1.0
            new = fit_range(current, lo, hi)
            if new is not None and plot_key == "spend":
                new = (0.0, new[1])
            if new is not None and new != current:
                self._y_ranges[plot_key] = new
                self.plots[plot_key].setYRange(*new, padding=0)

    def y_range(self, key: str) -> tuple[float, float]:
        """The y range plot ``key`` shows."""
        lo, hi = self.plots[key].getViewBox().viewRange()[1]
        return float(lo), float(hi)

    def redraw(self, telemetry: RunTelemetry | None = None, *, force: bool = False) -> bool:
        """Push the newest data into the curves and move the x window. Returns whether it drew.

        Each series is peak-decimated (:class:`PeakDecimator`) to about two points per pixel column of
        the x window, so a frame costs the same for a minute or a day of samples, and only curves whose
        buffer or window changed get new data."""
        if telemetry is not None:
            self.set_telemetry(telemetry)
        tel = self._telemetry
        if tel is None:
            return False
        mode = (self.follow, self.window_s)
        if force:
            self._signatures.clear()
        elif tel.version == self._drawn_version and mode == self._drawn_mode:
            return False
        if mode != self._drawn_mode:
            self._apply_mode()
        if tuple(tel.gaps) != self._gaps_drawn:  # a new gap: every line is drawn again, broken there
            self._gaps_drawn = tuple(tel.gaps)
            gaps = np.asarray(tel.gaps, dtype=float).reshape(-1, 2)
            for plot in self.plots.values():
                for lines in plot._line_items:
                    lines.gaps = gaps
            for line in self._all_lines():
                line.forget()
            self._signatures.clear()
        x_lo, x_hi, bucket = self._window(tel)
        max_raw = 2 * self._pixel_width()
        window = (x_lo, x_hi, bucket, max_raw)
        if (x_lo, x_hi) != self._x_range:
            self._x_range = (x_lo, x_hi)
            for plot in self.plots.values():
                plot.getViewBox().setXRange(x_lo, x_hi, padding=0)
            items: list[QGraphicsItem] = [*self._grids, *self.marker_lines.values(), self.event_labels]
            for item in items:
                item.update()
        for key in tel.gpu_keys:
            buf = tel.gpus[key]
            curves = self._curves_for(key)
            if tel.sm_reported:
                self._sm_curve(key)
            if not self._changed(key, (buf.version, tel.sm_reported, window)):
                continue
            decimated = self._decimator(buf, GPU_SERIES).curves(*window)
            self._extents[key] = visible_extent(decimated, x_lo, x_hi)
            for row, name in enumerate(GPU_CURVES):
                if name in curves:
                    curves[name].set(decimated, row)
        capacity = max((b.last("mem_total_gib") or 0.0 for b in tel.gpus.values()), default=0.0)
        if capacity > 0 and capacity != self._capacity:
            self._capacity = capacity
            self.capacity_line.setVisible(True)  # first: a hidden line's label ignores value changes
            self.capacity_line.setValue(capacity)
            self._y_ranges["mem"] = (0.0, capacity * 1.08)  # memory is drawn against capacity: a fixed scale
            self.plots["mem"].setYRange(0.0, capacity * 1.08, padding=0)
        steps = tel.steps
        if len(steps) and self._changed("steps", (steps.version, window)):
            decimated = self._decimator(steps, STEP_SERIES).curves(*window)
            self._extents["steps"] = visible_extent(decimated, x_lo, x_hi)
            for row, line in enumerate((self.tokens_curve, self.loss_curve, self.spend_curve)):
                line.set(decimated, row)
        if len(tel.evals) and self._changed("evals", (tel.evals.version,)):
            self.eval_curve.setData(tel.evals.view("x").copy(), tel.evals.view("eval_loss").copy())
        for line, value in ((self.budget_line, tel.budget_usd), (self.plan_line, tel.planned_cost_usd)):
            if value and self._changed(line, (value,)):
                line.setVisible(True)
                line.setValue(value)
        self._fit_y(tel, x_lo, x_hi)
        self._set_titles(tel)
        if self._markers_drawn < len(tel.markers):
            self._add_markers(tel)
        self._fit_util_range()
        self._drawn_version = tel.version
        self._drawn_mode = mode
        return True

    def _all_lines(self) -> list[SeriesLine]:
        lines = [self.tokens_curve, self.loss_curve, self.spend_curve]
        for curves in self.gpu_curves.values():
            lines += list(curves.values())
        return lines

    def _add_markers(self, tel: RunTelemetry) -> None:
        """The new markers: dashed lines on every plot (:class:`MarkerLines`), and the labels of
        preemptions and resumes on the utilisation plot (:class:`EventLabels`)."""
        self._markers_drawn = len(tel.markers)
        for lines in self.marker_lines.values():
            lines.set_markers(tel.markers)
        self.event_labels.set_events([m for m in tel.markers if m.kind != "checkpoint"])

    def curve_lengths(self) -> dict[str, int]:
        """Points drawn by each curve family (for tests and diagnostics)."""
        out = {
            name: len(line.points()[0])
            for name, line in (("tokens", self.tokens_curve), ("loss", self.loss_curve), ("spend", self.spend_curve))
        }
        for key, curves in self.gpu_curves.items():
            out[f"gpu{key[1]}"] = len(curves["util"].points()[0])
        return out
