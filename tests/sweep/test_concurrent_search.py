"""Two `gpuplanner sweep run` of one study at once (issue 27 item 4): a study is run by one process at a time.

Before, both processes asked the study for trials and launched them: trial 0 ran twice (the duplicate's spend
missing from the total), or one crashed telling a trial the other had finished (``UpdateFinishedTrialError``),
or, on a fresh study file, on ``alembic_version``. Now the second process is refused with one line naming the
study, and the first runs every trial exactly once.
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
from gpuplanner.sweep.lookback import run_spend
from gpuplanner.sweep.runner import run_name
from gpuplanner.sweep.study import storage_path
from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from tests.sweep.conftest import trainer_flags

TRIALS = 2


def _runs(db: Path) -> list[tuple[int, str]]:
    conn = connect(db)
    try:
        return conn.execute("SELECT id, name FROM runs ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_two_searches_of_one_study_at_once_run_each_trial_once(
    db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    assert not storage_path(db_path).exists()  # a fresh study file: both processes set it up at once
    # The trials are the protocol fake under the real monitor (tests/sweep/fake_trials.py): this test is about
    # the study, not the trainer. The first trial holds after its first step until the third process was
    # refused, so the study is certainly held by a running search while the third one tries it.
    barriers = fake.Barriers(tmp_path / "barriers")
    hold = f"{fake.ARGS_ENV}=--hold-at-step 1 --barrier-dir {barriers.folder}"
    argv = [
        sys.executable, "-m", "tests.sweep.fake_trials", "sweep", "run", "--db", str(db_path), "--host", "local",
        "--space", str(space_file), "--study", "twice", "--trials", str(TRIALS), "--max-steps", "40",
        "--pruner", "none", "--budget-usd", "100000", "--seed", "1", "--json", "--env", hold,
        "--", *trainer_flags(model_config, tmp_path / "cache"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    both = [
        subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120  # only ends a test whose searches died; the loop waits for a state
        while not barriers.reached("step-1"):
            assert any(p.poll() is None for p in both), [p.communicate() for p in both]
            assert time.monotonic() < deadline, "a trial should have reached its first step"
            time.sleep(0.05)
        third = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        barriers.release("step-1")
        outcomes = [p.communicate(timeout=240) for p in both]
    finally:
        for p in both:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    codes = sorted(p.returncode for p in both)
    assert codes == [0, 2], outcomes
    refused = [err for p, (_, err) in zip(both, outcomes, strict=True) if p.returncode == 2]
    for err in [*refused, third.stderr]:
        assert "Traceback" not in err
        assert err.strip().splitlines() == [
            "gpuplanner sweep: error: --study: 'twice' is being run by another search process; wait for it to end (or stop it) "
            "and run this again to continue the study, or give another --study name"
        ]
    assert third.returncode == 2 and third.stdout == ""
    winner = next(out for p, (out, _) in zip(both, outcomes, strict=True) if p.returncode == 0)
    document = json.loads(winner)

    # every trial exactly once: one run per trial, named after it, and the total is the sum of those runs' spend
    runs = _runs(db_path)
    assert sorted(name for _, name in runs) == [run_name("twice", n) for n in range(TRIALS)]
    assert sorted(t["run_id"] for t in document["trials"]) == [rid for rid, _ in runs]
    assert [t["end"] for t in document["trials"]] == ["complete"] * TRIALS
    conn = connect(db_path)
    try:
        spends = [run_spend(conn, rid)[0] or 0.0 for rid, _ in runs]
    finally:
        conn.close()
    assert all(s > 0 for s in spends)
    assert document["spent_usd"] == pytest.approx(sum(spends), abs=1e-6)
    assert document["stop_reason"] == f"done: all {TRIALS} trials ran"
