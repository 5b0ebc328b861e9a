"""Real runs of the tiny CPU model: locally and over a real sshd, streamed into a real SQLite history."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuplanner.cli import main
from gpuplanner.launch.manager import RunManager, RunStatus
from tests.launch.conftest import (
    TRAINER_ENV,
    add_ssh_host,
    all_seqs,
    events_file_seqs,
    final_weights,
    rows,
    train_flags,
)
from tests.protocol_fake import Barriers
from trainer import hold

pytestmark = pytest.mark.slow
FIGURES: dict[str, float] = {}
STEPS = 8  # each run holds at a barrier after an early step (trainer/hold.py) instead of training long to be caught


def holding_at(step: int, barriers: Barriers) -> dict[str, str]:
    """The environment that makes the trainer hold after ``step`` until ``barriers`` releases it (or a stop)."""
    return {hold.STEPS_ENV: str(step), hold.DIR_ENV: str(barriers.folder)}


class Watch:
    """Collects callbacks; ``until`` waits for a condition on what arrived."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.records: list[dict[str, Any]] = []
        self.states: list[str] = []
        self.first_step_s: float | None = None
        self.cond = threading.Condition()

    def on_records(self, run_id: int, records: list[dict[str, Any]]) -> None:
        with self.cond:
            self.records.extend(records)
            if self.first_step_s is None and any(r["kind"] == "step" for r in records):
                self.first_step_s = time.monotonic() - self.t0
            self.cond.notify_all()

    def on_status(self, status: RunStatus) -> None:
        with self.cond:
            self.states.append(status.state)
            self.cond.notify_all()

    def steps(self) -> list[int]:
        return [r["step"] for r in self.records if r["kind"] == "step"]

    def until(self, predicate: Callable[[], bool], timeout: float = 120) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), f"timed out; states {self.states}"


def assert_exactly_once(db_path: Path, run_id: int, events_files: list[Path]) -> list[int]:
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored))), "gap or duplicate seq in the history"
    in_files = sorted(set().union(*(events_file_seqs(f) for f in events_files)))
    assert stored == in_files
    return stored


def test_local_launch_stream_stop_resume(db_path: Path, model_config: Path, tmp_path: Path) -> None:
    watch = Watch()
    barriers = Barriers(tmp_path / "barriers")
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch(
        "local",
        train_flags(model_config, steps=STEPS),
        name="local run",
        env=holding_at(3, barriers),
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    barriers.wait("step-3")  # the trainer holds after step 3: the stop lands mid-run, whatever the machine's load
    watch.until(lambda: len(watch.steps()) >= 3)
    FIGURES["local_launch_to_first_step_s"] = watch.first_step_s or 0
    manager.stop(run_id)
    status = manager.wait(run_id, 120)
    assert (status.state, status.exit_code) == ("stopped", 75)
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("stopped",)]
    stopped_at = watch.steps()[-1]
    assert 3 <= stopped_at < STEPS  # the stop ends the hold; the trainer stops at its next step boundary
    manager.resume(run_id)
    status = manager.wait(run_id, 120)
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1)
    resumed = [r for r in watch.records if r["kind"] == "run_start"][-1]
    assert resumed["resumed_from_step"] == stopped_at and watch.steps()[-1] == STEPS
    run_dir = Path(status.run_dir)
    stored = assert_exactly_once(db_path, run_id, [run_dir])
    assert [r["seq"] for r in watch.records] == stored  # the callbacks saw each record once, in order
    row = rows(db_path, "SELECT status, host, name, launch_json FROM runs WHERE id = ?", run_id)[0]
    assert row[:3] == ("finished", "local", "local run")
    launch = json.loads(row[3])["launch"]
    assert launch["nodes"][0]["pgid"] == status.pid and launch["restarts"] == 1
    manager.close()


