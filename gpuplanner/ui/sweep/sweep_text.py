"""The Sweep pane's words: a search estimate as a short report in people's units, and the trial table's
headers and cells. Qt-free (the report is HTML for a rich-text view); the CLI's `sweep plan` text and
JSON keep their own column names."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from gpuplanner.export.human import DASH, human_cost, human_hours, human_money, human_number

PRUNER_WORDS = {
    "successive-halving": "pruned by successive halving",
    "hyperband": "pruned by Hyperband",
    "percentile": "pruned by percentile",
    "none": "no pruning",
}
CAP_WORDS = {"budget_usd": "the budget", "max_gpu_hours": "the GPU-hour cap"}
TRIAL_HEADERS = ("Trial", "Outcome", "Run", "Host", "Last step", "Eval loss", "Spend", "GPU-hours", "Parameters")
# (light, dark) text colours with a contrast of at least 4.5:1 on the light and dark palettes' bases
WARNING_COLORS = ("#8a4b00", "#f0a04b")
MISSED_COLORS = ("#b00020", "#ff7b7b")


def cap_words(text: str) -> str:
    """A runner's stop reason with the caps' flag names in words ("budget_usd" -> "the budget")."""
    for flag, words in CAP_WORDS.items():
        text = text.replace(flag, words)
    return text


def trials_text(count: float) -> str:
    """An expected number of trials: whole when it is one, else to one decimal with "about"."""
    if abs(count - round(count)) < 1e-6:
        return f"{round(count):,}"
    return f"about {count:,.1f}"


def gpu_hours_text(hours: float | None) -> str:
    return DASH if hours is None else f"{human_number(hours)} GPU-hours"


def _resource(value: float, unit: str) -> str:
    unit = unit[:-1] if value == 1 and unit.endswith("s") else unit
    return f"{human_number(value)} {unit}"


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    head = "".join(f"<th align='{'left' if i == 0 else 'right'}'>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f"<td align='{'left' if i == 0 else 'right'}'>{html.escape(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table cellspacing='0' cellpadding='3'><tr>{head}</tr>{body}</table>"


def verdict_html(document: dict[str, Any], dark: bool = False) -> str:
    """Whether the pruned search finishes under the cap, as one sentence ("" without a cap): the pane
    shows it on its own word-wrapped line above the estimate, so it is never scrolled or cut off."""
    return _caps_sentence(document, dark)


def _caps_sentence(document: dict[str, Any], dark: bool) -> str:
    caps, search = document["caps"], document["search"]
    if caps["binding"] is None:
        return ""
    used = []
    if caps["budget_usd_share"] is not None:
        used.append(f"{caps['budget_usd_share']:.0%} of the {human_money(search['budget_usd'])} budget")
    if caps["max_gpu_hours_share"] is not None:
        used.append(f"{caps['max_gpu_hours_share']:.0%} of the {human_number(search['max_gpu_hours'])} GPU-hour cap")
    uses = " and ".join(used)
    if caps["finishes_under_cap"]:
        return f"The pruned search uses {uses}: it finishes under the cap."
    fit = caps["trials_within_cap"]
    return (
        f"<span style='color:{MISSED_COLORS[dark]}'><b>Does not finish under the cap:</b> the pruned search needs "
        f"{uses}; {CAP_WORDS.get(caps['binding'], caps['binding'])} stops it after "
        f"{fit} of {search['trials']} trials.</span>"
    )


def estimate_html(document: dict[str, Any], gpu: str | None = None, dark: bool = False, verdict: bool = True) -> str:
    """The `sweep plan` document as the window shows it: what one trial costs (on ``gpu``, the GPU model
    asked for), the search with and without pruning, how many trials reach each milestone, the caps and
    any warnings (coloured for a ``dark`` or light background); ``verdict=False`` leaves out the caps'
    sentence (:func:`verdict_html`) for a view that shows it on its own."""
    search, trial = document["search"], document["trial"]
    plan = document.get("trial_plan") or {}
    model = (plan.get("inputs") or {}).get("model")
    on = f" of {html.escape(str(model))}" if model else ""
    where = f" on {trial['gpus']} x {html.escape(gpu)}" if gpu else ""
    dated = f", prices of {html.escape(plan['prices_as_of'])}" if plan.get("prices_as_of") else ""
    parts = [
        f"<p><b>{search['trials']:,} trials{on}, {search['parallel']} at a time, "
        f"{PRUNER_WORDS.get(search['pruner'], html.escape(search['pruner']))}.</b><br>"
        f"One full trial{where}: {human_hours(trial['hours'])}, {gpu_hours_text(trial['gpu_hours'])}, "
        f"{human_money(trial['cost_usd'])} ({html.escape(trial['pricing'])}, "
        f"{human_money(trial['usd_per_hour'])} an hour{dated}).</p>"
    ]
    rows: list[tuple[str, ...]] = []
    for name, key in (("With pruning", "pruned"), ("Without pruning", "unpruned")):
        part = document[key]
        rows.append(
            (
                name,
                human_money(part["cost_usd"]),
                human_number(part["gpu_hours"]),
                human_hours(part["wall_hours"]),
                trials_text(part["trials_finishing"]),
            )
        )
    parts.append(_table(("Search", "Cost", "GPU-hours", "Wall time", "Trials finishing"), rows))
    saving = document["saving"]
    if saving["pct"] is not None and saving["cost_usd"] > 0:
        parts.append(
            f"<p>Pruning saves <b>{human_money(saving['cost_usd'])}</b> ({saving['pct']:.0f}%), "
            f"{gpu_hours_text(saving['gpu_hours'])} and {human_hours(saving['wall_hours'])} of wall time.</p>"
        )
    milestones = document.get("milestones") or []
    if milestones:
        unit = search["unit"]
        rows = [
            (
                f"after {_resource(m['resource'], unit)}",
                trials_text(m["trials_reaching"]),
                trials_text(m["trials_continuing"]),
            )
            for m in milestones
        ]
        parts.append(_table(("Milestone", "Trials reaching it", "Trials going on"), rows))
    caps = _caps_sentence(document, dark) if verdict else ""
    if caps:
        parts.append(f"<p>{caps}</p>")
    warnings = list(document.get("warnings") or []) + list(document.get("trial_plan", {}).get("warnings") or [])
    for warning in warnings:
        parts.append(f"<p style='color:{WARNING_COLORS[dark]}'>Warning: {html.escape(str(warning))}</p>")
    return "".join(parts)


def trial_cells(row: tuple[Any, ...]) -> list[str]:
    """One row of :func:`gpuplanner.sweep.lookback.trial_table` as the window's table shows it."""
    number, outcome, run_id, host, last_step, metric, spend, gpu_hours, params = row
    return [
        str(number),
        str(outcome),
        DASH if run_id is None else f"#{run_id}",
        host or DASH,
        DASH if last_step is None else f"{last_step:,}",
        DASH if metric is None else f"{metric:.4f}",
        human_cost(spend),
        human_number(gpu_hours),
        params or DASH,
    ]


