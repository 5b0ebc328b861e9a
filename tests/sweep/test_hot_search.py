"""A search at a very high price with a small cap (issue 27, "done means"): $36,000 per GPU-hour ($10 a second)
and a $3 cap, while a trial's start-up alone costs tens of dollars. What the runs really spent (the history's end
totals) is at most the cap plus one step's cost (measured by an uncapped trainer run at the same price), and
`sweep show` reports the same figure as `sweep run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.history.db import connect
from gpuplanner.launch.hosts import get_host, update_host
from gpuplanner.sweep.lookback import run_spend
from tests.conftest import REPO_ROOT
from tests.sweep.conftest import trainer_flags

pytestmark = pytest.mark.slow
PRICE = 36_000.0
CAP = 3.0


def one_step_usd(model_config: Path, cache: Path, run_dir: Path) -> float:
    """The largest step-to-step spend of an uncapped 20-step run at the same price on this machine now."""
    flags = [*trainer_flags(model_config, cache), "--max-steps", "20", "--run-dir", str(run_dir)]
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "train", *flags, "--price-per-gpu-hour", str(PRICE)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    spend = [r["spend_usd"] for r in records if r["kind"] == "step"]
    assert len(spend) == 20
    return max(b - a for a, b in zip(spend, spend[1:], strict=False))


def test_a_search_at_36000_an_hour_stays_within_a_3_dollar_cap(
    db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    from dataclasses import replace

    update_host(db_path, replace(get_host(db_path, "local"), price_usd_per_gpu_hour=PRICE))
    cache = tmp_path / "cache"
    step_usd = one_step_usd(model_config, cache, tmp_path / "reference")  # also fills the token cache
    argv = [
        sys.executable, "-m", "gpuplanner", "sweep", "run", "--db", str(db_path), "--host", "local",
        "--space", str(space_file), "--study", "hot", "--trials", "4", "--max-steps", "20", "--pruner", "none",
        "--budget-usd", str(CAP), "--json", "--", *trainer_flags(model_config, cache),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout)
    conn = connect(db_path)
    try:
        spends = [run_spend(conn, rid)[0] or 0.0 for (rid,) in conn.execute("SELECT id FROM runs").fetchall()]
    finally:
        conn.close()
    whole = sum(spends)
    print(f"\nFIGURES cap ${CAP}: spent ${whole:.4f} in {len(spends)} trials; one step ${step_usd:.4f}")
    assert spends and whole <= CAP + step_usd
    assert document["spent_usd"] == pytest.approx(whole, abs=1e-6)
    shown = subprocess.run(
        [sys.executable, "-m", "gpuplanner", "sweep", "show", "hot", "--db", str(db_path), "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["spent_usd"] == pytest.approx(whole, abs=1e-6)
