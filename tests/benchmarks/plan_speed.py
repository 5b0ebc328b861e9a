"""How long the full `compare` table takes: every catalog GPU x count (1, 2, 4, 8) x on-demand/spot.

Prints the median and best time of the engine's table (catalog already loaded, as in the app),
against a baseline measured in the same run: one single-GPU plan. Target: the table under 20 ms. Also one
memory estimate (target under 100 us; it was a timed unit test, which failed on a loaded machine).

    .venv/bin/python tests/benchmarks/plan_speed.py
"""

from __future__ import annotations

import statistics
import time

from gpuplanner.plan import example
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import compare
from gpuplanner.plan.memory import estimate_memory
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

REPEATS = 30


def timed(function, repeats: int = REPEATS) -> list[float]:
    function()  # warm caches (catalog parse, spot simulations) as a running app has them
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    catalog = load_catalog()
    setup = TrainSetup(
        method=example.METHOD,
        micro_batch=example.MICRO_BATCH,
        grad_accum=example.GRAD_ACCUM,
        seq_len=example.SEQ_LEN,
        grad_checkpointing=example.GRAD_CHECKPOINTING,
    )
    request = PlanRequest(
        from_preset(example.MODEL),
        setup,
        Workload(samples=example.SAMPLES),
        gpu=None,
        deadline_hours=24.0,
        budget_usd=500.0,
    )
    rows = compare(request, catalog)
    table = timed(lambda: compare(request, catalog))
    single = timed(
        lambda: make_plan(PlanRequest(request.model, setup, request.workload, gpu=example.GPU), catalog, suggest=False)
    )
    median, best = statistics.median(table), min(table)
    print(f"compare table: {len(rows)} rows ({len(catalog.gpus)} GPUs x 4 counts x 2 pricings)")
    print(f"  median {median * 1000:.2f} ms, best {best * 1000:.2f} ms (target < 20 ms)")
    print(f"one plan (baseline): median {statistics.median(single) * 1000:.3f} ms")
    print(f"table / one plan: {median / statistics.median(single):.1f}x")
    # One memory estimate (the form recalculates it on every keystroke): 8 setups of an 8B model.
    spec = from_preset("llama-3.1-8b")
    setups = [TrainSetup(micro_batch=m, method=meth) for m in (1, 2, 4, 8) for meth in ("full", "lora")]
    memory = timed(lambda: [estimate_memory(spec, s) for s in setups])
    per_call = statistics.median(memory) / len(setups)
    print(f"memory estimate: median {per_call * 1e6:.1f} us per call (target < 100 us)")


if __name__ == "__main__":
    main()
