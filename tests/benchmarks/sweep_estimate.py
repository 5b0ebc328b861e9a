"""The planner's estimate of a search against what the same search really spent.

Runs the search of the CPU test (``tests/sweep/test_run.py``) to its end on this machine: 8 trials of
the tiny GPT-2, 2 at a time, successive halving at step 30 of 90 (reduction factor 3), this machine
at $3,600 per GPU-hour, a cap it does not reach. Then asks `gpuplanner sweep plan` for the same search
(one "epoch" = one optimizer step of 4 x 32 tokens; the speed measured by the search's own step
records, so the comparison is of the schedule: how many trials reach and pass the milestone and what
they cost) and prints both side by side.

    .venv/bin/python tests/benchmarks/sweep_estimate.py

Expect the real search to cost more than the estimate by the steps a pruned trial trains while it is
being stopped, and the counts to scatter around the expectation (one search is one sample).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.sweep.conftest import PRICE, TINY_GPT2, TRAINER_ENV, trainer_flags  # noqa: E402

TRIALS, PARALLEL, MAX_STEPS, MIN_STEPS, ETA = 8, 2, 90, 30, 3
MICRO_BATCH, SEQ_LEN = 4, 32


def gpuplanner(*argv: str, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "gpuplanner", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(f"gpuplanner {argv[0]} {argv[1]} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def main() -> None:
    from gpuplanner.history.db import connect
    from gpuplanner.launch.hosts import Host, update_host

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, **TRAINER_ENV, "GPUPLANNER_DATA_DIR": str(root / "data")}
        db = root / "data" / "history.sqlite"
        db.parent.mkdir()
        update_host(db, Host(name="local", kind="local", price_usd_per_gpu_hour=PRICE))
        config = root / "tiny-gpt2.json"
        config.write_text(json.dumps(TINY_GPT2))
        space = root / "space.toml"
        space.write_text('[params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 3e-2\nlog = true\n')
        schedule = ["--min-steps", str(MIN_STEPS), "--reduction-factor", str(ETA)]
        real = gpuplanner(
            "sweep", "run", "--db", str(db), "--host", ",".join(["local"] * PARALLEL), "--space", str(space),
            "--trials", str(TRIALS), "--max-steps", str(MAX_STEPS), *schedule, "--budget-usd", "1000",
            "--step-seconds", "0.03", "--seed", "3", "--json", "--", *trainer_flags(config, root / "cache"),
            env=env,
        )  # fmt: skip
        conn = connect(db)
        try:
            run_steps = dict(conn.execute("SELECT run_id, MAX(step) FROM steps GROUP BY run_id").fetchall())
            steps = sum(run_steps.values())
        finally:
            conn.close()
        seconds = real["spent_usd"] / PRICE * 3600.0  # the trainers' own clocks: spend = price x time
        tokens_per_s = steps * MICRO_BATCH * SEQ_LEN / seconds
        estimate = gpuplanner(
            "sweep", "plan", "--params", "100k", "--samples", str(MICRO_BATCH), "--epochs", str(MAX_STEPS),
            "--seq-len", str(SEQ_LEN), "--micro-batch", str(MICRO_BATCH), "--tokens-per-s", f"{tokens_per_s:.3f}",
            "--price", str(PRICE), "--trials", str(TRIALS), "--parallel", str(PARALLEL),
            "--min-epochs", str(MIN_STEPS), "--reduction-factor", str(ETA), "--no-calibration", "--json",
            env=env,
        )  # fmt: skip

    trials = real["trials"]
    judged = [t for t in trials if t["last_step"] is not None and t["last_step"] >= MIN_STEPS]
    going_on = [t for t in judged if t["end"] == "complete"]
    stone = estimate["milestones"][0]
    stopped = [run_steps.get(t["run_id"], 0) for t in trials if t["end"] == "pruned"]
    rows = [
        ("cost (USD)", estimate["pruned"]["cost_usd"], real["spent_usd"]),
        ("GPU-hours", estimate["pruned"]["gpu_hours"], real["spent_gpu_hours"]),
        (f"trials reaching step {MIN_STEPS}", stone["trials_reaching"], len(judged)),
        ("trials finishing", estimate["pruned"]["trials_finishing"], len(going_on)),
        ("steps a pruned trial trains", float(MIN_STEPS), sum(stopped) / len(stopped) if stopped else None),
        ("cost without pruning (USD)", estimate["unpruned"]["cost_usd"], None),
    ]
    print(
        f"search: {TRIALS} trials x {MAX_STEPS} steps, {PARALLEL} at a time, successive halving at step "
        f"{MIN_STEPS} (eta {ETA}); measured speed {tokens_per_s:,.0f} tokens/s over {steps} steps"
    )
    print(f"{'':30}{'planner':>12}{'real':>12}{'real/planner':>14}")
    for name, planned, measured in rows:
        ratio = f"{measured / planned:.2f}" if measured is not None and planned else "-"
        shown = "-" if measured is None else f"{measured:,.4g}"
        print(f"{name:30}{planned:>12,.4g}{shown:>12}{ratio:>14}")
    print(f"stop reason: {real['stop_reason']}")


if __name__ == "__main__":
    main()
