"""Synthetic Runs-pane data and the plot redraw benchmark (tests and `tests/benchmarks/ui_speed.py`).

``synthetic_telemetry`` builds a run with N GPUs of 1 Hz samples plus steps (no Qt);
``redraw_benchmark`` times the Runs plots (``LivePlots``) redrawing it, frame by frame:

    QT_QPA_PLATFORM=offscreen .venv/bin/python -c \
        "from tests.benchmarks.synthetic_runs import redraw_benchmark as b; print(b(follow=True), b())"
"""

from __future__ import annotations

import numpy as np

from gpuplanner.ui.runs.ring_buffer import RingBuffer
from gpuplanner.ui.runs.run_telemetry import GPU_COLUMNS, RunTelemetry


def synthetic_telemetry(gpus: int = 8, samples: int = 86_400, *, seed: int = 0) -> RunTelemetry:
    """A run with ``gpus`` GPUs and ``samples`` 1 Hz samples each, plus steps, for benchmarks and tests."""
    rng = np.random.default_rng(seed)
    tel = RunTelemetry(None, gpu_capacity=max(samples, 1))
    x = np.arange(samples, dtype=np.float64)
    tel.t0, tel.last_t = 0.0, float(samples - 1)
    for i in range(gpus):
        util = np.clip(85 + 10 * np.sin(x / 900 + i) + rng.normal(0, 4, samples), 0, 100)
        rows = np.column_stack(
            [
                x,
                util,
                np.full(samples, np.nan),
                60 + 8 * np.sin(x / 3000 + i),
                np.full(samples, 80.0),
                300 + 3 * util,
                util,
            ]
        )
        buf = RingBuffer(GPU_COLUMNS, samples, initial=samples)
        buf.extend(rows)
        tel.gpus[("", i)] = buf
    n_steps = samples // 2
    sx = x[::2][:n_steps]
    tel.steps.extend(
        np.column_stack(
            [
                sx,
                np.arange(n_steps),
                3.0 * np.exp(-sx / 30000) + 1 + rng.normal(0, 0.05, n_steps),
                5e4 + rng.normal(0, 2e3, n_steps),
                sx / 3600 * 8 * 2.5,
                np.full(n_steps, 2.0),
                np.full(n_steps, 0.05),
            ]
        )
    )
    tel.steps_total = n_steps * 2
    tel.budget_usd, tel.planned_cost_usd = 500.0, 450.0
    tel.version += 1
    return tel


def redraw_benchmark(gpus: int = 8, samples: int = 86_400, frames: int = 30, *, follow: bool = False) -> float:
    """Seconds per frame to redraw the Runs plots (``LivePlots`` at 1280x800, full history by default)
    with ``gpus`` GPUs x ``samples`` 1 Hz samples: each frame appends one sample per GPU, pushes the
    data into the curves and paints the widget. Returns the median."""
    from PySide6.QtCore import QElapsedTimer
    from PySide6.QtWidgets import QApplication

    from gpuplanner.ui.runs.live_plots import LivePlots

    app = QApplication.instance() or QApplication([])
    tel = synthetic_telemetry(gpus, samples)
    plots = LivePlots()
    plots.resize(1280, 800)
    plots.set_follow(follow)
    plots.show()
    plots.redraw(tel, force=True)
    app.processEvents()
    timer = QElapsedTimer()
    times = []
    try:
        for k in range(frames):
            for buf in tel.gpus.values():
                buf.append((samples + k, 80.0, None, 60.0, 80.0, 400.0, 80.0))
            tel.last_t = float(samples + k)
            tel.version += 1
            timer.start()
            plots.redraw()
            plots.graphics.viewport().update()
            app.processEvents()
            times.append(timer.nsecsElapsed() / 1e9)
    finally:
        plots.close()
        plots.deleteLater()
        app.processEvents()
    times.sort()
    return times[len(times) // 2]
