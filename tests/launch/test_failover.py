"""Supervised runs: failover to a fallback host from the checkpoint mirror, and a lost process restarted.

Host A and host B are two sshd (127.0.0.2, 127.0.0.3) with separate remote roots ("disks"). The run
starts on A with ``--mirror-url``; A's trainer holds at a barrier after the step of its first checkpoint
(``trainer/hold.py``), and once that checkpoint is in the mirror it is frozen (SIGSTOP: a partition, the
process is still there) and A's sshd stopped, so A stops answering. After ``failover_after_s`` the run
resumes on B from the mirror and finishes. When A answers again, the process left there is killed. The
barrier makes the order certain however loaded the machine is (A can never finish first), so the run is
as short as the proof allows: one checkpoint on A, a few steps on B.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from gpuplanner.launch.local_backend import _pid_alive
from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import add_ssh_host, all_seqs, rows, train_flags
from tests.launch.test_runs import Watch
from tests.protocol_fake import Barriers
from trainer import checkpoint, hold

pytestmark = pytest.mark.slow


def _events(db_path: Path, run_id: int, kind: str) -> list[dict]:
    return [
        json.loads(d)
        for (d,) in rows(
            db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = ? ORDER BY t", run_id, kind
        )
    ]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_unreachable_host_fails_over_to_fallback_from_mirror(
    db_path: Path, model_config: Path, sshd_pair, known_hosts: Path, tmp_path: Path
) -> None:
    a, b = sshd_pair
    add_ssh_host(db_path, "host-a", a, trust=known_hosts, remote_root=str(tmp_path / "disk-a"))
    add_ssh_host(db_path, "host-b", b, trust=known_hosts, remote_root=str(tmp_path / "disk-b"))
    mirror = tmp_path / "mirror"
    barriers = Barriers(tmp_path / "barriers")
    held, steps = 4, 8  # A checkpoints at step 4 and holds there; B resumes from it and trains steps 5-8
    manager = RunManager(db_path, failover_after_s=2.0)
    watch = Watch()
    flags = train_flags(model_config, steps=steps, checkpoint_every_steps=held, mirror_url=mirror)
    run_id = manager.launch(
        "host-a",
        flags,
        auto_resume=True,
        fallback_hosts=["host-b"],
        max_restarts=2,
        on_records=watch.on_records,
        on_status=watch.on_status,
        # B gets the same environment: resumed at step 4, it trains past the barrier without holding
        env={hold.STEPS_ENV: str(held), hold.DIR_ENV: str(barriers.folder)},
    )
    dir_a = tmp_path / "disk-a" / "runs" / str(run_id)
    barriers.wait(f"step-{held}", 120)  # the timeout only ends a test whose trainer died
    mirrored = mirror / checkpoint.step_dir_name(held)
    _wait(mirrored.is_dir, 120, "the step-4 checkpoint in the mirror")  # pushed in the background, renamed whole
    watch.until(lambda: held in watch.steps(), 120)  # A's records up to the barrier are in the history
    pid_doc = json.loads((dir_a / "node0.pid").read_text())
    os.killpg(pid_doc["pgid"], signal.SIGSTOP)  # host A "gone": no progress, no answer
    a.stop()
    t_cut = time.monotonic()
    watch.until(lambda: "resuming" in watch.states, 120)
    a.start(port=a.port)  # host A answers again: the process left there must be stopped
    status = manager.wait(run_id, 240)
    assert (status.state, status.exit_code, status.host) == ("finished", 0, "host-b"), status
    assert status.run_dir == str(tmp_path / "disk-b" / "runs" / str(run_id))

    (restart,) = _events(db_path, run_id, "restart")
    assert (restart["from_host"], restart["to_host"]) == ("host-a", "host-b")
    assert restart["reason"] == "host host-a unreachable" and 2.0 <= restart["cost_s"] < time.monotonic() - t_cut + 1
    resumed = [r for r in watch.records if r["kind"] == "resumed"]
    assert resumed and resumed[-1]["step"] == held  # from the mirror, not from scratch
    assert watch.steps()[-1] == steps
    assert sorted(set(watch.steps())) == list(range(1, steps + 1))  # no step lost across the hosts
    stored = all_seqs(db_path, run_id)
    assert stored == sorted(set(stored)), "duplicate seq"
    assert stored == list(range(stored[0], stored[0] + len(stored))), "gap in seq across the hosts"
    assert (tmp_path / "disk-b" / "runs" / str(run_id) / "final" / "model.safetensors").exists()
    assert not (dir_a / "final").exists()

    _wait(lambda: bool(_events(db_path, run_id, "orphan_stopped")), 60, "the old process to be stopped")
    _wait(lambda: not _pid_alive(pid_doc["child_pid"]) and not _pid_alive(pid_doc["pid"]), 30, "the old process")
    assert _events(db_path, run_id, "orphan_stopped")[0]["host"] == "host-a"
    manager.close()


def test_lost_process_is_restarted_with_resume(db_path: Path, model_config: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    watch = Watch()
    barriers = Barriers(tmp_path / "barriers")
    held, steps = 4, 8  # killed while it holds after its step-4 checkpoint; the restart trains steps 5-8
    flags = train_flags(model_config, steps=steps, checkpoint_every_steps=held)
    run_id = manager.launch(
        "local",
        flags,
        auto_resume=True,
        max_restarts=2,
        on_records=watch.on_records,
        on_status=watch.on_status,
        env={hold.STEPS_ENV: str(held), hold.DIR_ENV: str(barriers.folder)},
    )
    barriers.wait(f"step-{held}", 120)  # the timeout only ends a test whose trainer died
    watch.until(lambda: any(r["kind"] == "checkpoint" for r in watch.records), 120)
    status = manager.status(run_id)
    os.killpg(status.pid, signal.SIGKILL)  # trainer and wrapper: no exit code is written
    status = manager.wait(run_id, 240)
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1), status
    (restart,) = _events(db_path, run_id, "restart")
    assert restart["reason"] == "process lost" and restart["from_host"] == restart["to_host"] == "local"
    assert restart["cost_s"] >= 2.0  # the first backoff
    resumed = [r for r in watch.records if r["kind"] == "resumed"]
    assert resumed and resumed[0]["step"] == held
    assert watch.steps()[-1] == steps
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored)))
    manager.close()
