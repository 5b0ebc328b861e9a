"""The live budget rules and the search-space file, without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.sweep.budget import (
    FULL_TRIAL_HEADROOM,
    SAFETY,
    STEP_SLACK,
    TRAINER_SHARE,
    Amount,
    Caps,
    TrialBudget,
    new_trial_allowance,
    reservation,
    stop_cost,
    trial_budget,
)
from gpuplanner.sweep.space import SpaceError, load_space, parse_space

STEP = Amount(usd=0.10, gpu_hours=0.001)  # one optimizer step of a trial
PER_STEP = SAFETY / TRAINER_SHARE  # an allowance pays 1.25 x the step cost, and the trainer gets 90% of it


def test_first_trial_gets_the_furthest_stop_it_can_pay_for() -> None:
    caps = Caps(usd=10.0)
    # full trial: (90 + 2) x 1.25 / 0.9 x $0.10 = $12.78 > $10; milestone 30: 32 x 1.25 / 0.9 x $0.10 = $4.44
    allowance = new_trial_allowance(caps, [], STEP, [30], 90)
    assert allowance.reach_step == 30
    assert allowance.amount is not None
    assert allowance.amount.usd == pytest.approx((30 + STEP_SLACK) * PER_STEP * 0.10)
    assert stop_cost(STEP, 30) == allowance.amount


def test_a_trial_whose_whole_run_fits_gets_headroom() -> None:
    allowance = new_trial_allowance(Caps(usd=100.0), [], STEP, [30], 90)
    assert allowance.reach_step == 90 and allowance.amount is not None
    full = (90 + STEP_SLACK) * PER_STEP * 0.10
    assert allowance.amount.usd == pytest.approx(full * FULL_TRIAL_HEADROOM)
    # near the cap the headroom shrinks to what is left, less a first milestone for each other free slot
    tight = new_trial_allowance(Caps(usd=14.0), [], STEP, [30], 90)
    assert tight.reach_step == 90 and tight.amount is not None and tight.amount.usd == pytest.approx(14.0)
    shared = new_trial_allowance(Caps(usd=18.0), [], STEP, [30], 90, free_slots=2)
    assert shared.amount is not None and shared.amount.usd == pytest.approx(18.0 - stop_cost(STEP, 30).usd)
    # never below the cost of the full run itself
    squeezed = new_trial_allowance(Caps(usd=14.0), [], STEP, [30], 90, free_slots=3)
    assert squeezed.amount is not None and squeezed.amount.usd == pytest.approx(stop_cost(STEP, 90).usd)


def test_running_trials_reserve_their_allowance_and_ended_ones_their_spend() -> None:
    caps = Caps(usd=10.0)
    running = TrialBudget(spent=Amount(1.0, 0.01), allowance=Amount(4.0, 0.04), active=True, steps_done=10)
    ended = TrialBudget(spent=Amount(2.0, 0.02), allowance=Amount(4.0, 0.04), active=False, steps_done=30)
    assert reservation(running) == running.allowance and reservation(ended) == ended.spent
    # $4 + $2 committed, $4 left < $4.44 for the first milestone
    allowance = new_trial_allowance(caps, [running, ended], STEP, [30], 90)
    assert allowance.amount is None
    assert allowance.reason == "budget_usd: a trial's first milestone (step 30) costs $4.4444, $4.0000 left"
    # the sum of allowances and spend never passes the cap, whatever the trials are measured to cost
    trials = [ended]
    while (new := new_trial_allowance(caps, trials, Amount(0.01, 0.0001), [30], 90)).amount is not None:
        trials.append(TrialBudget(Amount(), new.amount, active=True))
    assert sum(reservation(t).usd for t in trials) <= caps.usd + 1e-9 and len(trials) > 2


def test_the_gpu_hour_cap_is_enforced_like_the_dollar_cap() -> None:
    caps = Caps(gpu_hours=0.02)
    allowance = new_trial_allowance(caps, [], STEP, [30], 90)
    assert allowance.amount is None and allowance.reason is not None
    assert allowance.reason.startswith("max_gpu_hours: a trial's first milestone (step 30) costs 0.044444 GPU-hours")


def test_without_a_step_cost_the_room_is_shared_by_the_free_slots() -> None:
    caps = Caps(usd=10.0)
    first = new_trial_allowance(caps, [], None, [30], 90, free_slots=2)
    assert first.amount is not None and first.amount.usd == pytest.approx(5.0) and first.reach_step is None
    running = TrialBudget(Amount(), first.amount, active=True)
    second = new_trial_allowance(caps, [running], None, [30], 90, free_slots=1)
    assert second.amount is not None and second.amount.usd == pytest.approx(5.0)
    full = new_trial_allowance(caps, [running, TrialBudget(Amount(), second.amount, active=True)], None, [30], 90)
    assert full.amount is None and full.reason == "budget_usd: nothing left to start a trial with"


def test_a_trials_budget_is_its_share_less_a_measured_overshoot() -> None:
    allowance = Amount(usd=10.0, gpu_hours=0.2)
    # nothing measured: 90% of the allowance, the rest pays for the stop (the step that crosses the budget)
    assert trial_budget(allowance, Amount()) == Amount(pytest.approx(9.0), pytest.approx(0.18))
    # an earlier trial's stop passed its budget by $0.50: within the 10% left, the share stands
    assert trial_budget(allowance, Amount(0.5, 0.005)).usd == pytest.approx(9.0)
    # by $1.50 (a slow stop on a loaded host): the budget leaves that much of the allowance for it
    budget = trial_budget(allowance, Amount(1.5, 0.03))
    assert budget == Amount(pytest.approx(8.5), pytest.approx(0.17))
    assert budget.usd + 1.5 <= allowance.usd + 1e-12  # the same stop again stays within the allowance
    # an overshoot as large as the allowance leaves no budget: the search does not start the trial
    assert trial_budget(allowance, Amount(10.0, 0.0)).usd <= 0


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