def test_attach_after_detach_catches_up(db_path: Path, model_config: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", train_flags(model_config, steps=12))
    manager.close()  # the app quits; the run goes on
    assert manager.live_runs() == []
    watch = Watch()
    again = RunManager(db_path, local_runs_root=tmp_path / "runs")
    again.attach(run_id, watch.on_records, watch.on_status)
    status = again.wait(run_id, 120)
    assert status.state == "finished" and status.exit_code == 0
    assert_exactly_once(db_path, run_id, [Path(status.run_dir)])
    assert watch.steps()[-1] == 12
    again.close()


def test_ssh_launch_cut_reconnect_no_gap(
    db_path: Path, model_config: Path, sshd, known_hosts: Path, tmp_path: Path
) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts, price_usd_per_gpu_hour=3.0, pricing="spot")
    watch = Watch()
    barriers = Barriers(tmp_path / "barriers")
    manager = RunManager(db_path)
    run_id = manager.launch(
        "box",
        train_flags(model_config, steps=STEPS),
        env={**TRAINER_ENV, **holding_at(2, barriers)},
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    barriers.wait("step-2")  # the trainer holds after step 2: the cut lands mid-run
    watch.until(lambda: len(watch.steps()) >= 1)
    FIGURES["ssh_launch_to_first_step_s"] = watch.first_step_s or 0
    assert sshd.cut_connections() >= 1
    barriers.release("step-2")
    status = manager.wait(run_id, 180)
    assert (status.state, status.exit_code) == ("finished", 0)
    assert status.reconnects >= 1 and status.last_reconnect_s is not None
    assert watch.steps()[-1] == STEPS
    FIGURES["ssh_reconnect_s"] = status.last_reconnect_s
    stored = assert_exactly_once(db_path, run_id, [Path(status.run_dir)])
    FIGURES["records_lost"] = len(events_file_seqs(Path(status.run_dir))) - len(stored)
    assert FIGURES["records_lost"] == 0
    row = rows(db_path, "SELECT host, price_usd_per_gpu_hour, pricing, status FROM runs WHERE id = ?", run_id)[0]
    assert row == ("box", 3.0, "spot", "finished")
    spend = [r["spend_usd"] for r in watch.records if r["kind"] == "step"]
    assert spend[-1] > 0
    manager.close()
    print("\nFIGURES", json.dumps(FIGURES))


def test_simulated_preemption_resumes_to_identical_weights(
    db_path: Path, model_config: Path, sshd, known_hosts: Path, tmp_path: Path
) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts)
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    barriers = Barriers(tmp_path / "barriers")
    flags = train_flags(model_config, steps=STEPS)
    reference = manager.launch("local", flags)  # uninterrupted, alongside
    watch = Watch()
    # the preempted run holds after step 2 until the preemption's SIGTERM ends the hold: it lands mid-run
    env = {**TRAINER_ENV, **holding_at(2, barriers)}
    run_id = manager.launch("box", flags, env=env, on_records=watch.on_records, on_status=watch.on_status)
    barriers.wait("step-2")
    watch.until(lambda: len(watch.steps()) >= 2)
    manager.simulate_preemption(run_id, resume_after_s=0.5)
    status = manager.wait(run_id, 180)
    preempted_at = [r for r in watch.records if r["kind"] == "run_start"][-1]["resumed_from_step"]
    assert 2 <= preempted_at < STEPS and watch.steps()[-1] == STEPS  # preempted mid-run, then to the end
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1)
    assert "preempted" in watch.states and "resuming" in watch.states
    assert manager.wait(reference, 180).state == "finished"
    assert_exactly_once(db_path, run_id, [Path(status.run_dir)])
    kinds = [r["kind"] for r in watch.records]
    assert "preempted" in kinds and kinds.count("run_start") == 2
    (detail,) = rows(
        db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'restart' AND seq < 0", run_id
    )
    assert json.loads(detail[0])["cost_s"] >= 0.5
    a, b = final_weights(Path(status.run_dir)), final_weights(Path(manager.status(reference).run_dir))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    manager.close()


HOSTILE = "we ird'\"; $(touch MARKER) `touch MARKER2` &&\nx"


def test_hostile_names_run_nothing_but_the_trainer(
    db_path: Path, model_config: Path, sshd, known_hosts: Path, tmp_path: Path
) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts)
    folder = tmp_path / HOSTILE
    folder.mkdir()
    config = folder / f"cfg {HOSTILE}.json"
    config.write_text(model_config.read_text())
    data = folder / f"data {HOSTILE}.txt"
    data.write_text((Path(__file__).parents[1] / "data" / "corpus" / "notes.txt").read_text())
    manager = RunManager(db_path)
    flags = train_flags(config, steps=3, data=data)
    run_id = manager.launch("box", flags, name=HOSTILE, env={**TRAINER_ENV, "RUN_LABEL": HOSTILE})
    status = manager.wait(run_id, 120)
    assert status.state == "finished", status
    pid_doc = json.loads((Path(status.run_dir) / "node0.pid").read_text())
    assert pid_doc["command"][1:] == ["-m", "trainer", "train", *flags, "--run-dir", status.run_dir]
    for where in (Path.cwd(), Path.home(), tmp_path, folder, Path("/root"), Path(status.run_dir)):
        assert not (where / "MARKER").exists() and not (where / "MARKER2").exists(), where
    assert rows(db_path, "SELECT name FROM runs WHERE id = ?", run_id) == [(HOSTILE,)]
    manager.close()


def test_cli_run_follow_and_control(db_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["run", "--db", str(db_path), "--host", "local", "--json", "--", *train_flags(model_config, steps=4)]) == 0
    )
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["state"] == "finished" and doc["exit_code"] == 0 and doc["last_seq"] >= 4
    assert main(["run", "attach", str(doc["run_id"]), "--db", str(db_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["state"] == "finished"
    assert main(["run", "resume", str(doc["run_id"]), "--db", str(db_path)]) == 1  # finished: nothing to resume
    assert main(["run", "--db", str(db_path), "--host", "nowhere", "--", "--max-steps", "1"]) == 2
    assert main(["run", "--db", str(db_path), "--host", "local", "--", "--run-dir", "x"]) == 2
    assert main(["run", "stop", "x", "--db", str(db_path)]) == 2
