"""`gpuplanner sweep plan`: the search estimate against hand calculations, the caps, the JSON, bad input."""

from __future__ import annotations

import json
import math
import re

import pytest

from gpuplanner.cli import main
from gpuplanner.sweep.schedule import Schedule, expected_promotions

# One trial: 6,000 samples x 15 epochs at a measured 100 samples/min = 15 h on one GPU at $2/GPU-h.
TRIAL = ["--params", "1B", "--samples", "6000", "--epochs", "15", "--samples-per-min", "100", "--price", "2"]


def sweep_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sweep", "plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = sweep_plan(capsys, *TRIAL, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_prune_bottom_half_at_epoch_3_matches_the_hand_calculation(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(
        capsys,
        "--trials", "40", "--pruner", "percentile", "--prune-percent", "50", "--prune-at-epoch", "3",
        "--startup-trials", "1", "--budget-usd", "1000", "--max-gpu-hours", "400",
    )  # fmt: skip
    # Hand calculation. One epoch = 6,000 samples / 100 per min = 60 min = 1 h = $2.
    # Trial 1 is never pruned (nothing has finished to compare with); of the other 39, half go on.
    survivors = 1 + 39 * 0.5  # 20.5
    pruned_at_3 = 40 - survivors  # 19.5 trials stop after 3 epochs
    epochs = pruned_at_3 * 3 + survivors * 15  # 58.5 + 307.5 = 366 epoch-hours
    cost = epochs * 1.0 * 2.0  # $732
    assert doc["pruned"]["cost_usd"] == pytest.approx(cost, rel=0.01)
    assert doc["pruned"]["gpu_hours"] == pytest.approx(366.0, rel=0.01)
    assert doc["unpruned"]["cost_usd"] == pytest.approx(40 * 15 * 2.0, rel=0.01)  # $1,200
    assert doc["saving"]["pct"] == pytest.approx((1200 - 732) / 1200 * 100, rel=0.01)
    assert doc["milestones"] == [{"resource": 3.0, "trials_reaching": 40.0, "trials_continuing": 20.5}]
    # one at a time: wall time = trial-hours; without pruning 40 waves of 15 h
    assert doc["pruned"]["wall_hours"] == pytest.approx(366.0, rel=0.01)
    assert doc["unpruned"]["wall_hours"] == pytest.approx(600.0, rel=0.01)
    # $732 of $1,000 is 73%; 366 of 400 GPU-hours is 92%: the GPU-hour cap binds first, both hold
    assert doc["caps"]["binding"] == "max_gpu_hours"
    assert doc["caps"]["finishes_under_cap"] is True
    assert doc["caps"]["trials_within_cap"] == 40


def test_successive_halving_matches_the_hand_calculation(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, "--trials", "9", "--min-epochs", "5", "--reduction-factor", "3", "--parallel", "3")
    # Milestones 5 and 15 x 3 = 45 > 15 epochs: one milestone at 5 epochs. The i-th trial to get there
    # goes on when it is among the best max(1, i // 3) of the i seen: probability max(1, i // 3) / i.
    going_on = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 2 / 6 + 2 / 7 + 2 / 8 + 3 / 9
    epochs = (9 - going_on) * 5 + going_on * 15
    assert doc["milestones"][0]["trials_continuing"] == pytest.approx(going_on, rel=1e-3)
    assert doc["pruned"]["cost_usd"] == pytest.approx(epochs * 2.0, rel=0.01)
    assert doc["pruned"]["wall_hours"] == pytest.approx(max(epochs / 3, 15.0), rel=0.01)
    assert doc["unpruned"]["wall_hours"] == pytest.approx(3 * 15.0, rel=0.01)


def test_expected_promotions_is_optunas_rule_averaged_over_orders() -> None:
    """Replay Optuna's promotion rule over every arrival order of 6 distinct values."""
    from itertools import permutations

    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    promoted = []
    for order in permutations(values):
        seen: list[float] = []
        count = 0
        for value in order:
            seen.append(value)
            idx = max(0, len(seen) // 2 - 1)
            count += value <= sorted(seen)[idx]
        promoted.append(count)
    assert expected_promotions(6, 2) == pytest.approx(sum(promoted) / len(promoted))


def test_hyperband_brackets_follow_optunas_allocation() -> None:
    schedule = Schedule("hyperband", max_resource=27, min_resource=1, reduction_factor=3)
    # 4 brackets (log3(27) + 1); budgets ceil(4 x 3^s / (s + 1)) for s = 3, 2, 1, 0: 27, 12, 6, 4
    assert [round(share * 49, 6) for _, share in schedule.brackets()] == [27, 12, 6, 4]
    used, finishing = schedule.resource_used(49)
    assert 0 < used < 49 * 27 and 0 < finishing < 49


def test_text_report_shows_the_saving_and_the_binding_cap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = sweep_plan(capsys, *TRIAL, "--trials", "20", "--min-epochs", "1", "--budget-usd", "100")
    assert code == 0, err
    assert "with pruning" in out and "without pruning" in out
    assert re.search(r"pruning saves \$[\d,.]+ \([\d.]+%\)", out)
    assert "budget_usd binds first" in out and "DOES NOT finish under the cap" in out


def test_json_numbers_are_finite_and_names_snake_case(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, "--trials", "30", "--pruner", "hyperband", "--min-epochs", "1", "--pricing", "on-demand")

    def walk(node: object, path: str = "") -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                assert re.fullmatch(r"[a-z0-9_]+", key), f"{path}.{key}"
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)
        elif isinstance(node, float):
            assert math.isfinite(node), path

    walk(doc)
    assert set(doc) == {
        "search",
        "trial",
        "milestones",
        "pruned",
        "unpruned",
        "saving",
        "caps",
        "trial_plan",
        "warnings",
    }
    assert doc["caps"]["binding"] is None and doc["caps"]["finishes_under_cap"] is None


def test_spot_trials_cost_the_expected_spot_price(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(
        capsys, "--trials", "4", "--pruner", "none", "--pricing", "spot", "--spot-price", "1",
        "--spot-overhead-pct", "10",
    )  # fmt: skip
    # 15 h x 1.10 overhead = 16.5 h at $1 per trial
    assert doc["trial"]["cost_usd"] == pytest.approx(16.5, rel=1e-3)
    assert doc["unpruned"]["cost_usd"] == pytest.approx(66.0, rel=1e-3) == doc["pruned"]["cost_usd"]


def test_a_cap_below_the_first_milestone_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, "--trials", "10", "--min-epochs", "3", "--budget-usd", "5")
    assert doc["caps"]["trials_within_cap"] == 0 and doc["caps"]["finishes_under_cap"] is False
    assert any("first milestone" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--min-epochs", "15"], "--min-epochs: the first milestone (15 epochs) must come before the end"),
        (["--reduction-factor", "1"], "--reduction-factor: must be a whole number from 2 to 1,000, got 1"),
        (["--pruner", "percentile", "--prune-percent", "50"], "--prune-at-epoch: must be a positive number"),
        (
            ["--pruner", "percentile", "--prune-percent", "50", "--prune-at-epoch", "20"],
            "--prune-at-epoch: pruning at 20",
        ),
        (["--pruner", "percentile", "--prune-percent", "120", "--prune-at-epoch", "2"], "--prune-percent:"),
    ],
)
def test_a_schedule_that_cannot_fit_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    code, out, err = sweep_plan(capsys, *TRIAL, "--trials", "8", *flags)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
