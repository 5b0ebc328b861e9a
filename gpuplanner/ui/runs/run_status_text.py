"""The Runs pane's words for one run (no Qt): its state line, progress, elapsed time and ETA, spend
against budget and plan, why it failed, and what a speed measurement found. The pane only puts them on
its labels, so what they say is testable without a window."""

from __future__ import annotations

import html
from typing import Any

from gpuplanner.app.run_status import ACTIVE_STATES
from gpuplanner.history.slurm_queue import queue_text
from gpuplanner.ui.human import NO_PRICE, human_duration, human_money
from gpuplanner.ui.runs.run_telemetry import RunTelemetry


def money_or_dash(value: float | None) -> str:
    return "—" if value is None else human_money(value)


def duration_or_dash(seconds: float | None) -> str:
    return "—" if seconds is None else human_duration(seconds)


NO_RUN = "No run yet: launch one with New run…, or press Try a demo run."
WAITING = "Starting: waiting for the first step"


def waiting_text(state: str | None, tel: RunTelemetry | None, launching: str | None) -> str | None:
    """What stands in place of the plots while there is nothing to plot (None: draw the plots): no run
    yet, a launch under way, or a run that has not reported a GPU sample or a step yet."""
    if tel is None:
        return f"Starting on {launching}: waiting for the first step" if launching else NO_RUN
    if tel.gpus or len(tel.steps):
        return None
    if state in ACTIVE_STATES or state is None:
        return WAITING
    return f"The run {state} before its first step: nothing to plot"


def state_line(host: str, state: str, tel: RunTelemetry, exit_code: int | None, queue: Any = None) -> str:
    """``on host · device · <b>state</b> (end status), exit code · queue wait`` (rich text); ``queue``: a
    Slurm job's wait in the queue and the reason."""
    code = f", exit {exit_code}" if exit_code is not None else ""
    end = f" ({tel.end_status})" if tel.end_status and tel.end_status != state else ""
    device = f" · {tel.device}" if tel.device else ""
    queued = f" · {html.escape(queue_text(queue))}" if queue else ""
    return f"on {host}{device} · <b>{state}</b>{end}{code}{queued}"


def progress(tel: RunTelemetry, state: str) -> tuple[int, str]:
    """The progress bar's value (of 1000) and its text."""
    frac = tel.progress()
    if frac is None:
        return 0, "waiting for the first step…" if state in ACTIVE_STATES else "—"
    return int(frac * 1000), f"step {tel.current_step():,} of {tel.steps_total:,} ({frac:.0%})"


def elapsed_eta(tel: RunTelemetry, state: str) -> str:
    eta = tel.eta_s() if state in ("running", "starting") else None
    return f"Elapsed {duration_or_dash(tel.elapsed_s())} · ETA {duration_or_dash(eta)}"


def spend_line(tel: RunTelemetry, state: str) -> str:
    """Spend so far ("no price" when the host has none, never $0), of the budget, the plan, projected."""
    spend = tel.spend_usd()
    if tel.price_per_gpu_hour is None and not spend:  # unknown, not $0
        parts = [f"Spend: {NO_PRICE} (none set for this host)"]
    else:
        parts = [f"Spend {money_or_dash(spend)}"]
    if tel.budget_usd:
        parts.append(
            f"of budget {money_or_dash(tel.budget_usd)}" + (f" ({spend / tel.budget_usd:.0%})" if spend else "")
        )
    if tel.planned_cost_usd:
        parts.append(f"· plan {money_or_dash(tel.planned_cost_usd)}")
    projected = tel.projected_cost_usd()
    if projected is not None and state in ACTIVE_STATES:
        parts.append(f"· projected {money_or_dash(projected)}")
    return " ".join(parts)


def failure_text(failure: dict[str, Any] | None, exit_code: int | None, end_error: str | None) -> tuple[str, str]:
    """A failed run's headline (exit code and error) and the tail of the trainer's stderr; ``failure``:
    what the history holds (``None``: not read yet)."""
    known = failure or {}
    error = known.get("error") or end_error
    code = exit_code if exit_code is not None else known.get("exit_code")
    head = "Failed" + (f" (exit {code})" if code is not None else "")
    if error:
        head += f": {error}"
    elif failure is None:
        head += ": reading the error from the host…"
    tail = known.get("stderr_tail") or ""
    if failure is not None and not tail:
        tail = known.get("stderr_problem") or "(the trainer wrote nothing to stderr)"
    return head, tail


def measured_text(result: dict[str, Any], host_name: str) -> str:
    """What ``trainer bench`` measured on ``host_name`` and whether the planner can use it."""
    mfu = f", MFU {result['mfu']:.1%}" if isinstance(result.get("mfu"), (int, float)) else ""
    text = (
        f"Measured on {host_name} ({result.get('device')}, {result.get('precision')}): "
        f"{result.get('tokens_per_s', 0):,.0f} tokens/s, {result.get('step_time_s', 0) * 1000:,.0f} ms "
        f"per step{mfu}. "
    )
    if "recorded_id" in result and result.get("catalog_knows_gpu") is False:
        text += (
            f"Recorded as bench result #{result['recorded_id']}, but the catalog knows no GPU named "
            f"{result['recorded_gpu_type']!r}, so the Plan pane cannot use it "
            "(`gpuplanner hosts bench --gpu-type` records it under a catalog name)."
        )
    elif "recorded_id" in result:
        text += (
            f"Recorded as bench result #{result['recorded_id']} for {result['recorded_gpu_type']}: "
            "the Plan pane uses it for this model, method, precision and sequence length."
        )
    else:
        text += f"Not recorded ({result.get('not_recorded')})."
    return text
