"""Hostile numbers on the search commands' flags (issue 27 item 11): whatever the numbers, `sweep plan`, `sweep
size` and `sweep run` end with exit 0 or 2 within the test's time, never a traceback; a refusal is one line
naming the flag; nothing printed says ``inf`` or ``nan``; `sweep run` starts nothing it was not asked to."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner import cli

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
NUMBERS = ["0", "1", "2", "3", "-1", "0.5", "1e12", "1e308", "1e-308", "5e-324", "1e400", str(2**63), str(10**400)]
NUMBERS += ["inf", "-inf", "nan", "-0", "1_000", "١", "", "x", "0x10", "99.99", "100", "1e-9"]
TRIAL = ["--params", "1B", "--samples", "6000", "--epochs", "15", "--samples-per-min", "100", "--price", "2"]
NON_FINITE = re.compile(r"\b(inf|nan|infinity)\b", re.IGNORECASE)


def call(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's exit code, never a traceback
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def flags(draw: Any, names: list[str]) -> list[str]:
    argv: list[str] = []
    for name in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
        argv += [name, draw(st.sampled_from(NUMBERS))]
    return argv


def check(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "Error:" not in err.split(":", 1)[0], err
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and "--" in lines[-1], err  # names the flag
        assert len([line for line in lines if "error:" in line]) == 1, err
        assert not NON_FINITE.search(re.sub(r"'[^']*'", "", err)), err  # a computed inf/nan (the input may be 'inf')
    else:
        assert not NON_FINITE.search(out), out


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--trials", "1e12"], "--trials: must be from 1 to 1,000,000, got 1e+12"),  # hung
        (
            ["--trials", "9", "--pruner", "hyperband", "--min-epochs", "1e-308"],  # ran for hours
            "--min-epochs: the first milestone (1e-308 epochs) is so early that trials would be judged at 648 "
            "milestones (at most 60); give a later first milestone",
        ),
        (
            ["--trials", "9", "--pruner", "hyperband", "--reduction-factor", "1e308"],  # OverflowError
            "--reduction-factor: must be a whole number from 2 to 1,000, got 1e+308",
        ),
    ],
)
def test_the_numbers_that_hung_or_overflowed(argv: list[str], line: str) -> None:
    code, out, err = call(["sweep", "plan", *TRIAL, *argv])
    assert (code, out, err) == (2, "", f"gpuplanner sweep: error: {line}\n")


@pytest.mark.parametrize(
    ("argv", "line"),
    [  # the compute these buy is infinite: before, "--budget-usd: must be a positive number, got inf" for the
        # GPU-hour cap, or "--flops: ... got inf" (a flag sweep size does not have)
        (["--max-gpu-hours", "1e308"], "--max-gpu-hours: 1e+308 buys more compute than any model could use"),
        (["--budget-usd", "1e308"], "--budget-usd: 1e+308 buys more compute than any model could use"),
        (["--budget-usd", "1e300", "--price", "1e-300"], "--budget-usd: 1e+300 buys more compute than any"),
    ],
)
def test_sweep_size_caps_that_buy_infinite_compute(argv: list[str], line: str) -> None:
    code, out, err = call(["sweep", "size", *argv])
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and line in err, err
    check(code, out, err)


@settings(FUZZ, max_examples=30)
@given(st.data())
def test_sweep_plan_numbers(data: st.DataObject) -> None:
    names = ["--trials", "--min-epochs", "--reduction-factor", "--prune-percent", "--prune-at-epoch"]
    names += ["--startup-trials", "--parallel", "--trial-overhead-minutes", "--budget-usd", "--max-gpu-hours"]
    pruner = data.draw(st.sampled_from(["successive-halving", "hyperband", "percentile", "none"]))
    argv = ["sweep", "plan", *TRIAL, "--trials", "9", "--pruner", pruner, *flags(data.draw, names)]
    as_json = data.draw(st.booleans())
    code, out, err = call([*argv, "--json"] if as_json else argv)
    check(code, out, err)
    if code == 0 and as_json:
        json.loads(out)


@FUZZ
@given(st.data())
def test_sweep_size_numbers(data: st.DataObject) -> None:
    names = ["--budget-usd", "--max-gpu-hours", "--gpus", "--price", "--peak-tflops", "--mfu"]
    code, out, err = call(["sweep", "size", *flags(data.draw, names)])
    check(code, out, err)


@FUZZ
@given(st.data())
def test_sweep_run_numbers(tmp_path_factory: Any, data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("run")
    space = folder / "space.toml"
    space.write_text('[params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 3e-2\nlog = true\n')
    names = ["--trials", "--max-steps", "--min-steps", "--reduction-factor", "--budget-usd", "--max-gpu-hours"]
    names += ["--step-seconds", "--seed", "--prune-percent", "--prune-at-step", "--startup-trials"]
    db = folder / "history.sqlite"
    argv = ["sweep", "run", "--db", str(db), "--host", "nowhere", "--space", str(space), "--trials", "3"]
    argv += ["--max-steps", "90", *flags(data.draw, names), "--", "--device", "cpu"]
    code, out, err = call(argv)
    assert code == 2 and out == "", (code, out, err)  # no host named "nowhere": nothing starts
    check(code, out, err)
