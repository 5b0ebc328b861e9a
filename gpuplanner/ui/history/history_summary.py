"""The History pane's Summary tab as HTML: one run's figures (:func:`summary_html`), why it failed, its
billed and idle time, where the time went, its alerts with their "Carry to plan" links, its GPUs, and
planned against actual. A cost the run cannot have (no price) reads "no price", never $0."""

from __future__ import annotations

import html as html_lib
from collections.abc import Callable
from typing import Any

from gpuplanner.app.run_status import status_text
from gpuplanner.history.alert_rules import KIND_TITLES
from gpuplanner.history.analytics import RunSummary
from gpuplanner.history.gpu_metrics import METRIC_LABELS, METRICS, UTILISATION_NOTE, format_metric, throttle_text
from gpuplanner.history.run_cost import unpriced_figure
from gpuplanner.history.time_breakdown import TimeBreakdown, from_dict
from gpuplanner.ui.history.history_model import format_time, format_value
from gpuplanner.ui.human import NO_PRICE, human_bytes, human_hours, human_money
from gpuplanner.ui.widgets.time_bars import COLORS, OTHER_COLOR, phase_text

MISSING_RUN = "not reported by this run's GPUs (SM activity needs GPM: Hopper and newer)"


def run_breakdown(summary: RunSummary) -> TimeBreakdown:
    """Where the run's billed time went (an empty breakdown when the history has none)."""
    return from_dict(summary.time_breakdown) or TimeBreakdown(False, 0.0, 0.0, None)


def run_title(summary: RunSummary) -> str:
    """``#id name``, cut to 32 characters (a time bar's label)."""
    name = summary.name or summary.model_name or ""
    text = f"#{summary.run_id} {name}".strip()
    return text if len(text) <= 32 else text[:31] + "…"


def failure_html(failure: dict[str, Any] | None) -> str:
    """Why a run failed: the error and the tail of the trainer's stderr (kept in the history)."""
    if not failure:
        return ""
    code = failure.get("exit_code")
    head = "Why it failed" + (f" (exit {code})" if code is not None else "")
    parts = [f"<h4 style='color:#d64545'>{html_lib.escape(head)}</h4>"]
    if failure.get("error"):
        parts.append(f"<p><b>{html_lib.escape(str(failure['error']))}</b></p>")
    tail = str(failure.get("stderr_tail") or "").strip()
    if tail:
        parts.append(
            f"<p style='color:gray'>Last lines of stderr on {html_lib.escape(str(failure.get('host') or '?'))}:</p>"
        )
        parts.append(f"<pre style='font-size:small'>{html_lib.escape(tail)}</pre>")
    elif failure.get("stderr_problem"):
        parts.append(f"<p style='color:gray'>{html_lib.escape(str(failure['stderr_problem']))}</p>")
    return "".join(parts)


def cost_text(s: RunSummary, usd: float | None) -> str:
    """One of the run's cost figures: "no price" when the run has none (never $0 or a dash)."""
    return NO_PRICE if unpriced_figure("cost_usd", usd, s.price_usd_per_gpu_hour) else human_money(usd)


def billed_rows(s: RunSummary) -> list[tuple[str, str]]:
    """Billed time and what its idle part cost (billed minus training), and a Slurm run's queue wait."""
    out = []
    b = s.billed
    if b:
        source = {"launcher": "launch to end", "sacct": "Slurm sacct", "scontrol": "Slurm scontrol"}
        via = html_lib.escape(source.get(b.get("billed_source") or "", b.get("billed_source") or ""))
        out.append(("Billed time", f"{human_hours(b['billed_hours'])} · {cost_text(s, b['billed_cost_usd'])} ({via})"))
        if b.get("idle_billed_hours") is not None:
            idle = f"{human_hours(b['idle_billed_hours'])} · {cost_text(s, b.get('idle_cost_usd'))}"
            out.append(("Idle (billed − training)", idle))
    q = s.queue
    if q:
        waited = q.get("queue_wait_s")
        wait = human_hours(waited / 3600.0) if waited is not None else "–"
        why = f" · pending: {q.get('reason') or '?'}" if q.get("pending") else ""
        if not why and q.get("reason"):
            why = f" (was {q['reason']})"
        out.append(("Queue wait", html_lib.escape(wait + why)))
    return out


