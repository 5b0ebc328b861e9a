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


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): real training or a subprocess
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


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): real training or a subprocess
def test_a_stopped_and_resumed_run_adds_both_processes(tmp_path: Path, model_config: Path) -> None:
    """SIGTERM after a few steps (checkpoint, exit 75), then a resume to the end: each process reports
    its own totals from its own start, and the history adds them up to the billed time."""
    import signal

    from tests.trainer.conftest import spawn_train, stderr_of
    from tests.trainer.test_resume import _wait_for_step

    run_dir = tmp_path / "run"
    args = base_args(run_dir, model_config, max_steps=100000, price_per_gpu_hour=2.0)
    proc = spawn_train(args)
    _wait_for_step(run_dir, proc, 3, timeout=180)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, stderr_of(run_dir)
    stopped_at = read_events(run_dir)[-1]["totals"]["steps"]
    assert spawn_train({**args, "max_steps": stopped_at + 2}).wait(timeout=240) == 0, stderr_of(run_dir)
    records = read_events(run_dir)
    starts = [r for r in records if r["kind"] == "run_start"]
    ends = [r for r in records if r["kind"] == "run_end"]
    assert len(starts) == len(ends) == 2
    for start, end in zip(starts, ends):  # each process: its own start, its whole wall time
        assert end["phases_start"] == start["t"]
        assert sum(end["phases"].values()) == pytest.approx(end["t"] - start["t"], abs=0.05)
        assert end["phases"]["startup"] > 0 and end["phases"]["checkpoint"] > 0

    with open_db(tmp_path / "history.sqlite") as db:
        run = create_run(db, name="resumed", gpu_count=1, price_usd_per_gpu_hour=2.0)
        ingest_file(db, run, run_dir / "events.jsonl")
        summary = summarize(db, run)
        assert db.execute("SELECT COUNT(*) FROM run_phases WHERE run_id = ?", [run]).fetchone()[0] == 2
    seconds = {p["phase"]: p["seconds"] for p in summary.time_breakdown["phases"]}  # type: ignore[index]
    both = [sum(end["phases"][name] for end in ends) for name in PHASES]
    assert [seconds[name] for name in PHASES] == pytest.approx(both)
    # the billed time leaves out the gap from the stop to the restart; the first process's last
    # checkpoint write falls in that gap, so the phases may exceed it by that much
    billed = summary.hours * 3600
    overlap = ends[0]["t"] - next(r for r in records if r["kind"] == "preempted")["t"]
    assert billed - 0.05 <= sum(seconds.values()) <= billed + overlap + 0.05


def test_with_compile_the_first_step_s_excess_is_compilation() -> None:
    """--compile: the first step runs in the compile phase; once the second step shows what a step
    costs, that much moves to training (a real CPU compile takes minutes: the arithmetic is checked
    on the trainer's own method)."""
    from types import SimpleNamespace

    from trainer.loop import _Trainer
    from trainer.phases import PhaseClock

    now = [0.0]
    clock = PhaseClock(0.0, now=lambda: now[0])
    trainer = SimpleNamespace(compiled=True, phases=clock, _first_compute=None, steps_done=0)
    clock.switch("compile")
    now[0] = 30.0  # first step: 29.5 s of compiling and 0.5 s of training
    trainer.steps_done = 1
    _Trainer._count_compile(trainer, 30.0)
    clock.switch("train")
    now[0] = 30.5
    trainer.steps_done = 2
    _Trainer._count_compile(trainer, 0.5)
    assert clock.totals() == {
        "startup": 0.0,
        "compile": 29.5,
        "data": 0.0,
        "train": 1.0,
        "checkpoint": 0.0,
        "eval": 0.0,
    }
    trainer.compiled = False  # without compiling nothing moves
    trainer.steps_done = 2
    _Trainer._count_compile(trainer, 0.1)
    assert clock.totals()["compile"] == 29.5
