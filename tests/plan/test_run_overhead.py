"""The whole-run overhead (--run-overhead-pct): a term of its own in the hours and the cost, and the hint
a long plan gives when it is left out."""

from __future__ import annotations

import json

import pytest

from gpuplanner.cli import main

BASE = ["--model", "llama-3.1-8b", "--gpu", "H100 SXM", "--gpus", "8", "--tokens", "1e9", "--no-calibration"]


def _plan(capsys, *extra: str) -> dict:
    assert main(["plan", *BASE, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_overhead_is_its_own_term_of_the_hours_and_the_cost(capsys) -> None:
    steady = _plan(capsys)
    whole = _plan(capsys, "--run-overhead-pct", "12.5")
    assert steady["runtime"]["run_overhead_hours"] == 0
    assert whole["inputs"]["run_overhead_pct"] == 12.5
    hours = steady["runtime"]["hours"]
    assert whole["runtime"]["steady_state_hours"] == pytest.approx(hours, rel=1e-3)
    assert whole["runtime"]["run_overhead_hours"] == pytest.approx(0.125 * hours, rel=1e-3)
    assert whole["runtime"]["hours"] == pytest.approx(1.125 * hours, rel=1e-3)
    assert whole["on_demand"]["cost_usd"] == pytest.approx(1.125 * steady["on_demand"]["cost_usd"], rel=1e-4)
    assert main(["plan", *BASE, "--run-overhead-pct", "12.5"]) == 0
    text = capsys.readouterr().out
    assert "of which whole-run overhead" in text and "12.5% of" in text


def test_compare_rows_carry_the_same_overhead(capsys) -> None:
    argv = ["compare", *BASE, "--json"]
    assert main(argv) == 0
    steady = {(r["gpu"], r["gpus"], r["pricing"]): r for r in json.loads(capsys.readouterr().out)}
    assert main([*argv, "--run-overhead-pct", "10"]) == 0
    for row in json.loads(capsys.readouterr().out):
        base = steady[row["gpu"], row["gpus"], row["pricing"]]
        if row["pricing"] == "on-demand" and base["hours"]:
            assert row["hours"] == pytest.approx(1.1 * base["hours"], rel=1e-3)


def test_a_long_plan_says_its_hours_are_the_steady_state_until_the_overhead_is_given(capsys) -> None:
    long_job = ["--model", "llama-3.1-70b", "--method", "full", "--gpu", "H100 SXM", "--gpus", "64"]
    long_job += ["--sharding", "fsdp", "--tokens", "1e11", "--no-calibration", "--json"]
    assert main(["plan", *long_job]) == 0
    hint = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "--run-overhead-pct" in w]
    assert len(hint) == 1 and "GPU-hours of steady-state training" in hint[0]
    assert main(["plan", *long_job, "--run-overhead-pct", "10"]) == 0
    assert not [w for w in json.loads(capsys.readouterr().out)["warnings"] if "--run-overhead-pct" in w]
    short = _plan(capsys)  # 8B on 1B tokens: no hint
    assert not [w for w in short["warnings"] if "--run-overhead-pct" in w]


@pytest.mark.parametrize("value", ["-1", "1001", "nan", "ten"])
def test_a_bad_overhead_is_one_line_naming_the_flag(value: str, capsys) -> None:
    assert main(["plan", *BASE, "--run-overhead-pct", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--run-overhead-pct" in err[0]