def summary_html(s: RunSummary, failure: dict[str, Any] | None = None, plan_gpu: str | None = None) -> str:
    def row(label: str, value: Any) -> str:
        return f"<tr><td style='padding-right:14px;color:gray'>{label}</td><td>{value}</td></tr>"

    esc = html_lib.escape
    title = esc(f"Run {s.run_id}" + (f": {s.name}" if s.name else ""))
    sim = " <i>(simulated GPU telemetry)</i>" if s.simulated else ""
    gpus = f"{s.gpu_count} GPU" + ("s" if s.gpu_count != 1 else "")
    run_gpu = f"{s.gpu_count} x {s.gpu_type}" if s.gpu_type else f"{gpus}, GPU type unknown"
    left = [
        ("Status", esc(status_text(s.status))),
        ("Host", esc(s.host or "–")),
        ("GPU", esc(run_gpu)),
        ("Model", esc(s.model_name or "–")),
        ("Started", format_time(s.started_at)),
        ("Time held", human_hours(s.hours)),
        ("GPU-hours", format_value(s.gpu_hours)),
        ("Interruptions", f"{s.interruptions} ({human_hours(s.interruption_hours)} lost)"),
        *billed_rows(s),
    ]
    if s.calibration:
        use = s.calibration
        left.append(("Calibrates the planner", esc(("yes: " if use["calibrates"] else "no: ") + use["detail"])))
    sm_hours = (
        f"{format_value(s.effective_gpu_hours_sm)} (SM activity {format_value(s.avg_sm_active_pct)} %"
        + (
            f", {format_value(s.sm_active_coverage_pct)} % of samples)"
            if s.sm_active_coverage_pct is not None and s.sm_active_coverage_pct < 99.5
            else ")"
        )
        if s.effective_gpu_hours_sm is not None
        else f"<i style='color:gray'>{esc(MISSING_RUN)}</i>"
    )
    right = [
        ("Cost", cost_text(s, s.cost_usd)),
        ("Avg utilisation", f"{format_value(s.avg_util_pct)} %"),
        ("Effective GPU-hours (NVML utilisation)", format_value(s.effective_gpu_hours)),
        ("Effective GPU-hours (SM activity)", sm_hours),
        ("Cost per effective GPU-hour", cost_text(s, s.cost_per_effective_gpu_hour_usd)),
        ("Cost per sample", cost_text(s, s.cost_per_sample_usd)),
        ("Cost per 1M tokens", cost_text(s, s.cost_per_million_tokens_usd)),
        ("Tokens/s (median)", format_value(s.tokens_per_s)),
        ("Data wait", f"{format_value(s.data_wait_pct)} %"),
        ("Final loss", format_value(s.final_loss)),
    ]
    html = [
        f"<h3>{title}{sim}</h3>",
        failure_html(failure) if s.status == "failed" else "",
        "<table><tr><td valign='top'><table>",
        *(row(k, v) for k, v in left),
        "</table></td><td valign='top' style='padding-left:30px'><table>",
        *(row(k, v) for k, v in right),
        "</table></td></tr></table>",
        f"<p style='color:gray'>{esc(UTILISATION_NOTE)}</p>",
        gpus_html(s.gpus),
    ]
    html.append(time_html(s))
    if s.alerts:
        html.append(alerts_html(s.alerts))
    if s.planned:
        html.append(planned_html(s.planned, plan_gpu, run_gpu))
    return "".join(html)


def time_html(s: RunSummary) -> str:
    """Where the run's billed time went: a stacked bar (table cells) and a legend with the numbers."""
    breakdown = run_breakdown(s)
    if not breakdown.recorded:
        return f"<p><span style='color:gray'>Where the time went:</span> {html_lib.escape(breakdown.note or '')}</p>"
    shown = [p for p in breakdown.phases if p.shown]
    cells = "".join(
        f"<td width='{max(1, round(p.share * 100))}%' bgcolor='{COLORS.get(p.phase, OTHER_COLOR)}'>&nbsp;</td>"
        for p in shown
    )
    legend = "<br>".join(
        f"<span style='color:{COLORS.get(p.phase, OTHER_COLOR)}'>&#9632;</span> "
        f"{html_lib.escape(phase_text(breakdown, p.phase))}"
        for p in shown
    )
    return (
        "<h4>Where the billed time went</h4>"
        f"<table width='100%' cellspacing='0' cellpadding='2'><tr>{cells}</tr></table>"
        f"<p>{legend}</p>"
    )


