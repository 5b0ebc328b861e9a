"""A real tiny CPU training run reports where its time went, and the history's breakdown adds up to
the run's billed time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.history import open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.runs import create_run
from gpuplanner.history.tail import ingest_file
from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, read_events, trainer_env
from trainer.phases import PHASES


def test_a_real_run_records_startup_training_checkpoint_and_eval(tmp_path: Path, model_config: Path) -> None:
    run_dir = tmp_path / "run"
    args = base_args(
        run_dir,
        model_config,
        max_steps=8,
        eval_every_steps=4,
        eval_batches=2,
        checkpoint_every_steps=4,
        price_per_gpu_hour=2.0,
    )
    out = subprocess.run(
        [sys.executable, "-m", "trainer", "train", *cli_args(args)],
        cwd=REPO_ROOT,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    records = read_events(run_dir)
    start, end = records[0], records[-1]
    assert start["kind"] == "run_start" and end["kind"] == "run_end"
    # the trainer's totals: every phase it knows, adding up to its process's wall time
    assert set(end["phases"]) == set(PHASES) and end["phases_start"] == start["t"]
    assert sum(end["phases"].values()) == pytest.approx(end["t"] - start["t"], abs=0.05)
    for kind in ("step", "eval", "checkpoint"):
        assert all("phases" in r for r in records if r["kind"] == kind), kind

    db_path = tmp_path / "history.sqlite"
    with open_db(db_path) as db:
        run = create_run(db, name="tiny", gpu_count=1, price_usd_per_gpu_hour=2.0)
        ingest_file(db, run, run_dir / "events.jsonl")
        summary = summarize(db, run)
    breakdown = summary.time_breakdown
    assert breakdown is not None and breakdown["recorded"]
    seconds = {p["phase"]: p["seconds"] for p in breakdown["phases"]}
    for phase in ("startup", "data", "train", "checkpoint", "eval"):
        assert seconds[phase] > 0, (phase, seconds)
    assert seconds["compile"] == 0.0  # no --compile
    billed = summary.hours * 3600
    assert billed == pytest.approx(end["t"] - start["t"])
    assert sum(seconds.values()) == pytest.approx(billed, rel=0.01, abs=0.05)
    assert seconds["unaccounted"] + seconds["idle_after"] < 0.05
    assert sum(p["cost_usd"] for p in breakdown["phases"]) == pytest.approx(summary.cost_usd)