# The run form's names of the CLI's flags, and the CLI's words that speak of the command line in form words
RUN_FIELDS = {
    "TRAINER FLAGS": "Trainer flags",
    "space: Search space": "Search space",
    "budget-usd": "Budget ($)",
    "max-gpu-hours": "Max GPU-hours",
    "host": "Hosts",
    "tag": "Tags",
    "max-steps": "Steps per full trial",
    "trials": "Trials",
}
FORM_WORDS = {
    "give the trainer's flags after --, e.g. -- --model-config cfg.json --data d": (
        "fill in the flags every trial gives the trainer, e.g. --model-config cfg.json --data corpus/ "
        "(the search sets the parameters it searches)"
    ),
    "a search needs a cap: give --budget-usd and/or --max-gpu-hours": (
        "a search needs a cap: fill in Budget ($), Max GPU-hours or both"
    ),
}


def run_form_message(field: str, message: str) -> tuple[str, str | None]:
    """A run-form problem as the form says it (``Trainer flags: fill in…``, not ``TRAINER FLAGS: give…
    after --``) and the form field it is about (None: no field of the form, e.g. a space file)."""
    label = RUN_FIELDS.get(field)
    if label is None:
        return f"{field}: {message}", None
    return f"{label}: {FORM_WORDS.get(message, message)}", label
