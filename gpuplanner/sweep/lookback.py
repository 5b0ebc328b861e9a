"""Looking back at a search: its trials with their cost, the cumulative spend over time against the cap,
the best metric against spend, the pruned/finished/stopped counts and the best trial as a ready-to-launch
`gpuplanner run` command.

Everything is read, nothing written: the Optuna study (``history.sweeps.sqlite``) says which trial ran as
which run and how it ended; the run history says what each run spent and when (the trainer's own
``spend_usd`` of each step record, the figure the search's cap is enforced on: the spend clock of
``trainer/spend.py``). A trial whose run has no price has an unknown spend (``null``, "no price"), never
$0, and is counted in ``unpriced_trials``.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplanner.history.db import connect, read_snapshot
from gpuplanner.history.tags import tags_of
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.sweep.study import METRIC, open_storage, storage_path

SWEEP_TAG = "sweep"  # the tag key naming a trial run's study (set by the runner on every trial)

# the flags of a trial's run that belong to the trial (its share of the cap), not to a full run
TRIAL_ONLY_FLAGS = ("--budget-usd", "--max-gpu-hours")
CURVE_POINTS = 400  # at most this many points of the cumulative spend curve


class SearchNotFound(PlanInputError):
    def __init__(self, message: str) -> None:
        super().__init__("study", message)


@dataclass(frozen=True)
class TrialRow:
    number: int
    state: str  # complete, pruned, fail, running, waiting
    end: str | None  # complete, pruned, budget (stopped by the cap), failed; None while running
    outcome: str  # finished, pruned, stopped, failed, running
    run_id: int | None
    host: str | None
    params: dict[str, Any]
    value: float | None  # the final eval loss (complete trials)
    last_value: float | None  # the last eval loss reported (any trial)
    last_step: int | None
    spend_usd: float | None  # None: the trial's run has no price
    gpu_hours: float
    started_at: float | None
    ended_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "state": self.state,
            "end": self.end,
            "outcome": self.outcome,
            "run_id": self.run_id,
            "host": self.host,
            "params": dict(self.params),
            "value": self.value,
            "last_value": self.last_value,
            "last_step": self.last_step,
            "spend_usd": None if self.spend_usd is None else round(self.spend_usd, 6),
            "gpu_hours": round(self.gpu_hours, 9),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@dataclass(frozen=True)
class SearchReview:
    study: str
    metric: str
    stop_reason: str | None
    budget_usd: float | None
    max_gpu_hours: float | None
    tags: dict[str, str]
    trials: list[TrialRow]
    spend_curve: list[tuple[float, float]]  # (unix time, cumulative $), rising
    best_curve: list[tuple[float, float, int]]  # (cumulative $ when a trial finished, best value so far, trial)
    best: TrialRow | None
    best_command: str | None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def spent_usd(self) -> float:
        """What the priced trials spent (the unpriced ones are counted in :attr:`unpriced_trials`)."""
        return sum(t.spend_usd for t in self.trials if t.spend_usd is not None)

    @property
    def unpriced_trials(self) -> int:
        """Trials whose run has no price: their spend is unknown, not $0."""
        return sum(1 for t in self.trials if t.run_id is not None and t.spend_usd is None)

    @property
    def unpriced(self) -> bool:
        """No trial that ran had a price: the search's spend is unknown ("no price"), not $0."""
        return self.unpriced_trials > 0 and all(t.spend_usd is None for t in self.trials if t.run_id is not None)

    @property
    def spent_gpu_hours(self) -> float:
        return sum(t.gpu_hours for t in self.trials)

    def document(self) -> dict[str, Any]:
        """The stable JSON of `gpuplanner sweep show --json` (names in docs/sweeps.md)."""
        return {
            "study": self.study,
            "metric": self.metric,
            "stop_reason": self.stop_reason,
            "budget_usd": self.budget_usd,
            "max_gpu_hours": self.max_gpu_hours,
            "spent_usd": round(self.spent_usd, 6),
            "unpriced_trials": self.unpriced_trials,
            "spent_gpu_hours": round(self.spent_gpu_hours, 9),
            "tags": dict(self.tags),
            "counts": dict(self.counts),
            "trials": [t.as_dict() for t in self.trials],
            "spend_curve": [{"t": t, "spent_usd": round(v, 6)} for t, v in self.spend_curve],
            "best_curve": [{"spent_usd": round(s, 6), "best_value": v, "trial": n} for s, v, n in self.best_curve],
            "best": None if self.best is None else self.best.as_dict(),
            "best_command": self.best_command,
        }


OUTCOMES = ("finished", "pruned", "stopped", "failed", "running")


