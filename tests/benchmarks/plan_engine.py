"""The Plan pane's engine alone: ``gpuplanner.planning.compute`` on the requests ui_speed.py's edits make.

The requests are captured from a real Plan pane (offscreen) while it makes the benchmark's edits
(micro-batch 1-6, sequence 1024/2048), then ``compute`` is timed on them on the main thread, without the
GUI thread competing for the interpreter. ``--profile`` adds a cProfile listing of the engine.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/benchmarks/plan_engine.py [--profile]
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RUNS = 30


def captured_calls() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The arguments the Plan pane passed to ``compute`` during a short run of ui_speed's edits."""
    import gpuplanner.ui.plan.plan_pane as plan_pane
    from tests.benchmarks import ui_speed

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = plan_pane.compute

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    plan_pane.compute = spy
    ui_speed.EDITS = 6
    try:
        ui_speed.recalc_seconds()
    finally:
        plan_pane.compute = real
    return calls[3:]  # the edits (the first ones settle the pane)


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from gpuplanner.planning import compute

    calls = captured_calls()

    def run(n: int) -> list[float]:
        times = []
        for i in range(n):
            args, kwargs = calls[i % len(calls)]
            start = time.perf_counter()
            compute(*args, **kwargs)
            times.append(time.perf_counter() - start)
        return times

    run(len(calls))  # warm the caches, as a running app has them
    times = run(RUNS)
    print(
        f"plan engine (compute) on the Plan pane's edits: median {statistics.median(times) * 1000:.1f} ms, "
        f"best {min(times) * 1000:.1f} ms over {RUNS} calls"
    )
    if "--profile" in sys.argv:
        profile = cProfile.Profile()
        profile.enable()
        run(RUNS)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