def alerts_html(alerts: list[dict[str, Any]]) -> str:
    """Each alert, its diagnosis (with the expected saving) and a link that carries its suggestion."""
    esc = html_lib.escape
    items, carried = [], 0
    for alert in alerts:
        title = KIND_TITLES.get(str(alert.get("kind")), str(alert.get("kind")))
        item = f"<li><b style='color:#b26b00'>&#9888; {esc(title)}:</b> {esc(str(alert.get('message', '')))}"
        diagnosis = alert.get("diagnosis") or {}
        if diagnosis.get("text"):
            item += f"<br>{esc(str(diagnosis['text']))}"
        if diagnosis.get("plan_inputs"):
            item += f" <a href='carry:{carried}'>Carry to plan</a>"
            carried += 1
        items.append(item + "</li>")
    return "<h4>Alerts</h4><ul>" + "".join(items) + "</ul>"


def gpus_html(gpus: list[dict[str, Any]]) -> str:
    """One row per GPU of the run's telemetry means; a metric the GPU did not report says so."""
    if not gpus:
        return ""
    esc = html_lib.escape
    columns = [key for key, _, _ in METRICS if key not in ("sm_occupancy_pct", "slowdown_pct")]
    head = "".join(f"<th align='left' style='padding-right:10px'>{esc(METRIC_LABELS[k])}</th>" for k in columns)
    rows = []
    for gpu in gpus:
        cells = []
        for key in columns:
            value = gpu.get(key)
            text = format_metric(key, value)
            if key == "sm_clock_mhz" and value is not None and gpu.get("sm_clock_max_mhz"):
                text = f"{value:.0f} / {gpu['sm_clock_max_mhz']:.0f} MHz"
            style = "padding-right:10px" + (";color:gray;font-style:italic" if value is None else "")
            cells.append(f"<td style='{style}'>{esc(text)}</td>")
        throttle = throttle_text(gpu.get("throttle_pct"))
        throttle_style = "color:gray;font-style:italic" if gpu.get("throttle_pct") is None else ""
        cells.append(f"<td style='{throttle_style}'>{esc(throttle)}</td>")
        rows.append(
            f"<tr><td style='padding-right:10px'>{esc(str(gpu['node']))}:{gpu['index']}</td>{''.join(cells)}</tr>"
        )
    return (
        "<h4>GPUs (means over the run)</h4><table cellspacing='0'>"
        f"<tr><th align='left' style='padding-right:10px'>GPU</th>{head}<th align='left'>Throttled (share of"
        f" samples)</th></tr>{''.join(rows)}</table>"
    )


def planned_html(planned: dict[str, Any], plan_gpu: str | None, run_gpu: str) -> str:
    """Planned against actual as a small table in people's units, the GPUs of both, flagged if they differ."""
    shown: dict[str, tuple[str, Callable[[Any], str]]] = {
        "hours": ("Duration", human_hours),
        "cost_usd": ("Cost", human_money),
        "peak_mem_bytes": ("Peak memory per GPU", human_bytes),
        "tokens_per_s": ("Tokens/s", format_value),
        "samples_per_min": ("Samples/min", format_value),
    }
    out = [
        "<h4>Planned against actual</h4><table cellspacing='0' cellpadding='3'>"
        "<tr><th align='left'></th><th align='right'>planned</th><th align='right'>actual</th>"
        "<th align='right'>difference</th></tr>"
    ]
    found = planned.get("hardware")
    hardware: dict[str, Any] = found if isinstance(found, dict) else {}
    judged = "comparable" in hardware  # the history's judgement (analytics.hardware_match): no percentages then
    if judged:
        comparable = bool(hardware["comparable"])
    else:
        comparable = not plan_gpu or plan_gpu.replace(" ", "").lower() == run_gpu.replace(" ", "").lower()
    plan_gpu = plan_gpu or hardware.get("planned_gpu")
    if plan_gpu or not comparable:
        flag = "<span style='color:#d64545'>different hardware: the numbers below compare unlike runs</span>"
        out.append(
            f"<tr><td>GPU</td><td align='right'>{html_lib.escape(plan_gpu or 'a GPU')}</td>"
            f"<td align='right'>{html_lib.escape(hardware.get('actual_gpu') or run_gpu)}</td>"
            f"<td align='right'>{'same' if comparable else flag}</td></tr>"
        )
    for key, cell in planned.items():
        if not isinstance(cell, dict) or "diff_pct" not in cell:
            continue
        if cell.get("planned") is None and cell.get("actual") is None:
            continue
        label, fmt = shown.get(key, (key.replace("_", " "), format_value))
        diff = cell.get("diff_pct")
        text = "" if diff is None else f"{diff:+.1f} %" if comparable or not judged else "other hardware"
        out.append(
            f"<tr><td>{label}</td><td align='right'>{fmt(cell.get('planned'))}</td>"
            f"<td align='right'>{fmt(cell.get('actual'))}</td>"
            f"<td align='right'>{text}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)
