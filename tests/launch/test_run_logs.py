"""`gpuplanner runs logs` and a failed run's reason, for runs launched locally and over a real sshd: the
job's output is read from its host, its tail kept in the history (read back when the host is gone), and
``--follow`` tails a live run held at a barrier until it ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import connect
from gpuplanner.history.run_logs import load_log_tail
from gpuplanner.launch.manager import RunManager
from tests.conftest import REPO_ROOT
from tests.launch.conftest import add_slurm_host, add_ssh_host

SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"
HOLD = SCRIPTS / "hold.py"
TALK = SCRIPTS / "talk.py"


def _launch(db_path: Path, host: str, capsys: pytest.CaptureFixture[str], *command: str, follow: bool = True) -> dict:
    flags = [] if follow else ["--no-follow"]
    main(["run", "--db", str(db_path), "--host", host, "--json", *flags, "--", *command])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _logs(db_path: Path, run_id: int, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    code = main(["runs", "logs", "--db", str(db_path), str(run_id), *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_a_failed_ssh_runs_traceback_reaches_runs_logs_and_runs_show(
    db_path: Path, sshd, known_hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts)
    doc = _launch(db_path, "box", capsys, sys.executable, str(HOLD), "--fail")
    run_id = doc["run_id"]
    assert doc["state"] == "failed" and doc["failure"]["error"] == "ValueError: no rows in the data set"

    code, out, _ = _logs(db_path, run_id, capsys, "--stderr")
    assert code == 0
    assert "loading the data\nTraceback (most recent call last):\n" in out
    assert out.rstrip().endswith("ValueError: no rows in the data set")

    assert main(["runs", "show", "--db", str(db_path), str(run_id), "--json"]) == 0
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert failure["error"] == "ValueError: no rows in the data set" and failure["host"] == "box"
    assert "Traceback (most recent call last):" in failure["stderr_tail"]
    assert main(["runs", "show", "--db", str(db_path), str(run_id)]) == 0
    text = capsys.readouterr().out.splitlines()
    failed = next(i for i, line in enumerate(text) if line.startswith("failed (exit "))
    assert text[failed].endswith(": ValueError: no rows in the data set")
    assert text[failed + 1 : failed + 6] == [
        "last 4 lines of stderr:",
        "  loading the data",
        "  Traceback (most recent call last):",
        '    File "hold.py", line 1, in <module>',
        "  ValueError: no rows in the data set",
    ]

    # the host is gone: the tail the history kept is what `runs logs` shows, saying so
    sshd.stop()
    code, out, err = _logs(db_path, run_id, capsys, "--stderr")
    assert code == 0 and "box cannot be reached" in err and "kept in the history" in err
    assert "Traceback (most recent call last):" in out and "ValueError: no rows in the data set" in out


@pytest.mark.slow
def test_a_local_runs_stdout_and_stderr_and_their_history_tails(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate"
    gate.touch()  # open from the start: the run goes through
    doc = _launch(db_path, "local", capsys, sys.executable, str(TALK), str(gate))
    assert doc["state"] == "finished" and "failure" not in doc
    run_id = doc["run_id"]
    code, out, _ = _logs(db_path, run_id, capsys)
    assert code == 0 and out == "talk: before the gate\ntalk: after the gate\n"
    code, out, _ = _logs(db_path, run_id, capsys, "--stderr")
    assert code == 0 and out.endswith("talk: a warning before the gate\ntalk: done\n")
    db = connect(db_path)
    try:
        stored = load_log_tail(db, run_id, 0, "out")
        assert stored is not None and stored.text == "talk: before the gate\ntalk: after the gate\n"
        assert stored.offset == len(stored.data) and not stored.cut
        err = load_log_tail(db, run_id, 0, "err")
        assert err is not None and err.text.endswith("talk: done\n")
    finally:
        db.close()
    # a failed run launched without --json: its exit reason and the last lines of its stderr close the output
    assert main(["run", "--db", str(db_path), "--host", "local", "--", sys.executable, str(HOLD), "--fail"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-6:] == [
        "failed (exit 3): ValueError: no rows in the data set",
        "last 4 lines of stderr:",
        "  loading the data",
        "  Traceback (most recent call last):",
        '    File "hold.py", line 1, in <module>',
        "  ValueError: no rows in the data set",
    ]
    # bad input: one line naming the field
    code, _, err = _logs(db_path, run_id, capsys, "--node", "3")
    assert code == 2 and "--node: run" in err and "Traceback" not in err
    code, _, err = _logs(db_path, 99, capsys)
    assert code == 1 and "no run with id 99" in err


@pytest.mark.slow
def test_follow_tails_a_live_run_until_it_ends(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate"
    doc = _launch(db_path, "local", capsys, sys.executable, str(TALK), str(gate), follow=False)
    run_id = doc["run_id"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    follower = subprocess.Popen(
        [sys.executable, "-m", "gpuplanner", "runs", "logs", "--db", str(db_path), str(run_id), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"talk: before the gate\n"  # the run is held at the gate
        assert follower.poll() is None  # still following
        gate.touch()
        rest, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err.decode()
    assert rest == b"talk: after the gate\n"


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_failed_slurm_jobs_traceback_reaches_runs_logs_and_runs_show(
    db_path: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, partition="debug", time_limit="10")
    doc = _launch(db_path, "cluster", capsys, sys.executable, str(HOLD), "--fail")
    run_id = doc["run_id"]
    assert doc["state"] == "failed" and doc["failure"]["error"] == "ValueError: no rows in the data set"
    code, out, _ = _logs(db_path, run_id, capsys, "--stderr")
    assert code == 0 and "loading the data\nTraceback (most recent call last):\n" in out
    assert main(["runs", "show", "--db", str(db_path), str(run_id), "--json"]) == 0
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert failure["error"] == "ValueError: no rows in the data set" and "Traceback" in failure["stderr_tail"]
    db = connect(db_path)
    try:
        stored = load_log_tail(db, run_id, 0, "err")
        assert stored is not None and "ValueError: no rows in the data set" in stored.text
    finally:
        db.close()


@pytest.mark.slow
def test_follow_goes_on_across_an_automatic_resume(db_path: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id = manager.launch(
            "local", [], command=[sys.executable, str(SCRIPTS / "talk_resumable.py"), str(ready)], auto_resume=True
        )
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        follower = subprocess.Popen(
            [sys.executable, "-m", "gpuplanner", "runs", "logs", "--db", str(db_path), str(run_id), "-f"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline() == b"first start\n"  # the job is held until it is stopped
            manager.simulate_preemption(run_id, resume_after_s=0.2)  # exit 75, then the same run starts again
            rest, err = follower.communicate(timeout=120)
        finally:
            if follower.poll() is None:
                follower.kill()
        assert manager.wait(run_id, 120).state == "finished"
    finally:
        manager.close()
    assert follower.returncode == 0, err.decode()
    assert rest == b"stopped\nresumed\n"