def _outcome(state: str, end: str | None) -> str:
    if end == "complete" or state == "complete":
        return "finished"
    if end in ("budget", "stopped"):  # by the cap, or by the user
        return "stopped"
    if end == "pruned" or state == "pruned":
        return "pruned"
    if end == "failed" or state == "fail":
        return "failed"
    return "running"


def run_spend(db: Any, run_id: int) -> tuple[float | None, float, int]:
    """A run's recorded spend: dollars (the larger of its trainer's last step ``spend_usd`` and the totals of
    its latest ``run_end``, which count start-up and the time after the last step; None when the run has no
    price), GPU-hours (likewise, or GPUs x time without a price) and its last step (0 before the first step
    record). A trial that ends before its first step spent its start-up: that is not $0 (issue 27 item 1)."""
    row = db.execute(
        "SELECT MAX(s.spend_usd), MAX(s.step), MIN(s.t), MAX(s.t), r.price_usd_per_gpu_hour, r.gpu_count"
        " FROM runs r LEFT JOIN steps s ON s.run_id = r.id WHERE r.id = ?",
        [run_id],
    ).fetchone()
    if row is None:
        return 0.0, 0.0, 0
    usd, step, first_t, last_t, price, gpus = row
    end_usd, end_gpu_hours = _end_totals(db, run_id)
    last_step = int(step) if step is not None else 0
    if price is None:
        held = (last_t - first_t) / 3600.0 * (gpus or 1) if step is not None else 0.0
        return None, max(held, end_gpu_hours or 0.0), last_step
    usd = max(float(usd or 0.0), end_usd or 0.0)
    gpu_hours = max(usd / price if price else 0.0, end_gpu_hours or 0.0)
    return usd, gpu_hours, last_step


def _end_totals(db: Any, run_id: int) -> tuple[float | None, float | None]:
    """``spend_usd`` and ``gpu_hours`` of the totals of the run's latest ``run_end`` record, if any."""
    end = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    try:
        detail = json.loads(end[0]) if end and end[0] else {}
    except ValueError:
        return None, None
    totals = detail.get("totals") if isinstance(detail, dict) else None
    if not isinstance(totals, dict):
        return None, None

    def number(key: str) -> float | None:
        value = totals.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if math.isfinite(value) and value >= 0 else None

    return number("spend_usd"), number("gpu_hours")


def study_names(history_db: Path) -> list[str]:
    if not storage_path(history_db).exists():
        return []
    optuna = _optuna()
    return sorted(s.study_name for s in optuna.get_all_study_summaries(open_storage(history_db)))


def load_review(history_db: Path, study_name: str) -> SearchReview:
    """The look back at one search (raises :class:`SearchNotFound` naming the known searches)."""
    names = study_names(history_db)
    if study_name not in names:
        known = ", ".join(names) if names else "none yet"
        raise SearchNotFound(f"no search named {study_name!r} beside {history_db} (searches: {known})")
    optuna = _optuna()
    study = optuna.load_study(study_name=study_name, storage=open_storage(history_db))
    attrs = study.user_attrs
    caps = attrs.get("caps") or {}
    frozen_trials = study.get_trials(deepcopy=False)
    db = connect(history_db)
    try:
        with read_snapshot(db):
            rows, points, launches = [], [], {}
            for frozen in frozen_trials:
                run_id = frozen.user_attrs.get("run_id")
                usd: float | None = 0.0
                gpu_hours = 0.0
                started = ended = None
                if run_id is not None:
                    usd, gpu_hours, _ = run_spend(db, run_id)
                    run = db.execute(
                        "SELECT COALESCE(first_t, started_at), COALESCE(last_t, ended_at), launch_json FROM runs"
                        " WHERE id = ?",
                        [run_id],
                    ).fetchone()
                    if run is not None:
                        started, ended, launches[frozen.number] = run
                    run_points = db.execute(
                        "SELECT t, ?, spend_usd FROM steps WHERE run_id = ? AND spend_usd IS NOT NULL ORDER BY t",
                        [run_id, run_id],
                    ).fetchall()
                    if usd is not None and usd > (run_points[-1][2] if run_points else 0.0):
                        # spent after its last step (or before any): the curve ends at the run's whole spend
                        at = ended if ended is not None else (run_points[-1][0] if run_points else started)
                        if at is not None:
                            run_points.append((at, run_id, usd))
                    points += run_points
                state = frozen.state.name.lower()
                end = frozen.user_attrs.get("end")
                values = frozen.intermediate_values
                rows.append(
                    TrialRow(
                        number=frozen.number,
                        state=state,
                        end=end,
                        outcome=_outcome(state, end),
                        run_id=run_id,
                        host=frozen.user_attrs.get("host"),
                        params=dict(frozen.params),
                        value=frozen.value if state == "complete" else None,
                        last_value=values[max(values)] if values else None,
                        last_step=frozen.last_step,
                        spend_usd=usd,
                        gpu_hours=gpu_hours,
                        started_at=started,
                        ended_at=ended,
                    )
                )
            run_tags = tags_of(db, [r.run_id for r in rows if r.run_id is not None])
    finally:
        db.close()
    curve = spend_curve(points)
    best_curve = best_against_spend(rows, curve)
    complete = [r for r in rows if r.value is not None]
    best = min(complete, key=lambda r: (r.value, r.number)) if complete else None
    tags = attrs.get("tags") or (run_tags.get(best.run_id, {}) if best and best.run_id else {})
    command = None
    if best is not None:
        command = best_run_command(study_name, best, launches.get(best.number), run_tags.get(best.run_id or -1, tags))
    counts = {name: sum(1 for r in rows if r.outcome == name) for name in OUTCOMES}
    counts["trials"] = len(rows)
    return SearchReview(
        study=study_name,
        metric=METRIC,
        stop_reason=attrs.get("stop_reason"),
        budget_usd=caps.get("budget_usd"),
        max_gpu_hours=caps.get("max_gpu_hours"),
        tags=dict(tags),
        trials=rows,
        spend_curve=curve,
        best_curve=best_curve,
        best=best,
        best_command=command,
        counts=counts,
    )


