"""A user command's cap under the monitor (``python -m trainer exec``) is a hard cap: SIGTERM once the cap leaves
less than the grace period, SIGKILL at the cap, and the cap holds through the monitor's own start-up.

The job is the protocol fake (``tests/protocol_fake.py``) held at a barrier that is never released and ignoring
SIGTERM (``--ignore-term``), the worst case of a command that takes its time to stop: only the SIGKILL at the
cap ends it. The monitor process's exit is the state each test waits for. The spend clock is wall time by
nature, so the one bound with a clock in it is the monitor's own reaction after the cap (waking, the kill,
reaping the job, writing ``run_end``): 8-183 ms in 14 runs on this 2-core container at load 8-10 (two CPU hogs
beside it; ``tests/benchmarks/monitor_cap.py``), allowed :data:`REACTION_S` here, at the test's price.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from trainer.command_monitor import GRACE_SHARE
from trainer.protocol import StreamParser

PRICE = 36_000.0  # $10 per second of one GPU: a cap of a few seconds is tens of dollars
PER_S = PRICE / 3600.0
REACTION_S = 0.5  # what the monitor may record past the cap: its reaction to the cap (see above)


def monitor(run_dir: Path, *flags: str, command: list[str]) -> tuple[int, str, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, "-m", "trainer", "exec", "--run-dir", str(run_dir), "--gpu-interval-s", "0"]
    proc = subprocess.run(
        [*argv, "--price-per-gpu-hour", repr(PRICE), *flags, "--", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    parser = StreamParser()
    ends = [r for r in parser.feed((run_dir / "events.jsonl").read_bytes()) if r["kind"] == "run_end"]
    assert len(ends) == 1
    return proc.returncode, proc.stderr, ends[0]


def test_sigterm_comes_a_grace_period_before_the_cap_and_sigkill_at_the_cap(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    budget, grace = 30.0, 0.25  # 3 s: SIGTERM at $27.50 (the fake has its handler by then), SIGKILL at $30
    code, _, end = monitor(
        run_dir,
        "--budget-usd",
        str(budget),
        "--grace-s",
        str(grace),
        command=fake.command("--steps", "5", "--hold-at-step", "1", "--ignore-term"),
    )
    assert code == 0 and end["status"] == "budget_stop"  # a budget stop is a finished run
    assert end["exit_code"] == 137  # it ignored SIGTERM: the SIGKILL ended it
    assert (run_dir / "got_term").read_text().split() == ["SIGTERM"]
    stop = end["stop"]
    assert stop["grace_s"] == grace
    # SIGTERM when what the budget left would no longer pay for the grace period (not before), SIGKILL at the cap
    assert budget - grace * PER_S <= stop["term"]["spend_usd"] <= stop["kill"]["spend_usd"]
    assert budget <= stop["kill"]["spend_usd"] <= end["totals"]["spend_usd"]
    # the recorded spend is the true spend (the clock at run_end), past the cap by the monitor's reaction only
    assert end["totals"]["spend_usd"] == pytest.approx(end["totals"]["elapsed_s"] * PER_S, rel=1e-5)
    assert end["totals"]["spend_usd"] <= budget + REACTION_S * PER_S
    assert not (run_dir / "final.json").exists()


def test_a_grace_period_longer_than_the_cap_allows_is_cut_to_its_last_tenth(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    budget = 30.0  # 3 s of spend: the default 30 s grace period (SIGKILL 30 s after SIGTERM) would cost $300
    code, err, end = monitor(
        run_dir, "--budget-usd", str(budget), command=fake.command("--hold-at-step", "1", "--ignore-term")
    )
    assert code == 0 and (end["status"], end["exit_code"]) == ("budget_stop", 137)
    assert end["stop"]["grace_s"] == pytest.approx(GRACE_SHARE * budget / PER_S)  # 0.3 s of the cap's 3 s
    assert end["stop"]["term"]["spend_usd"] >= budget * (1 - GRACE_SHARE)
    assert end["stop"]["kill"]["spend_usd"] >= budget
    assert budget <= end["totals"]["spend_usd"] <= budget + REACTION_S * PER_S  # not $300 past it
    assert "did not end by its cap: SIGKILL" in err


def test_a_cap_reached_in_the_monitors_start_up_starts_no_command(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # $0.01 is a millisecond at this price: spent before the monitor has even read its flags. What it spends
    # there is the part of a cap that cannot be controlled: the interpreter and the monitor's imports until its
    # caps thread runs ($11, 1.1 s, at load 11 on this 2-core container)
    code, err, end = monitor(run_dir, "--budget-usd", "0.01", command=fake.command("--hold-before-start"))
    assert code == 0 and end["status"] == "budget_stop"
    assert "before the command started" in end["reason"]
    assert not (run_dir / "start.reached").exists() and not (run_dir / "user_telemetry.jsonl").exists()
    assert end["totals"]["steps"] == 0 and end["totals"]["spend_usd"] >= 0.01
    assert "stopping the command" in err


def test_the_caps_moment_is_the_spend_clocks_inverse() -> None:
    from trainer.spend import SpendClock, SpendTotals, cap_reached

    # 4 GPUs at $9/GPU-h ($0.01 a second), $1.50 spent by earlier attempts: the $2 budget comes 50 s in, the
    # 0.1 GPU-hour cap (0.04 carried over) after 54 s
    clock = SpendClock(9.0, 4, started_mono=100.0, base=SpendTotals(60.0, 0.04, 1.5))
    assert clock.cap_moment(2.0, None) == pytest.approx(150.0)
    assert clock.cap_moment(None, 0.1) == pytest.approx(154.0)
    assert clock.cap_moment(2.0, 0.1) == pytest.approx(150.0)  # the nearer one
    at = clock.cap_moment(2.0, None)
    assert clock.totals(at).spend_usd == pytest.approx(2.0) and cap_reached(clock.totals(at + 1e-6), 2.0, None)
    assert cap_reached(clock.totals(at - 1e-3), 2.0, None) is None
    assert clock.cap_moment(None, None) == float("inf")
    assert SpendClock(None, 1, 0.0).cap_moment(5.0, None) == float("inf")  # no price: a budget is never reached
    assert clock.cap_moment(1.0, None) < 100.0  # already passed: a moment before this attempt's start
