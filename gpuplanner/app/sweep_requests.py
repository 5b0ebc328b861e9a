"""Typed requests of a budgeted search: what `gpuplanner sweep plan` / `sweep run` read from their flags and the
window's Sweep pane from its form, checked the same way (one line naming the flag or file per problem).

:class:`SearchPlanRequest` becomes the estimate (:func:`search_estimate`); :class:`SweepRunRequest` becomes
the runner's :class:`~gpuplanner.sweep.runner.SweepSettings` (:func:`sweep_settings`). Problems are
:class:`~gpuplanner.sweep.space.SweepInputError` labelled with the CLI's flag names, the names the
docs use for every input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplanner.history.tags import TagError, parse_tag, parse_tags
from gpuplanner.launch.hosts import HostError, get_host
from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.documents import plan_document
from gpuplanner.plan.inputs import inputs_document
from gpuplanner.plan.planner import PlanRequest, make_plan
from gpuplanner.sweep.budget import Caps
from gpuplanner.sweep.estimate import SearchEstimate, SearchInputs, estimate_search, search_document
from gpuplanner.sweep.lookback import SWEEP_TAG
from gpuplanner.sweep.runner import SweepSettings
from gpuplanner.sweep.schedule import MAX_REDUCTION_FACTOR, Schedule
from gpuplanner.sweep.space import RESERVED_FLAGS, SweepInputError, load_space
from trainer.settings import TrainSettings

SearchDocument = dict[str, Any]  # the JSON document of `sweep plan --json` (names in docs/sweeps.md)


@dataclass(frozen=True)
class ScheduleRequest:
    """The pruning schedule's settings (``--pruner``, ``--min-epochs``/``--min-steps``, ``--reduction-factor``,
    ``--prune-percent``, ``--prune-at-epoch``/``--prune-at-step``, ``--startup-trials``)."""

    pruner: str = "successive-halving"
    min_resource: float | None = None
    reduction_factor: int = 3
    prune_percent: float | None = None
    prune_at: float | None = None
    startup_trials: int = 1

    def schedule(self, max_resource: float, unit: str) -> Schedule:
        """The schedule for trials of ``max_resource`` epochs or steps; the first milestone defaults to
        max / eta^2 (whole steps for steps)."""
        min_resource = self.min_resource
        eta = self.reduction_factor
        if (
            min_resource is None
            and self.pruner in ("successive-halving", "hyperband")
            and 2 <= eta <= MAX_REDUCTION_FACTOR
        ):
            min_resource = max_resource / eta**2
            if unit == "steps":
                min_resource = max(1, math.floor(min_resource))
        return Schedule(
            pruner=self.pruner,
            max_resource=max_resource,
            min_resource=min_resource,
            reduction_factor=self.reduction_factor,
            prune_percent=self.prune_percent,
            prune_at=self.prune_at,
            startup_trials=self.startup_trials,
            unit=unit,
        )


@dataclass(frozen=True)
class SearchPlanRequest:
    """`gpuplanner sweep plan`: identical trials, each one the plan of ``trial``, under a schedule and caps."""

    trial: PlanRequest  # one trial's workload (its own budget and GPU-hour cap are dropped: the caps are the search's)
    trials: int
    schedule: ScheduleRequest = field(default_factory=ScheduleRequest)
    parallel: int = 1
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    trial_overhead_minutes: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "trial", replace(self.trial, budget_usd=None, max_gpu_hours=None))


def search_estimate(request: SearchPlanRequest, catalog: Catalog) -> tuple[SearchEstimate, SearchDocument]:
    """The estimate of a search and its JSON document (the trial's request as given: calibrated or not)."""
    plan = make_plan(request.trial, catalog)
    schedule = request.schedule.schedule(request.trial.workload.epochs, unit="epochs")
    inputs = SearchInputs(
        trials=request.trials,
        parallel=request.parallel,
        budget_usd=request.budget_usd,
        max_gpu_hours=request.max_gpu_hours,
        trial_overhead_minutes=request.trial_overhead_minutes,
    )
    estimate = estimate_search(plan, schedule, inputs)
    return estimate, search_document(estimate, plan_document(plan, inputs_document(request.trial)))


@dataclass(frozen=True)
class SweepRunRequest:
    """`gpuplanner sweep run`: a search of the bundled trainer on hosts under a hard cap."""

    hosts: tuple[str, ...]
    space: str  # the search space's TOML file
    trials: int
    max_steps: int
    trainer_flags: tuple[str, ...]
    schedule: ScheduleRequest = field(default_factory=ScheduleRequest)
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    study: str | None = None  # default: the space file's name
    sampler: str = "tpe"
    seed: int | None = None
    step_seconds: float | None = None
    env: tuple[str, ...] = ()  # KEY=VALUE
    tags: tuple[str, ...] = ()  # KEY=VALUE


def _positive(label: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SweepInputError(label, f"must be a positive number, got {value!r}")


def sweep_settings(request: SweepRunRequest, db_path: Path) -> SweepSettings:
    """The search of the request, checked (space file, caps, hosts in the history at ``db_path``, tags,
    environment, trainer flags); every problem is one :class:`SweepInputError` naming the flag or file."""
    flags = request.trainer_flags
    if not flags:
        raise SweepInputError(
            "TRAINER FLAGS", "give the trainer's flags after --, e.g. -- --model-config cfg.json --data d"
        )
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in RESERVED_FLAGS:
            raise SweepInputError("TRAINER FLAGS", f"{name} is set by the search for every trial; leave it out")
    try:  # flags the trainer would refuse fail here, not in every trial (the settings contract parses them)
        TrainSettings.from_argv(list(flags))
    except ValueError as exc:
        raise SweepInputError("TRAINER FLAGS", str(exc).removeprefix("trainer flags: ")) from None
    if request.budget_usd is None and request.max_gpu_hours is None:
        raise SweepInputError("--budget-usd", "a search needs a cap: give --budget-usd and/or --max-gpu-hours")
    _positive("--budget-usd", request.budget_usd)
    _positive("--max-gpu-hours", request.max_gpu_hours)
    _positive("--step-seconds", request.step_seconds)
    hosts = tuple(h.strip() for h in request.hosts if h.strip())
    if not hosts:
        raise SweepInputError("--host", "name at least one host")
    for name in dict.fromkeys(hosts):
        try:
            get_host(db_path, name)
        except HostError as exc:
            raise SweepInputError("--host", str(exc)) from None
    env = []
    for item in request.env:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SweepInputError("--env", f"expected KEY=VALUE with a variable name as KEY, got {item!r}")
        env.append((key, value))
    try:
        tags = parse_tags(list(request.tags))
    except TagError as exc:
        raise SweepInputError("--tag", str(exc)) from None
    if SWEEP_TAG in tags:
        raise SweepInputError("--tag", f"{SWEEP_TAG}= is set by the search (the study's name); use another key")
    if request.max_steps < 1:
        raise SweepInputError("--max-steps", "at least 1")
    space = load_space(request.space)
    schedule = request.schedule.schedule(float(request.max_steps), unit="steps")
    if request.trials < 1:
        raise SweepInputError("--trials", "at least 1")
    study = request.study or Path(request.space).stem
    try:  # the study's name is every trial's sweep= tag: a name no tag can hold failed every trial
        _, value = parse_tag(f"{SWEEP_TAG}={study}")
    except TagError as exc:
        raise SweepInputError("--study", f"{study!r} cannot be a tag value ({exc})") from None
    if value != study:
        raise SweepInputError("--study", f"{study!r} cannot be a tag value: no spaces at its start or end")
    return SweepSettings(
        study=study,
        hosts=hosts,
        space=space,
        trials=request.trials,
        schedule=schedule,
        caps=Caps(request.budget_usd, request.max_gpu_hours),
        trainer_flags=tuple(flags),
        step_seconds=request.step_seconds,
        sampler=request.sampler,
        seed=request.seed,
        env=tuple(env),
        tags=tuple(tags.items()),
    )


def split_hosts(text: str) -> tuple[str, ...]:
    """``--host``'s NAME[,NAME...] as names (a name repeated runs that many trials there at once)."""
    return tuple(h.strip() for h in text.split(",") if h.strip())
