"""Where the described option's time and money go, as named parts for the details' small stacked bars, and the
one sentence of verdict beside them. Qt-free.

A step's parts are the step model's (compute, recompute, memory-bound, communication, launch overhead; a
measured speed has none). The cost's parts: on-demand, the GPU-hours; on spot, the expected cost split by the
hours it pays for (training, checkpoints, restarts, work lost to interruptions). Any further named cost lines
the plan carries (storage, transfer) are appended by :func:`cost_parts` as they are: the bars draw whatever
named parts they get.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplanner.plan.planner import Plan
from gpuplanner.ui.human import human_money, significant
from gpuplanner.ui.plan.plan_details import Focus, price_choice

Parts = tuple[tuple[str, float], ...]  # (name, value) in drawing order, values >= 0

STEP_PARTS = (
    ("compute", "compute_s"),
    ("recompute", "recompute_s"),
    ("memory-bound", "memory_s"),
    ("communication", "communication_s"),
    ("launch overhead", "overhead_s"),
)


def step_seconds(seconds: float) -> str:
    """A step's part: "21.3 s", "451 ms" (a step's parts run from milliseconds to minutes)."""
    return f"{significant(seconds, 3)} s" if seconds >= 1 else f"{significant(seconds * 1000, 3)} ms"


def step_parts(plan: Plan) -> Parts:
    """Seconds of one optimizer step on one GPU, by part (empty without a step model)."""
    step = plan.throughput.step
    if step is None:
        return ()
    return tuple((name, float(getattr(step, key))) for name, key in STEP_PARTS if getattr(step, key) > 0)


def cost_parts(focus: Focus, extra: Sequence[tuple[str, float]] = ()) -> Parts:
    """Dollars of the described option's run, by part (empty without a price); ``extra`` named cost lines
    (storage, transfer) follow the GPU time's."""
    plan, row = focus.plan, focus.row
    pricing = row.pricing if row is not None else plan.request.pricing_mode
    if price_choice(focus) is None:
        return ()
    parts: list[tuple[str, float]] = []
    if pricing == "spot" and plan.spot is not None:
        estimate, cost = plan.spot.estimate, plan.spot.cost_usd
        hours = estimate.hours if estimate.hours > 0 else 1.0
        shares = (
            ("checkpoints", estimate.checkpoint_hours),
            ("restarts", estimate.restart_hours),
            ("lost work", estimate.lost_work_hours),
        )
        named = [(name, cost * h / hours) for name, h in shares if h > 0]
        if not named and estimate.overhead_hours > 0:  # the flat overhead model has no split
            named = [("spot overhead", cost * estimate.overhead_hours / hours)]
        parts.append(("training", max(0.0, cost - sum(v for _, v in named))))
        parts += named
    elif plan.on_demand_cost_usd is not None:
        parts.append(("GPU time", plan.on_demand_cost_usd))
    parts += [(name, float(value)) for name, value in extra if value > 0]
    return tuple((name, value) for name, value in parts if value > 0)


def largest(parts: Parts) -> tuple[str, float] | None:
    """The largest part and its share of the whole."""
    total = sum(v for _, v in parts)
    if not parts or total <= 0:
        return None
    name, value = max(parts, key=lambda p: p[1])
    return name, value / total


def verdict(focus: Focus, steps: Parts, costs: Parts) -> str:
    """One sentence: does it fit, what a step waits on, and where the money goes."""
    plan = focus.plan
    memory = plan.memory.total / 2**30
    if plan.fits is False:
        words = [f"does not fit ({memory:,.1f} GiB per GPU)"]
    elif plan.capacity_gib:
        spare = plan.capacity_gib * plan.request.headroom - memory
        words = [f"fits with {spare:,.1f} GiB to spare"]
    else:
        words = []
    step = largest(steps)
    if step is not None:
        words.append(f"{step[1]:.0%} of each step is {step[0]}")
    cost = largest(costs)
    if cost is not None and len(costs) > 1:
        total = sum(v for _, v in costs)
        words.append(f"{cost[1]:.0%} of the {human_money(total)} pays for {cost[0]}")
    if not words:
        return ""
    text = "; ".join(words)
    return text[0].upper() + text[1:] + "."
