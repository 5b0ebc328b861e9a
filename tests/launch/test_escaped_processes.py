"""Processes that leave the job's process group (issue 27 item 7): a grandchild started in a session of its own
(``start_new_session``, as ``setsid`` does) must not outlive the job, whether the job ends by itself, by
`run kill` or by its budget. The job writes the grandchild's pid; each test waits for the run's end and then
for the pid to be gone (the wrapper stops what the job left before it exits; a kill signals it directly)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import TRAINER_ENV, add_ssh_host, rows

pytestmark = pytest.mark.slow

JOB = """
import subprocess, sys, time
# "capped": the grandchild notes a SIGTERM in PID_FILE.term and sleeps on (only a SIGKILL ends it)
code = "import time; time.sleep(600)"
if sys.argv[2] == "capped":
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1], 'a').write('SIGTERM')); time.sleep(600)"
grandchild = subprocess.Popen(
    [sys.executable, "-c", code, sys.argv[1] + ".term"], start_new_session=True,
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(str(grandchild.pid))
import os
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
if sys.argv[2] in ("wait", "capped"):
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie is dead; its parent (or init) collects it


def wait_for(predicate, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def launch(manager: RunManager, tmp_path: Path, mode: str, host: str = "local", **extra: object) -> tuple[int, Path]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    pid_file = tmp_path / f"grandchild-{mode}.pid"
    run_id = manager.launch(
        host, [], command=[sys.executable, str(script), str(pid_file), mode], env=TRAINER_ENV, **extra
    )
    return run_id, pid_file


def grandchild(pid_file: Path) -> int:
    wait_for(pid_file.exists, "the job to write its grandchild's pid")
    pid = int(pid_file.read_text())
    assert pid > 0
    return pid


def test_a_normal_exit_leaves_nothing_running(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id, pid_file = launch(manager, tmp_path, "exit")
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert (status.state, status.exit_code) == ("finished", 0)
    pid = grandchild(pid_file)
    assert not alive(pid), "the job's escaped grandchild outlived the job"


def test_run_kill_reaches_the_escaped_grandchild(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id, pid_file = launch(manager, tmp_path, "wait")
        pid = grandchild(pid_file)
        assert alive(pid)
        manager.kill(run_id)
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert status.state == "killed"
    wait_for(lambda: not alive(pid), "the escaped grandchild to die of the kill")  # SIGKILL: delivered, not instant


def test_a_budget_stop_leaves_nothing_running(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id, pid_file = launch(manager, tmp_path, "capped", price_usd_per_gpu_hour=3600.0, budget_usd=3.0)
        pid = grandchild(pid_file)
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("budget_stop",)], status
    assert not alive(pid), "the job's escaped grandchild outlived the budget stop"
    # past the cap it got no grace period: SIGKILL at once, not a SIGTERM and 5 s more (it would have noted one)
    assert not Path(f"{pid_file}.term").exists()


def test_run_kill_over_ssh_reaches_the_escaped_grandchild(
    db_path: Path, tmp_path: Path, sshd: object, known_hosts: Path
) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts)  # type: ignore[arg-type]
    manager = RunManager(db_path)
    try:
        run_id, pid_file = launch(manager, tmp_path, "wait", host="box")
        pid = grandchild(pid_file)  # the sshd is this machine: the pid is one of ours
        assert alive(pid)
        manager.kill(run_id)
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert status.state == "killed"
    wait_for(lambda: not alive(pid), "the escaped grandchild to die of the kill")
