"""The live budget rules and the search-space file, without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.sweep.budget import (
    FULL_TRIAL_HEADROOM,
    SAFETY,
    STEP_SLACK,
    Amount,
    Caps,
    TrialBudget,
    new_trial_allowance,
    reservation,
)
from gpuplanner.sweep.space import SpaceError, load_space, parse_space

STEP = Amount(usd=0.10, gpu_hours=0.001)  # one optimizer step of a trial


def test_first_trial_gets_the_furthest_stop_it_can_pay_for() -> None:
    caps = Caps(usd=10.0)
    # full trial: (90 + slack) x 1.25 x $0.10 = $11.5 > $10; milestone 30: (30 + 2) x 1.25 x 0.1 = $4
    allowance = new_trial_allowance(caps, [], STEP, [30], 90)
    assert allowance.reach_step == 30
    assert allowance.amount is not None
    assert allowance.amount.usd == pytest.approx((30 + STEP_SLACK) * SAFETY * 0.10)


def test_a_trial_whose_whole_run_fits_gets_headroom() -> None:
    allowance = new_trial_allowance(Caps(usd=100.0), [], STEP, [30], 90)
    assert allowance.reach_step == 90 and allowance.amount is not None
    full = (90 + STEP_SLACK) * SAFETY * 0.10  # $11.50
    assert allowance.amount.usd == pytest.approx(full * FULL_TRIAL_HEADROOM)
    # near the cap the headroom shrinks to what is left
    tight = new_trial_allowance(Caps(usd=12.0), [], STEP, [30], 90)
    assert tight.reach_step == 90 and tight.amount is not None and tight.amount.usd == pytest.approx(12.0)


def test_running_trials_reserve_and_ended_ones_count_their_spend() -> None:
    caps = Caps(usd=10.0)
    running = TrialBudget(spent=Amount(1.0, 0.01), allowance=Amount(4.0, 0.04), active=True, steps_done=10)
    ended = TrialBudget(spent=Amount(3.0, 0.03), allowance=Amount(4.0, 0.04), active=False, steps_done=30)
    # the running one may still come to its allowance ($4): $3 + $4 = $7 committed, $3 left < $4 for step 30
    allowance = new_trial_allowance(caps, [running, ended], STEP, [30], 90)
    assert allowance.amount is None
    assert allowance.reason == "budget_usd: a trial's first milestone (step 30) costs $4.0000, $3.0000 left"
    # a reservation never exceeds spend + the rest of a full trial once the step cost is known
    short = TrialBudget(spent=Amount(1.0, 0.01), allowance=Amount(100.0, 1.0), active=True, steps_done=85)
    assert reservation(short, STEP, 90).usd == pytest.approx(1.0 + (5 + STEP_SLACK) * SAFETY * 0.10)
    assert reservation(ended, STEP, 90) == ended.spent


def test_the_gpu_hour_cap_is_enforced_like_the_dollar_cap() -> None:
    caps = Caps(gpu_hours=0.02)
    allowance = new_trial_allowance(caps, [], STEP, [30], 90)
    assert allowance.amount is None and allowance.reason is not None
    assert allowance.reason.startswith("max_gpu_hours: a trial's first milestone (step 30) costs 0.040000 GPU-hours")


def test_without_a_measured_step_the_first_trial_runs_alone() -> None:
    caps = Caps(usd=10.0)
    first = new_trial_allowance(caps, [], None, [30], 90)
    assert first.amount == Amount(10.0, float("inf")) and first.reach_step is None
    running = TrialBudget(Amount(), first.amount, active=True)
    second = new_trial_allowance(caps, [running], None, [30], 90)
    assert second.amount is None and second.reason is not None and second.reason.startswith("waiting")


def test_a_space_maps_parameters_to_trainer_flags(tmp_path: Path) -> None:
    path = tmp_path / "space.toml"
    path.write_text(
        '[params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n'
        '[params.warmup_steps]\ntype = "int"\nlow = 0\nhigh = 8\nstep = 2\n'
        '[params.compile]\ntype = "categorical"\nchoices = [true, false]\n'
        '[params.wd]\ntype = "float"\nlow = 0.0\nhigh = 0.1\nflag = "--weight-decay"\n'
    )
    space = load_space(path)
    assert [p.flag for p in space.params] == ["--lr", "--warmup-steps", "--compile", "--weight-decay"]
    flags = space.flags({"lr": 0.001, "warmup_steps": 4, "compile": False, "wd": 0.05})
    assert flags == ["--lr", "0.001", "--warmup-steps", "4", "--no-compile", "--weight-decay", "0.05"]

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    values = space.suggest(study.ask())
    assert 1e-4 <= values["lr"] <= 1e-2 and values["warmup_steps"] in (0, 2, 4, 6, 8)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "no [params.NAME] tables: the search space is empty"),
        ("[params]\n", "no [params.NAME] tables"),
        ("params = [", "not valid TOML"),
        ('[params.lr]\ntype = "float"\nlow = 0.1\nhigh = 0.01\n', "params.lr: low (0.1) must be below high (0.01)"),
        ('[params.lr]\ntype = "real"\nlow = 0\nhigh = 1\n', "params.lr: type must be one of float, int, categorical"),
        ('[params.lr]\ntype = "float"\nlow = 0\nhigh = 1\nlog = true\n', "params.lr: a log scale needs low > 0"),
        ('[params.bs]\ntype = "categorical"\nchoices = []\n', "params.bs: categorical needs a non-empty list"),
        ('[params.max_steps]\ntype = "int"\nlow = 1\nhigh = 9\n', "the search sets --max-steps itself"),
        ('[params.lr]\ntype = "float"\nlow = 1\nhigh = 2\nstep = 0.5\nlog = true\n', "step and log cannot be combined"),
        ('seed = 3\n[params.lr]\ntype = "float"\nlow = 1\nhigh = 2\n', "unknown top-level key(s) seed"),
    ],
)
def test_a_bad_space_is_one_line_naming_file_and_parameter(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "space.toml"
    path.write_text(text)
    with pytest.raises(SpaceError) as caught:
        load_space(path)
    message = str(caught.value)
    assert message.startswith(f"--space: {path}: ") and needle in message and "\n" not in message


def test_a_missing_space_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match=r"--space: .*nope\.toml: cannot read it"):
        load_space(tmp_path / "nope.toml")
    with pytest.raises(SpaceError):
        parse_space({"params": {"x": 3}})
