"""The typed search requests (gpuplanner.app.sweep_requests) that `gpuplanner sweep` and the Sweep pane fill:
checked once, with the CLI's flag names in every message, and the same settings as the CLI's flags give."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpuplanner.app.sweep_requests import (
    ScheduleRequest,
    SearchPlanRequest,
    SweepRunRequest,
    search_estimate,
    split_hosts,
    sweep_settings,
)
from gpuplanner.commands import sweep as sweep_command
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.sweep.space import SweepInputError

SPACE = '[params.lr]\ntype = "float"\nlow = 1e-5\nhigh = 1e-3\nlog = true\n'


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "lr-search.toml"
    path.write_text(SPACE, encoding="utf-8")
    return path


def _request(space: Path, **changes: object) -> SweepRunRequest:
    values: dict = dict(
        hosts=("local", "local"),
        space=str(space),
        trials=4,
        max_steps=90,
        trainer_flags=("--data", "corpus"),
        budget_usd=5.0,
        tags=("project=lr",),
    )
    values.update(changes)
    return SweepRunRequest(**values)


def _cli_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuplanner")
    sweep_command.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_the_request_gives_the_settings_the_cli_flags_give(space: Path, tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    settings = sweep_settings(_request(space), db)
    args = _cli_args(
        ["sweep", "run", "--host", "local,local", "--space", str(space), "--trials", "4", "--max-steps", "90"]
        + ["--budget-usd", "5", "--tag", "project=lr", "--", "--data", "corpus"]
    )
    assert sweep_command.settings_from_args(args, db) == settings
    assert settings.study == "lr-search" and settings.hosts == ("local", "local")
    assert settings.schedule.min_resource == 10  # 90 steps / 3^2
    assert settings.run_tags() == {"project": "lr", "sweep": "lr-search"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"budget_usd": None}, "--budget-usd: a search needs a cap"),
        ({"budget_usd": -1.0}, "--budget-usd: must be a positive number"),
        ({"hosts": ()}, "--host: name at least one host"),
        ({"hosts": ("nowhere",)}, "--host: no host named 'nowhere'"),
        ({"env": ("1X=2",)}, "--env: expected KEY=VALUE"),
        ({"tags": ("sweep=x",)}, "--tag: sweep= is set by the search"),
        ({"trainer_flags": ()}, "TRAINER FLAGS: give the trainer's flags"),
        ({"trainer_flags": ("--max-steps", "5")}, "TRAINER FLAGS: --max-steps is set by the search"),
    ],
)
def test_bad_requests_name_the_flag(space: Path, tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(SweepInputError) as caught:
        sweep_settings(_request(space, **changes), tmp_path / "history.db")
    assert str(caught.value).startswith(message)


def test_search_estimate_drops_the_trials_own_caps() -> None:
    trial = PlanInputs(model="gpt2", samples=20_000, epochs=9, budget_usd=1.0).to_request(default_gpu="A100 80GB")
    request = SearchPlanRequest(trial=trial, trials=27, schedule=ScheduleRequest(min_resource=1.0), parallel=3)
    assert request.trial.budget_usd is None  # a trial's budget would be the search's cap
    estimate, document = search_estimate(request, load_catalog())
    assert document["search"]["trials"] == 27
    assert estimate.pruned.gpu_hours < estimate.unpruned.gpu_hours
    assert split_hosts(" a, ,b,a ") == ("a", "b", "a")