def spend_curve(points: list[tuple[float, int, float]], limit: int = CURVE_POINTS) -> list[tuple[float, float]]:
    """Cumulative spend of all runs over time from their step records (t, run, the run's spend so far):
    at each record the sum of every run's latest spend. Thinned to ``limit`` points, the last one kept."""
    latest: dict[int, float] = {}
    total = 0.0
    curve: list[tuple[float, float]] = []
    for t, run_id, usd in sorted(points):
        total += float(usd) - latest.get(run_id, 0.0)
        latest[run_id] = float(usd)
        curve.append((float(t), total))
    if len(curve) > limit:
        stride = len(curve) / (limit - 1)
        curve = [curve[int(i * stride)] for i in range(limit - 1)] + [curve[-1]]
    return curve


def spent_at(curve: list[tuple[float, float]], t: float) -> float:
    """The cumulative spend at time ``t`` (the last point at or before it)."""
    spent = 0.0
    for when, value in curve:
        if when > t:
            break
        spent = value
    return spent


def best_against_spend(rows: list[TrialRow], curve: list[tuple[float, float]]) -> list[tuple[float, float, int]]:
    """Each time a trial finished with a better metric: the search's spend then and the best value so far."""
    out: list[tuple[float, float, int]] = []
    best = None
    for row in sorted((r for r in rows if r.value is not None), key=lambda r: (r.ended_at or 0.0, r.number)):
        assert row.value is not None
        if best is None or row.value < best:
            best = row.value
            spent = spent_at(curve, row.ended_at) if row.ended_at is not None else 0.0
            out.append((spent, best, row.number))
    return out


def best_run_command(study: str, best: TrialRow, launch_json: str | None, tags: dict[str, str]) -> str:
    """`gpuplanner run` for the best trial's exact trainer flags as a full run (its share of the cap left out;
    ``--budget-usd`` is for the user to add). ``launch_json``: the trial run's launch document (``runs.launch_json``)."""
    import json

    try:
        args = list(json.loads(launch_json or "{}").get("trainer_args") or [])
    except (ValueError, AttributeError):
        args = []
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in TRIAL_ONLY_FLAGS:
            skip = "=" not in arg
            continue
        kept.append(arg)
    words = ["gpuplanner", "run", "--host", best.host or "HOST", "--name", f"{study}-best-trial-{best.number}"]
    for key, value in sorted(tags.items()):
        if key == SWEEP_TAG:  # a full run is not one of the search's trials
            continue
        words += ["--tag", f"{key}={value}"]
    return shlex.join(words) + " -- " + shlex.join(kept)


TRIAL_COLUMNS = ("trial", "outcome", "run", "host", "last_step", "eval_loss", "spend_usd", "gpu_hours", "params")


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def trial_table(review: SearchReview) -> list[tuple[Any, ...]]:
    """One row per trial in :data:`TRIAL_COLUMNS` order (eval_loss: the final one, else the last reported)."""
    rows = []
    for t in review.trials:
        metric = t.value if t.value is not None else t.last_value
        rows.append(
            (
                t.number,
                t.outcome,
                t.run_id,
                t.host,
                t.last_step,
                None if metric is None else round(metric, 6),
                None if t.spend_usd is None else round(t.spend_usd, 4),
                round(t.gpu_hours, 6),
                params_text(t.params),
            )
        )
    return rows


def describe_time(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _optuna() -> Any:
    from gpuplanner.sweep.study import _optuna as load

    return load()
