"""A user's stop through RunManager and through ``gpuplanner run stop`` is recorded as ``stopped`` (not a
preemption, not an interruption), also when another process watches the run; a preemption (simulated,
or SIGTERM from the host) stays ``preempted``; a resume after a stop says so; a failed run launched by the
CLI keeps its stderr tail exactly as one launched through the window's controller.

The command is the protocol fake (``tests/protocol_fake.py``) under the payload's monitor: its first start
holds after step 1 until it is signalled, so every stop lands at a known point (its barrier reached), never
by timing; SIGTERM checkpoints step 1 and exits 75, and a resumed start goes on from step 2 to the end.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuplanner.cli import main
from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import connect
from gpuplanner.launch.manager import RunManager
from tests import protocol_fake as fake
from tests.launch.conftest import TRAINER_ENV, rows

pytestmark = pytest.mark.slow  # real processes under the monitor (about 3 s each)
STEPS = 3


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def summary(db_path: Path, run_id: int) -> Any:
    db = connect(db_path)
    try:
        return summarize(db, run_id, with_alerts=False)
    finally:
        db.close()


def trainer_kinds(db_path: Path, run_id: int) -> list[str]:
    return [r[0] for r in rows(db_path, "SELECT kind FROM events WHERE run_id = ? AND seq >= 0 ORDER BY seq", run_id)]


def launcher(db_path: Path, run_id: int, kind: str) -> list[dict[str, Any]]:
    return [
        json.loads(r[0])
        for r in rows(
            db_path,
            "SELECT detail_json FROM events WHERE run_id = ? AND seq < 0 AND kind = ? ORDER BY seq DESC",
            run_id,
            kind,
        )
    ]


def hold(manager: RunManager, barriers: Path, **kwargs: Any) -> int:
    """The fake, holding after step 1 (barrier ``step-1`` in ``barriers``) until it is stopped."""
    command = fake.command("--steps", str(STEPS), "--hold-at-step", "1", "--barrier-dir", str(barriers))
    return manager.launch("local", [], command=command, env=TRAINER_ENV, **kwargs)


def held(barriers: Path) -> Callable[[], bool]:
    return lambda: fake.Barriers(barriers).reached("step-1")


def test_stop_through_the_manager_is_stopped_and_its_resume_says_so(db_path: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id = hold(manager, ready, auto_resume=True)  # a stop is never resumed automatically
        wait_for(held(ready), "the command to hold")
        manager.stop(run_id, by="window")
        status = manager.wait(run_id, 60)
        assert (status.state, status.exit_code, status.restarts) == ("stopped", 75, 0)
        assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("stopped",)]
        assert "preempted" not in trainer_kinds(db_path, run_id) and "stopped" in trainer_kinds(db_path, run_id)
        assert [s["by"] for s in launcher(db_path, run_id, "user_stop")] == ["window"]
        assert summary(db_path, run_id).interruptions == 0

        manager.resume(run_id)
        status = manager.wait(run_id, 60)
        assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1)
        assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == [
            1,
            2,
            3,
        ]
        [restart] = launcher(db_path, run_id, "restart")
        assert restart["after"] == "stopped" and restart["reason"] == "resumed by the user"
        done = summary(db_path, run_id)
        assert (done.status, done.interruptions, done.interruption_hours) == ("finished", 0, 0.0)
        assert "preempted" not in trainer_kinds(db_path, run_id)
    finally:
        manager.close()


def test_stop_through_the_cli_while_another_process_watches(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready = tmp_path / "ready"
    watcher = RunManager(db_path, local_runs_root=tmp_path / "runs")  # the window, following the run
    try:
        run_id = hold(watcher, ready, auto_resume=True)
        wait_for(held(ready), "the command to hold")
        assert main(["run", "stop", str(run_id), "--db", str(db_path), "--json"]) == 75
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["state"] == "stopped"
        status = watcher.wait(run_id, 60)
        assert (status.state, status.restarts) == ("stopped", 0)  # the window's watcher did not restart it
    finally:
        watcher.close()
    assert [s["by"] for s in launcher(db_path, run_id, "user_stop")] == ["cli"]
    assert main(["runs", "show", str(run_id), "--db", str(db_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["status"], shown["interruptions"]) == ("stopped", 0)
    assert main(["runs", "list", "--db", str(db_path), "--status", "stopped", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [run_id]


def test_a_preemption_stays_a_preemption(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        simulated = hold(manager, tmp_path / "a")
        wait_for(held(tmp_path / "a"), "the command to hold")
        manager.simulate_preemption(simulated, resume_after_s=0.0)
        status = manager.wait(simulated, 60)
        assert (status.state, status.restarts) == ("finished", 1)
        assert "preempted" in trainer_kinds(db_path, simulated) and "stopped" not in trainer_kinds(db_path, simulated)
        assert summary(db_path, simulated).interruptions == 1
        assert "after" not in launcher(db_path, simulated, "restart")[0]

        by_host = hold(manager, tmp_path / "b")  # SIGTERM from the host (a spot notice, Slurm), not from us
        wait_for(held(tmp_path / "b"), "the command to hold")
        os.killpg(manager.status(by_host).pid, signal.SIGTERM)
        status = manager.wait(by_host, 60)
        assert (status.state, status.exit_code) == ("preempted", 75)
        assert rows(db_path, "SELECT status FROM runs WHERE id = ?", by_host) == [("preempted",)]
        assert summary(db_path, by_host).interruptions == 1
    finally:
        manager.close()


def test_a_stop_after_the_run_ended_leaves_it_ended(db_path: Path, tmp_path: Path) -> None:
    """A search prunes a trial whose run finished a moment before (the fake's steps take microseconds): the
    run stays finished instead of waiting in ``stopping`` for ever, and no user stop is recorded."""
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id = manager.launch("local", [], command=fake.command("--steps", "3"), env=TRAINER_ENV)
        assert manager.wait(run_id, 60).state == "finished"
        manager.stop(run_id, by="sweep", reason="pruned")
        assert manager.status(run_id).state == "finished"
        assert manager.wait(run_id, 5).state == "finished"
    finally:
        manager.close()
    assert launcher(db_path, run_id, "user_stop") == []
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("finished",)]
