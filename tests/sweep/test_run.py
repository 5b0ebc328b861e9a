"""`gpuplanner sweep run` on this machine: pruning, the $ cap, a crash and bad input.

Each trial is the protocol fake under the real monitor (``tests/sweep/fake_trials.py``): the search, its
study, pruner, caps, launcher and history are the product's, a trial takes the time of its start-up
(``tests/sweep/test_show.py`` keeps one real search with the real trainer).

Eight trials, two slots on this machine (``--host local,local``), successive halving at step 30 of 90 with
reduction factor 3, one float parameter (the learning rate). The search process is killed while its
first trials run and started again with the same study name; it must end with every trial run exactly
once, the pruner's decisions matching the eval losses the trials reported, and the recorded spend
within the cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplanner.history.db import connect
from gpuplanner.sweep.runner import run_name
from gpuplanner.sweep.study import storage_url
from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from tests.sweep.conftest import PRICE, trainer_flags
from tests.trainer.test_monitor_cap import REACTION_S

pytestmark = pytest.mark.slow  # a search in a subprocess: about twenty monitor and fake start-ups
TRIALS = 8


def full_trial(folder: Path) -> float:
    """Dollars of one full trial (90 steps, evaluated every 30) on this machine now, two running side by side
    as the search runs them: the monitor's own clock, as its spend at $3,600 per hour. The cap is set from
    it, so it means the same on a fast or a slow machine."""
    flags = ["--max-steps", "90", "--eval-every-steps", "30", "--checkpoint-every-steps", "30"]
    runs = [folder / "a", folder / "b"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer",
                "exec",
                "--run-dir",
                str(run),
                "--price-per-gpu-hour",
                "3600",
                "--gpu-interval-s",
                "0",
                "--",
                *fake.command(*flags),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for run in runs
    ]
    assert [p.wait(300) for p in procs] == [0, 0]
    spend = []
    for run in runs:
        end = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if '"run_end"' in line]
        spend.append(float(end[-1]["totals"]["spend_usd"]))
    return sum(spend) / len(spend)


def sweep_argv(db: Path, space: Path, model_config: Path, cache: Path, cap: float, barriers: Path) -> list[str]:
    # every trial holds after its first step until the test releases it (once the search was killed)
    hold = f"{fake.ARGS_ENV}=--hold-at-step 1 --barrier-dir {barriers}"
    return [
        "sweep", "run", "--db", str(db), "--host", "local,local", "--space", str(space), "--study", "lr-search",
        "--trials", str(TRIALS), "--max-steps", "90", "--min-steps", "30", "--reduction-factor", "3",
        "--budget-usd", f"{cap:.4f}", "--seed", "3", "--env", hold,
        "--", *trainer_flags(model_config, cache),
    ]  # fmt: skip


def rows(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = connect(db)
    try:
        return conn.execute(sql, list(params)).fetchall()
    finally:
        conn.close()


def test_search_prunes_stays_under_the_cap_and_survives_a_kill(
    db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    # Twice: the cheaper of the two is the trial the search runs (the first pays for a cold start).
    trial_usd = min(full_trial(tmp_path / f"calibration-{i}") for i in range(2))
    # Eight trials cost at least one full trial and seven pruned at a third: 3.33 full trials. The two trials
    # that start at once share the cap (no step cost is known yet), so each may spend 2.5 full trials: enough
    # to reach the first milestone even when the other test worker slows start-up several times over. Whether
    # the cap or the last trial then ends the search depends on the load; both are accepted below.
    cap = 5.0 * trial_usd
    barriers = fake.Barriers(tmp_path / "barriers")
    command = sweep_argv(db_path, space_file, model_config, tmp_path / "cache", cap, barriers.folder)
    argv = [sys.executable, "-m", "tests.sweep.fake_trials", *command]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # only ends a test whose search died; the loop waits for a state
        while not (len(rows(db_path, "SELECT id FROM runs")) == 2 and barriers.reached("step-1")):
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "both slots should have started a trial"
            time.sleep(0.05)
    finally:
        first.kill()  # the search process dies while its trials hold; they go on by themselves
        first.wait(30)
        if first.stderr is not None:
            first.stderr.close()
    barriers.release("step-1")
    cut = command.index("--")
    again = [sys.executable, "-m", "tests.sweep.fake_trials", *command[:cut], "--json", *command[cut:]]
    done = subprocess.run(again, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)

    import optuna

    study = optuna.load_study(study_name="lr-search", storage=storage_url(db_path))
    trials = study.get_trials(deepcopy=False)
    # no trial lost, none run twice: each trial has exactly one run, named after it. (A kill between the
    # run's row and its launch record leaves a row that the next process marks failed and names in the
    # trial's abandoned_run_id before it launches the trial again.)
    abandoned = {t.user_attrs["abandoned_run_id"] for t in trials if "abandoned_run_id" in t.user_attrs}
    runs = [
        (rid, name) for rid, name, status in rows(db_path, "SELECT id, name, status FROM runs") if rid not in abandoned
    ]
    assert all(
        status == "failed"
        for (status,) in [rows(db_path, "SELECT status FROM runs WHERE id = ?", a)[0] for a in abandoned]
    )
    assert sorted(name for _, name in runs) == sorted(run_name("lr-search", t.number) for t in trials)
    assert sorted(t.user_attrs["run_id"] for t in trials) == sorted(rid for rid, _ in runs)
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    assert rows(db_path, "SELECT COUNT(*) FROM runs WHERE status = 'running'") == [(0,)]

    # the cap: the spend every run recorded at its steps (what the search enforces the cap on) adds up to no
    # more than the cap; the search reports what the runs really spent (a run's run_end totals count its
    # start-up and the time after its last step too), which can pass the cap by the time a stopped trial takes to
    # save its last checkpoint; a trial's cap holds from its first second (issue 27 item 10: the search at a very
    # high price is tests/sweep/test_hot_search.py), so that figure is reported here, not bounded.
    at_steps, whole = 0.0, 0.0
    for run_id, steps_usd in rows(
        db_path, "SELECT id, (SELECT MAX(spend_usd) FROM steps WHERE run_id = runs.id) FROM runs"
    ):
        ends = rows(
            db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end' ORDER BY seq", run_id
        )
        end_usd = (json.loads(ends[-1][0]).get("totals") or {}).get("spend_usd") if ends else None
        at_steps += steps_usd or 0.0
        whole += max(steps_usd or 0.0, end_usd or 0.0)
    # These trials are user commands under the monitor (the protocol fake), whose cap is a hard one: SIGTERM a
    # grace period before the trial's budget (90% of its allowance, less an overshoot measured on an earlier
    # trial), SIGKILL at it (tests/trainer/test_monitor_cap.py). What the whole search may record past the cap
    # is one monitor's reaction to its cap, priced here (it used to pass the cap by 3-10% under load).
    assert 0 < at_steps <= whole <= cap + REACTION_S * PRICE / 3600.0, (at_steps, whole, cap)
    assert document["spent_usd"] == pytest.approx(whole, abs=1e-6)
    print(f"\nFIGURES cap ${cap:.4f}: recorded at steps ${at_steps:.4f}, spent in all ${whole:.4f}")
    assert document["stop_reason"] == study.user_attrs["stop_reason"]
    # A trial's spend includes its start-up, which a loaded machine stretches unevenly, so whether the cap or the
    # last trial comes first depends on the machine's load; either way the study says which, and the spend
    # stayed under the cap (the cap stopping a search is checked deterministically in test_budget_and_space.py).
    # The cap ends a search in one of three ways the runner names (the budget spent, a trial's measured overshoot
    # or its measured start-up leaving no room for another trial); any of them is the cap stopping it early.
    if study.user_attrs["stop_reason"].startswith("cap reached: "):
        assert len(trials) < TRIALS, "the cap stopped the search before all trials ran"
    else:
        assert study.user_attrs["stop_reason"] == f"done: all {TRIALS} trials ran", study.user_attrs["stop_reason"]

    # pruning: replay Optuna's asynchronous successive halving over the decisions in the order they were
    # made, with the eval losses the trials reported into the history at step 30
    judged = sorted(
        ((j["t"], t, j) for t in trials for j in t.user_attrs.get("judged", []) if j["step"] == 30),
        key=lambda item: item[0],
    )
    assert judged, "at least one trial reached its first milestone and was judged there"
    seen: list[float] = []
    for _, trial, decision in judged:
        (reported,) = rows(
            db_path, "SELECT eval_loss FROM evals WHERE run_id = ? AND step = 30", trial.user_attrs["run_id"]
        )[0:1]
        assert decision["value"] == pytest.approx(reported[0])
        assert trial.intermediate_values[30] == pytest.approx(reported[0])
        seen.append(decision["value"])
        keep = sorted(seen)[max(0, len(seen) // 3 - 1)]
        assert decision["pruned"] == (decision["value"] > keep), (decision, seen)
        if decision["pruned"]:
            assert trial.state.name == "PRUNED" and trial.user_attrs["end"] == "pruned"


def test_a_search_whose_trials_never_end_by_themselves_stays_under_its_cap(
    db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    """Every trial holds at its first step forever (a barrier never released) and only its budget ends it: the
    cap binds whatever the load, and the search's true spend (each run's run_end totals) stays under it."""
    cap = 8.0  # $8 at $3,600/h: 8 s of trials; the first two share it (3.60 s each, a budget of $3.60)
    barriers = fake.Barriers(tmp_path / "never")
    command = sweep_argv(db_path, space_file, model_config, tmp_path / "cache", cap, barriers.folder)
    cut = command.index("--")
    argv = [sys.executable, "-m", "tests.sweep.fake_trials", *command[:cut], "--json", *command[cut:]]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["stop_reason"].startswith("cap reached"), document["stop_reason"]
    assert barriers.reached("step-1")  # the trials held there until their budgets stopped them
    whole = 0.0
    for run_id, status in rows(db_path, "SELECT id, status FROM runs"):
        assert status == "budget_stop"
        (detail,) = rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end'", run_id)[0]
        whole += json.loads(detail)["totals"]["spend_usd"]
    assert len(document["trials"]) >= 2 and all(t["end"] == "budget" for t in document["trials"])
    import optuna

    study = optuna.load_study(study_name="lr-search", storage=storage_url(db_path))
    spend = {t["number"]: t["spend_usd"] for t in document["trials"]}
    for trial in study.get_trials(deepcopy=False):  # each trial within its allowance, stopped at its budget
        attrs = trial.user_attrs
        assert attrs["budget_usd"] <= 0.9 * attrs["allowance_usd"] + 1e-9
        assert attrs["budget_usd"] * 0.9 <= spend[trial.number] <= attrs["allowance_usd"], (attrs, spend)
    assert document["spent_usd"] == pytest.approx(whole, abs=1e-6)
    # each trial stopped by its own budget, a tenth under its allowance: the cap is not passed at all here
    assert 0 < whole <= cap, (whole, cap)
    print(f"\nFIGURES cap ${cap:.2f}: spent in all ${whole:.4f} over {len(document['trials'])} trials")
