"""Optuna for a search: the study storage beside the run history, the sampler and the pruner of a schedule.

The study lives in an SQLite file next to the history database (``history.sqlite`` ->
``history.sweeps.sqlite``) through Optuna's RDB storage, so a search survives its process and
continues when run again with the same study name.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplanner.paths import exclusive_lock
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.sweep.schedule import Schedule

SAMPLERS = ("tpe", "random")
# the metric every trial reports: the trainer's eval loss (lower is better)
METRIC = "eval_loss"


def _optuna() -> Any:
    import optuna  # imported lazily: `gpuplanner plan` and the window never pay for it

    optuna.logging.set_verbosity(logging.WARNING)
    return optuna


def storage_path(history_db: Path) -> Path:
    """The study file beside the history database."""
    return history_db.with_name(history_db.stem + ".sweeps.sqlite")


def storage_url(history_db: Path) -> str:
    return f"sqlite:///{storage_path(history_db)}"


def open_storage(history_db: Path) -> Any:
    """The study storage beside ``history_db`` (Optuna's RDB storage on SQLite): the one way every part of a
    search opens it. Its tables are made under a lock on ``<study file>.lock``: two processes (a search and the
    window looking at it, or two searches) opening a fresh study file at once both ran Optuna's schema set-up,
    and one failed with ``UNIQUE constraint failed: alembic_version.version_num``."""
    optuna = _optuna()
    path = storage_path(history_db)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        return optuna.storages.RDBStorage(storage_url(history_db), engine_kwargs={"connect_args": {"timeout": 30}})


@contextlib.contextmanager
def running_study(history_db: Path, name: str) -> Iterator[None]:
    """Hold the study ``name`` for one search process (``<study file>.<hash of the name>.run.lock``, released
    when the process ends, however it ends): two searches of one study at once each launched trials and told
    them to the study, so a trial ran twice with one spend lost, or one crashed telling a trial the other had
    finished. A study another process is running is refused with one line naming the study."""
    path = storage_path(history_db)
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    held = contextlib.ExitStack()
    try:
        held.enter_context(exclusive_lock(path.with_name(f"{path.name}.{digest}.run.lock"), wait=False))
    except BlockingIOError:
        raise PlanInputError(
            "study",
            f"{name!r} is being run by another search process; wait for it to end (or stop it) and run this "
            "again to continue the study, or give another --study name",
        ) from None
    with held:
        yield


def make_sampler(name: str, seed: int | None) -> Any:
    optuna = _optuna()
    if name == "tpe":
        # few trials: start TPE after 2 random ones instead of Optuna's default 10
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=2)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise PlanInputError("sampler", f"{name!r} is not one of {', '.join(SAMPLERS)}")


def make_pruner(schedule: Schedule) -> Any:
    """The Optuna pruner that applies ``schedule`` (resource in optimizer steps)."""
    optuna = _optuna()
    if schedule.pruner == "successive-halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=int(schedule.min_resource or 1), reduction_factor=schedule.reduction_factor
        )
    if schedule.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=int(schedule.min_resource or 1),
            max_resource=int(schedule.max_resource),
            reduction_factor=schedule.reduction_factor,
        )
    if schedule.pruner == "percentile":
        return optuna.pruners.PercentilePruner(
            percentile=float(schedule.prune_percent or 0.0),
            n_startup_trials=schedule.startup_trials,
            n_warmup_steps=int(schedule.prune_at or 0),
            interval_steps=int(schedule.max_resource) + 1,  # judged once: at the first report from prune_at
        )
    return optuna.pruners.NopPruner()


def eval_every(schedule: Schedule) -> int:
    """The evaluation interval that lands on every milestone: their greatest common divisor."""
    steps = [int(m) for m in schedule.milestones()] or [int(schedule.max_resource)]
    out = 0
    for step in steps:
        out = math.gcd(out, step)
    return max(1, out)


def open_study(history_db: Path, name: str, schedule: Schedule, sampler: str, seed: int | None) -> Any:
    """Create the study, or load it to continue a search run before under this name."""
    optuna = _optuna()
    storage = open_storage(history_db)
    return optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=make_sampler(sampler, seed),
        pruner=make_pruner(schedule),
        direction="minimize",
        load_if_exists=True,
    )
