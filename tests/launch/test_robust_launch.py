"""Issue 13 items 10-12: a lost process never ends the CLI or leaves the history at "running"; a stop
signal at any moment of start-up is resumable; a budget needs a price, and the trainer's spend and the
history's cost agree, start-up included."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import connect
from gpuplanner.launch import supervisor
from gpuplanner.launch.budget import BudgetError, budget_problem, check_budget
from gpuplanner.launch.hosts import local_host
from gpuplanner.launch.local_backend import LocalBackend
from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import rows, train_flags
from tests.launch.test_runs import Watch

pytestmark = pytest.mark.slow


def _events_file(run_dir: Path) -> list[dict]:
    from trainer.protocol import StreamParser

    return StreamParser().feed((run_dir / "events.jsonl").read_bytes())


def _status(db_path: Path, run_id: int) -> str:
    return rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id)[0][0]


def _paid_startup_s(folder: Path, model_config: Path) -> float:
    """The trainer's paid start-up on this machine now: from the process start (``run_start.t``, the budget
    clock's zero) to its first step's record, measured by one priced step of the budget tests' flags launched
    as they are (a local run through ``RunManager`` in this process, its own history and run folder), just
    before the test. The budgets below are sized from it, so that however loaded the machine is, start-up
    never spends the cap and the loop's own check stops the run (a cap spent during start-up is
    tests/launch/test_startup_budget.py's)."""
    manager = RunManager(folder / "history.sqlite", local_runs_root=folder / "runs")
    try:
        run_id = manager.launch("local", train_flags(model_config, steps=1), price_usd_per_gpu_hour=3600.0)
        status = manager.wait(run_id, 240)
    finally:
        manager.close()
    assert (status.state, status.exit_code) == ("finished", 0), status
    events = _events_file(Path(status.run_dir))
    step = next(e for e in events if e["kind"] == "step")
    assert events[0]["kind"] == "run_start"
    return float(step["t"] - events[0]["t"])


# -- item 12: a budget needs a price ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "price", "expected"),
    [
        (None, None, None),
        (None, 2.0, None),
        (5.0, 2.0, None),
        (5.0, None, "budget: host 'box' has no price per GPU-hour"),
        (5.0, 0.0, "budget: host 'box' has a price of 0.0 per GPU-hour, so the spend could never reach"),
        (5.0, math.nan, "budget: host 'box' has a price of nan per GPU-hour"),
        (0.0, 2.0, "budget: a positive number of US dollars, not 0.0"),
        (-1.0, 2.0, "budget: a positive number of US dollars, not -1.0"),
        (math.inf, 2.0, "budget: a positive number of US dollars, not inf"),
        (math.nan, 2.0, "budget: a positive number of US dollars, not nan"),
    ],
)
def test_budget_problem_is_one_line_naming_the_field(budget, price, expected) -> None:
    problem = budget_problem(budget, price, "box")
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(expected) and "\n" not in problem


def test_check_budget_covers_every_host_the_run_may_use() -> None:
    check_budget(5.0, [("a", 2.0), ("b", 3.0)])
    check_budget(None, [("a", None)])
    with pytest.raises(BudgetError, match="host 'b' has no price"):
        check_budget(5.0, [("a", 2.0), ("b", None)])


