"""How fast the desktop app feels: start-up, Plan pane recalculation, Runs plot redraw.

Prints three figures against their targets:
1. time from process start to the main window shown (target < 1.0 s): a fresh Python process is
   started (empty data directory, private settings) and reports when the window's first frame
   has been painted; median of 5 starts, measured from just before the process is spawned (also
   printed: when the window is complete, i.e. the cost chart and the Runs pane, built after the first
   frame, are there);
2. time to recalculate the Plan pane after an edit (target < 50 ms): from a changed field to the new
   result on screen (request built, engine run on the worker, table/chart/bar updated), without
   the deliberate 150 ms typing debounce; median and p90 of 30 edits;
3. the Runs pane's plot redraw with 8 GPUs x 86,400 samples (target < 16 ms per frame), from
   ``tests.benchmarks.synthetic_runs.redraw_benchmark``.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/benchmarks/ui_speed.py
    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python tests/benchmarks/ui_speed.py --startup

Under a real X server (``xvfb-run``: DISPLAY is set) the window uses the xcb platform, as on a desktop;
``--startup`` prints the start-up figures only. The load average is printed beside them: on a busy
machine start-up is slower, so compare figures taken at similar loads.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STARTS = 5
CPU_TO_SHOWN: list[float] = []
EDITS = 30


def _child_startup() -> None:
    """Run inside the spawned process: build the real app and window, report the first painted frame."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    from gpuplanner.ui.app import create_application, create_window

    app = create_application(())
    window = create_window()

    class FirstPaint(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
            if event.type() == QEvent.Type.Paint and not hasattr(self, "done"):
                self.done = True
                QTimer.singleShot(0, report)
            return False

    def report() -> None:
        print(f"SHOWN {time.time():.6f} {time.process_time():.6f}", flush=True)
        complete()

    def complete() -> None:
        if not (window.is_built("Runs") and window.plan_pane.result is not None):
            QTimer.singleShot(5, complete)
            return
        print(f"READY {time.time():.6f}", flush=True)
        window.shutdown(stop_runs=True)
        window._closing_done = True
        app.quit()

    watcher = FirstPaint()
    window.installEventFilter(watcher)
    window.show()
    app.exec()


def startup_seconds() -> tuple[list[float], list[float]]:
    """Wall seconds to the first painted frame and to the complete window, per start; also
    :data:`CPU_TO_SHOWN`, the CPU seconds the process had used by its first frame (less sensitive than
    wall time to other processes on a busy machine)."""
    times, ready = [], []
    CPU_TO_SHOWN.clear()
    for _ in range(STARTS):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(
                os.environ,
                GPUPLANNER_DATA_DIR=f"{tmp}/data",
                GPUPLANNER_CONFIG_DIR=f"{tmp}/config",
                XDG_CONFIG_HOME=f"{tmp}/xdg",
                PYTHONPATH=str(REPO),
            )
            env.setdefault("QT_QPA_PLATFORM", "offscreen")
            start = time.time()
            out = subprocess.run(
                [sys.executable, __file__, "--child-startup"], env=env, capture_output=True, text=True, timeout=120
            )
            shown = [line for line in out.stdout.splitlines() if line.startswith("SHOWN ")]
            if not shown:
                raise RuntimeError(f"the window never showed:\n{out.stdout}\n{out.stderr}")
            times.append(float(shown[0].split()[1]) - start)
            CPU_TO_SHOWN.append(float(shown[0].split()[2]))
            done = [line for line in out.stdout.splitlines() if line.startswith("READY ")]
            if done:
                ready.append(float(done[0].split()[1]) - start)
    return times, ready


def recalc_seconds() -> tuple[list[float], list[float], list[float]]:
    """Edit -> result on screen; the engine's share of it (on the worker thread); and the GUI thread's
    (the answer shown: table, chart and details updated, then painted)."""
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from gpuplanner.ui.plan.plan_pane import PlanPane
    from gpuplanner.ui.services import AppServices

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        pane = PlanPane(AppServices(Path(tmp) / "h.sqlite", Path(tmp) / "config"))
        pane.resize(1160, 760)
        pane.show()

        def settle() -> None:
            # Wait in an event loop, as the app does (a busy processEvents() loop would hold the GIL
            # the worker thread needs).
            if pane.is_busy() or pane.result is None:
                loop = QEventLoop()
                pane.resultsUpdated.connect(loop.quit)
                QTimer.singleShot(10_000, loop.quit)
                loop.exec()
                pane.resultsUpdated.disconnect(loop.quit)

        settle()
        totals, engine, gui = [], [], []
        for i in range(EDITS + 3):
            start = time.perf_counter()
            pane.form.set_values({"micro-batch": str(1 + i % 6), "seq-len": str(1024 * (1 + i % 2))})
            pane.recalculate()
            settle()
            shown = time.perf_counter()
            app.processEvents()  # the repaint of the new result
            end = time.perf_counter()
            if i >= 3:  # the first edits warm caches, as a running app has them
                totals.append(end - start)
                engine.append(pane.result.compute_s)
                gui.append((pane.last_show_s or 0.0) + end - shown)
        pane.shutdown()
        pane.close()
        pane.deleteLater()
        app.processEvents()
    return totals, engine, gui


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"platform: {os.environ['QT_QPA_PLATFORM']}, python {sys.version.split()[0]}, load average {load}")
    starts, ready = startup_seconds()
    print(
        f"start-up to window shown: median {statistics.median(starts):.2f} s, best {min(starts):.2f} s "
        f"over {STARTS} starts (target < 1.0 s); CPU time of the process by then: median "
        f"{statistics.median(CPU_TO_SHOWN):.2f} s"
    )
    if ready:
        print(
            f"  window complete (plan result, cost chart and Runs pane built): median {statistics.median(ready):.2f} s"
        )
    if "--startup" in sys.argv:
        return 0
    totals, engine, gui = recalc_seconds()
    print(
        f"plan recalculation after an edit: median {statistics.median(totals) * 1000:.1f} ms, "
        f"p90 {_p90(totals) * 1000:.1f} ms, best {min(totals) * 1000:.1f} ms (engine on the worker: median "
        f"{statistics.median(engine) * 1000:.1f} ms; answer shown and painted on the GUI thread: median "
        f"{statistics.median(gui) * 1000:.1f} ms) over {EDITS} edits (target < 50 ms; plus the 150 ms typing debounce)"
    )
    try:
        from tests.benchmarks.synthetic_runs import redraw_benchmark
    except ImportError as exc:
        print(f"runs plot redraw: not measured ({exc})")
        return 0
    per_frame = redraw_benchmark()
    print(f"runs plot redraw, 8 GPUs x 86,400 samples: median {per_frame * 1000:.1f} ms per frame (target < 16 ms)")
    return 0


if __name__ == "__main__":
    if "--child-startup" in sys.argv:
        _child_startup()
    else:
        raise SystemExit(main())