def test_cli_refuses_a_budget_without_a_price(db_path: Path, model_config: Path, capsys) -> None:
    flags = train_flags(model_config, steps=2)
    assert main(["run", "--db", str(db_path), "--host", "local", "--budget-usd", "3", "--", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpuplanner run: error: --budget-usd: host 'local' has no price")
    assert "--price" in err[0]
    assert main(["run", "--db", str(db_path), "--host", "local", "--budget-usd", "nan", "--price", "2", "--", *flags])
    assert "--budget-usd: a positive number of US dollars" in capsys.readouterr().err
    assert main(["run", "--db", str(db_path), "--host", "local", "--price", "inf", "--", *flags]) == 2
    assert "--price:" in capsys.readouterr().err
    assert rows(db_path, "SELECT COUNT(*) FROM runs") == [(0,)]  # nothing was launched
    # The manager refuses too (the window launches through it), before any run row exists.
    manager = RunManager(db_path)
    with pytest.raises(BudgetError, match="no price per GPU-hour"):
        manager.launch("local", flags, budget_usd=3.0)
    manager.close()
    assert rows(db_path, "SELECT COUNT(*) FROM runs") == [(0,)]


def test_trainer_refuses_a_budget_without_a_price(tmp_path: Path, model_config: Path) -> None:
    from trainer.cli import main as trainer_main

    args = ["train", *train_flags(model_config, steps=2), "--run-dir", str(tmp_path / "run"), "--budget-usd", "3"]
    assert trainer_main(args) == 2
    assert not (tmp_path / "run" / "events.jsonl").exists()


def test_budget_stop_cost_in_the_history_agrees_with_the_trainer(
    db_path: Path, model_config: Path, capsys, tmp_path: Path
) -> None:
    # $1 per second of the run, start-up included; the cap is twice the start-up as measured now and 2 s
    # more, so the loop starts with about half the budget left however loaded the machine is
    price, cap = 3600.0, round(2 * _paid_startup_s(tmp_path / "startup", model_config) + 2.0, 2)
    flags = train_flags(model_config, steps=100000)
    code = main(
        ["run", "--db", str(db_path), "--host", "local", "--json", "--price", str(price), "--budget-usd", str(cap)]
        + ["--", *flags]
    )
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (code, doc["state"]) == (0, "finished"), doc
    run_id, run_dir = doc["run_id"], Path(doc["run_dir"])
    assert _status(db_path, run_id) == "budget_stop"
    events = _events_file(run_dir)
    start, end = events[0], events[-1]
    steps = [e for e in events if e["kind"] == "step"]
    assert start["kind"] == "run_start" and end["kind"] == "run_end" and end["status"] == "budget_stop"
    per_s = price / 3600.0
    # The spend where the trainer stopped, as its last checkpoint (written at the stop) carries it.
    newest = max((run_dir / "checkpoints").glob("step-*"))
    stop_spend = json.loads((newest / "trainer_state.json").read_text())["spend_usd"]
    assert stop_spend >= cap
    assert len(steps) > 1, "the start-up spent the budget"
    # the clock started with the process: the first step already paid for the start-up
    assert steps[0]["spend_usd"] == pytest.approx((steps[0]["t"] - start["t"]) * per_s, abs=0.05)
    assert all(s["spend_usd"] < cap for s in steps[:-1])  # stopped at the first step past the cap
    # The budget is checked once per step: the overshoot is at most the wall time between the last two
    # checks (a step plus its logging; longer than step_time_s when a loaded machine deschedules us).
    assert stop_spend - cap <= (steps[-1]["t"] - steps[-2]["t"]) * per_s + 0.05
    db = connect(db_path)
    try:
        summary = summarize(db, run_id, with_alerts=False)
    finally:
        db.close()
    trainer_spend = end["totals"]["spend_usd"]
    assert summary.cost_usd == pytest.approx(trainer_spend, abs=0.05)  # the same clock over the same span
    # Beyond the stop only the final checkpoint and model are written (a fraction of a second), so the
    # history's cost exceeds the cap by one step and that save, never by the start-up.
    assert 0 <= summary.cost_usd - stop_spend <= 1.0 * per_s, (summary.cost_usd, stop_spend)
    assert summary.price_usd_per_gpu_hour == price
    startup = steps[0]["t"] - start["t"]
    print(
        f"\nFIGURES budget: cap ${cap:.2f}, history cost ${summary.cost_usd:.4f}, trainer spend ${trainer_spend:.4f}"
        f" (differ by ${abs(summary.cost_usd - trainer_spend):.4f}), over the cap by ${summary.cost_usd - cap:.4f},"
        f" start-up paid ${startup * per_s:.2f}, steps {len(steps)}"
    )


def test_budget_cost_agrees_across_a_preemption(
    db_path: Path,
    model_config: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from tests.launch.test_preemption_matrix import CliRun, _records

    monkeypatch.setattr(supervisor, "BACKOFF_BASE_S", 0.2)
    # $1 per second: both start-ups are paid, the wait between them is not. The cap is four start-ups as
    # measured now and 3 s more (twice the two), so the resumed process reaches its loop with budget left
    # (a cap spent in its start-up would stop it before any step, with no checkpoint at the stop).
    price, cap = 3600.0, round(4 * _paid_startup_s(tmp_path / "startup", model_config) + 3.0, 2)
    cli = CliRun(db_path, train_flags(model_config, steps=100000), ("--price", str(price), "--budget-usd", str(cap)))
    node = cli.launch()
    run_dir = Path(node["run_dir"])
    deadline = time.monotonic() + 120
    while not any(r["kind"] == "step" for r in _records(run_dir)):
        assert time.monotonic() < deadline, "no step"
        time.sleep(0.01)
    os.killpg(node["pgid"], signal.SIGTERM)  # a spot reclaim
    assert cli.wait() == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (doc["state"], doc["restarts"]) == ("finished", 1), doc
    assert _status(db_path, doc["run_id"]) == "budget_stop"
    records = _records(run_dir)
    ends = [r for r in records if r["kind"] == "run_end"]
    assert [e["status"] for e in ends] == ["preempted", "budget_stop"]
    second = records[[i for i, r in enumerate(records) if r["kind"] == "run_start"][1] :]
    first_step = next(r for r in second if r["kind"] == "step")  # the resumed process reached its loop
    # it carried over all the first attempt paid (its save at the stop too) and paid its own start-up
    paid = ends[0]["totals"]["spend_usd"] + (first_step["t"] - second[0]["t"]) * price / 3600.0
    assert first_step["spend_usd"] == pytest.approx(paid, abs=0.05)
    newest = max((run_dir / "checkpoints").glob("step-*"))
    stop_spend = json.loads((newest / "trainer_state.json").read_text())["spend_usd"]
    assert stop_spend >= cap
    db = connect(db_path)
    try:
        summary = summarize(db, doc["run_id"], with_alerts=False)
    finally:
        db.close()
    assert summary.interruptions == 1
    assert summary.cost_usd == pytest.approx(ends[-1]["totals"]["spend_usd"], abs=0.1)
    assert 0 <= summary.cost_usd - stop_spend <= 1.0, (summary.cost_usd, stop_spend)


# -- item 10: a lost process: the history always ends final ------------------------------------------


def _pgid_when_started(manager: RunManager, run_id: int) -> int:
    pgid = manager.status(run_id).pid
    assert pgid is not None
    return pgid


def test_lost_process_without_auto_resume_is_failed_in_the_history(
    db_path: Path, model_config: Path, tmp_path: Path
) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", train_flags(model_config, steps=50))
    os.killpg(_pgid_when_started(manager, run_id), signal.SIGKILL)
    status = manager.wait(run_id, 60)
    assert (status.state, status.exit_code) == ("failed", None)
    assert _status(db_path, run_id) == "failed"
    manager.close()


def test_history_is_final_when_nobody_is_left_to_restart(
    db_path: Path, model_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "BACKOFF_BASE_S", 60.0)
    watch = Watch()
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", train_flags(model_config, steps=50), auto_resume=True, on_status=watch.on_status)
    os.killpg(_pgid_when_started(manager, run_id), signal.SIGKILL)
    watch.until(lambda: "preempted" in watch.states, 60)
    assert "failed" not in watch.states  # waiting for the restart is not an end
    assert manager.live_runs() == [run_id]
    manager.close()  # the app quits during the back-off: nothing will restart the run now
    assert _status(db_path, run_id) == "preempted"  # resumable, not "running"
    again = RunManager(db_path, local_runs_root=tmp_path / "runs")
    again.resume(run_id)
    status = again.wait(run_id, 180)
    assert (status.state, status.exit_code) == ("finished", 0)
    assert _status(db_path, run_id) == "finished"
    again.close()


# -- item 11: a stop signal at any moment of start-up -------------------------------------------------


@pytest.mark.parametrize("delay_s", [0.0, 0.002, 0.01, 0.03, 0.1])
def test_sigterm_at_any_moment_of_startup_is_a_clean_resumable_stop(
    tmp_path: Path, model_config: Path, delay_s: float
) -> None:
    backend = LocalBackend(local_host(), tmp_path / "runs")
    run_dir = backend.run_dir(1)
    args = ["-m", "trainer", "train", *train_flags(model_config, steps=2), "--run-dir", run_dir]
    t0 = time.monotonic()
    pgid = backend.start(run_dir, "node0", args, {})
    if delay_s:
        time.sleep(delay_s)
    os.killpg(pgid, signal.SIGTERM)  # the whole group, as the launcher and a shutting-down host do
    deadline = time.monotonic() + 120
    while backend.state(run_dir, "node0", pgid).alive:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    print(f"\nFIGURES SIGTERM {delay_s * 1000:.0f} ms after the start: exit after {time.monotonic() - t0:.2f} s")
    exit_doc = json.loads((Path(run_dir) / "node0.exit").read_text())
    assert exit_doc["exit_code"] == 75 and exit_doc["signals"] == ["SIGTERM"], exit_doc
    end = _events_file(Path(run_dir))[-1]
    assert end["kind"] == "run_end" and end["status"] == "preempted" and "start-up" in end["reason"]
