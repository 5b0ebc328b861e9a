"""The Slurm engine against a real single-node Slurm reached through a real sshd on loopback.

The bundled trainer (a tiny GPT-2 on the CPU) goes through ``sbatch`` into the history, with nothing
lost when the login node cuts the connection, a stop (``scancel --signal=TERM --batch``) and a resume
(a new job on the same run directory) on the way to completion; a requeue (``scontrol requeue``)
resumes from the checkpoint to the same final weights as an uninterrupted run; the time limit's signal
(``--signal=B:TERM@LEAD``) makes it checkpoint and exit 75, and a kill (``scancel``) cancels a job; a job
pending behind another shows its reason; ``hosts probe`` runs on a compute node; a 2-node job's
``torchrun`` rendezvous comes from the ``SLURM_*`` variables.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuplanner.history.db import open_db
from gpuplanner.history.slurm_queue import queue_of
from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import (
    TRAINER_ENV,
    add_slurm_host,
    all_seqs,
    events_file_seqs,
    final_weights,
    rows,
    train_flags,
)
from tests.launch.test_runs import Watch
from trainer import checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def slurm_events(db_path: Path, run_id: int) -> list[dict[str, Any]]:
    """The run's ``slurm_job`` events, oldest first (launcher events count down from seq -1)."""
    found = rows(
        db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'slurm_job' ORDER BY seq DESC", run_id
    )
    return [json.loads(r[0]) for r in found]


def assert_exactly_once(db_path: Path, run_id: int, run_dir: Path) -> None:
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored)))
    assert stored == sorted(set(events_file_seqs(run_dir)))


def test_the_cluster_answers_within_seconds(slurm_cluster: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    hosts = slurm_cluster.run("srun", "--nodes=2", "hostname").stdout.split()
    assert len(hosts) == 2
    out = tmp_path / "wrap.out"
    job = slurm_cluster.run("sbatch", "--parsable", "-o", str(out), "--wrap", "echo wrapped").stdout.strip()
    while "JobState=COMPLETED" not in slurm_cluster.run("scontrol", "show", "job", "-o", job).stdout:
        assert time.monotonic() - t0 < 20
        time.sleep(0.1)
    assert out.read_text() == "wrapped\n"
    assert time.monotonic() - t0 < 20
    # no accounting storage: sacct says so, and spend falls back to scontrol
    assert "accounting storage is disabled" in slurm_cluster.run("sacct", "-j", job, check=False).stderr


# Enough steps (about 6 s of training on one core) that the Stop sent after the first step arrives, over
# SSH and scancel, while the job still trains, however fast the machine is that runs the test.
STOP_TEST_STEPS = 3000
REQUEUE_TEST_STEPS = 1500  # the requeue is a local scontrol call: a shorter margin is enough


def test_sbatch_run_cut_stopped_resumed_to_completion_into_history(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    add_slurm_host(
        db_path,
        "cluster",
        slurm_login,
        trust=known_hosts,
        price=2.0,
        partition="debug",
        gpus_per_node=1,
        time_limit="10",
    )
    watch = Watch()
    manager = RunManager(db_path)
    run_id = manager.launch(
        "cluster",
        train_flags(model_config, steps=STOP_TEST_STEPS),
        env=TRAINER_ENV,
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    watch.until(lambda: len(watch.steps()) >= 1)
    first_step_s = watch.first_step_s
    first_job = manager.status(run_id).pid
    manager.stop(run_id)  # scancel --signal=TERM --batch: the batch shell forwards it, the trainer checkpoints
    status = manager.wait(run_id, 120)
    assert (status.state, status.exit_code) == ("stopped", 75), status
    stopped_at = watch.steps()[-1]
    assert stopped_at < STOP_TEST_STEPS
    manager.resume(run_id)  # a new job on the same run directory
    watch.until(lambda: watch.steps()[-1] > stopped_at, 120)
    assert slurm_login.cut_connections() >= 1  # the login node drops us mid-run
    cut_at = watch.steps()[-1]
    status = manager.wait(run_id, 180)
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1), status
    assert status.reconnects >= 1 and cut_at < STOP_TEST_STEPS
    job_id = status.pid
    assert job_id != first_job
    resumed = [r for r in watch.records if r["kind"] == "run_start"][-1]
    assert resumed["resumed_from_step"] == stopped_at
    run_dir = Path(status.run_dir)
    assert_exactly_once(db_path, run_id, run_dir)
    lost = len(events_file_seqs(run_dir)) - len(all_seqs(db_path, run_id))
    assert lost == 0
    assert watch.steps()[-1] == STOP_TEST_STEPS
    assert rows(db_path, "SELECT status, host, gpu_count FROM runs WHERE id = ?", run_id) == [
        ("finished", "cluster", 1)
    ]
    # the job asked for the GPU and had the time limit and the checkpoint signal
    job = slurm_cluster.run("scontrol", "show", "job", "-o", str(job_id)).stdout
    assert "TresPerNode=gres:gpu:1" in job and "TimeLimit=00:10:00" in job and "JobState=COMPLETED" in job
    script = (run_dir / "node0.sbatch").read_text()
    assert "--signal=B:TERM@120" in script and "--gpus-per-node=1" in script
    events = slurm_events(db_path, run_id)
    assert events[0]["state"] in ("PENDING", "CONFIGURING", "RUNNING") and events[0]["job_id"] == first_job
    ended = [e for e in events if "exit_code" in e]
    assert [(e["job_id"], e["state"], e["exit_code"]) for e in ended] == [
        (first_job, "FAILED", 75),  # the batch script exits with the trainer's 75: Slurm calls that FAILED
        (job_id, "COMPLETED", 0),
    ]
    for final in ended:
        assert final["spend_source"] == "scontrol"  # the test cluster has no accounting storage
        assert final["billed_s"] >= 1 and final["gpus"] == 1
        assert final["spend_usd"] == pytest.approx(final["billed_s"] * 2.0 / 3600)
    print(f"\nFIGURES slurm_launch_to_first_step_s={first_step_s:.1f} records_lost_across_cut={lost}")
    manager.close()


def test_requeue_resumes_from_checkpoint_to_identical_weights(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path, tmp_path: Path
) -> None:
    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, price=1.0, requeue=True)
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    flags = train_flags(model_config, steps=REQUEUE_TEST_STEPS)
    reference = manager.launch("local", flags)  # uninterrupted, alongside
    watch = Watch()
    run_id = manager.launch("cluster", flags, env=TRAINER_ENV, on_records=watch.on_records, on_status=watch.on_status)
    watch.until(lambda: len(watch.steps()) >= 1)
    job_id = manager.status(run_id).pid
    slurm_cluster.run("scontrol", "requeue", str(job_id))
    requeued_at = watch.steps()[-1]
    watch.until(lambda: any(r["kind"] == "preempted" for r in watch.records), 60)
    # Slurm holds a requeued job back for two minutes (pending, reason BeginTime); once the history
    # shows that, an admin releases it
    deadline = time.monotonic() + 60
    while not any(e["state"] == "PENDING" and e["reason"] == "BeginTime" for e in slurm_events(db_path, run_id)):
        assert time.monotonic() < deadline, slurm_events(db_path, run_id)
        time.sleep(0.5)
    slurm_cluster.run("scontrol", "update", f"jobid={job_id}", "StartTime=now")
    status = manager.wait(run_id, 240)
    assert requeued_at < REQUEUE_TEST_STEPS
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 0), status
    assert status.pid == job_id  # the same job ran again: Slurm restarted it, not the launcher
    kinds = [r["kind"] for r in watch.records]
    assert kinds.count("run_start") == 2
    resumed = [r for r in watch.records if r["kind"] == "run_start"][-1]
    assert resumed["resumed_from_step"] >= requeued_at
    assert_exactly_once(db_path, run_id, Path(status.run_dir))
    states = [(e["state"], e["restarts"]) for e in slurm_events(db_path, run_id)]
    assert ("PENDING", 1) in states and ("RUNNING", 1) in states and states[-1] == ("COMPLETED", 1)
    attempts = [json.loads(line) for line in (Path(status.run_dir) / "node0.attempts").read_text().splitlines()]
    assert [(a["restart"], a["exit_code"]) for a in attempts] == [(0, 75), (1, 0)]
    final = slurm_events(db_path, run_id)[-1]
    # no accounting: the first attempt's time from the script's log, the last from scontrol
    assert final["billed_s"] >= attempts[0]["end"] - attempts[0]["start"]
    assert manager.wait(reference, 240).state == "finished"
    a, b = final_weights(Path(status.run_dir)), final_weights(Path(manager.status(reference).run_dir))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    manager.close()


def test_time_limit_signal_checkpoints_exits_75_then_a_kill_cancels(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    # One minute with the signal 5 s before its end. slurmctld checks its timers every 30 s and sends
    # the signal at the first check that finds less than lead + 30 s left: 25 to 55 s into the job,
    # after the first steps (even on a loaded machine) and before the limit.
    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, time_limit="1", signal_lead_s=5)
    watch = Watch()
    manager = RunManager(db_path)
    run_id = manager.launch(
        "cluster",
        train_flags(model_config, steps=100000),
        env=TRAINER_ENV,
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    status = manager.wait(run_id, 120)
    assert status.exit_code == 75 and status.state == "preempted", status
    preempted = [r for r in watch.records if r["kind"] == "preempted"]
    assert preempted and "SIGTERM" in json.dumps(preempted[-1])
    assert watch.steps(), "the signal came before the first step"
    (newest,) = checkpoint.complete(Path(status.run_dir))[:1]
    assert newest.name == checkpoint.step_dir_name(watch.steps()[-1])
    job = slurm_cluster.run("scontrol", "show", "job", "-o", str(status.pid)).stdout
    # ended by the trainer with 75 before the limit (FAILED, as Slurm calls any non-zero exit), or, had
    # the checkpoint taken past the limit, TIMEOUT with the 75 the batch script recorded
    assert ("JobState=FAILED" in job and "ExitCode=75:0" in job) or "JobState=TIMEOUT" in job, job
    assert slurm_events(db_path, run_id)[-1]["exit_code"] == 75
    manager.resume(run_id)  # a new job; cancelled (scancel) as soon as it runs
    second_job = manager.status(run_id).pid
    deadline = time.monotonic() + 60
    while not any(e["job_id"] == second_job and e["state"] == "RUNNING" for e in slurm_events(db_path, run_id)):
        assert time.monotonic() < deadline, slurm_events(db_path, run_id)
        time.sleep(0.2)
    manager.kill(run_id)
    status = manager.wait(run_id, 120)
    assert status.state == "killed", status
    assert "JobState=CANCELLED" in slurm_cluster.run("scontrol", "show", "job", "-o", str(second_job)).stdout
    assert slurm_events(db_path, run_id)[-1]["state"] == "CANCELLED"
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("killed",)]
    manager.close()


def test_probe_runs_on_a_compute_node(
    db_path: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuplanner.cli import main
    from gpuplanner.launch.hosts import get_host

    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, partition="debug", gpus_per_node=1)
    assert main(["hosts", "probe", "cluster", "--db", str(db_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["missing"] == []
    assert result["slurm"]["partition"] == "debug" and result["payload_uploaded"] is True
    assert result["gpus"] == []  # the test cluster's GPU has /dev/null as its device
    assert get_host(db_path, "cluster").gpu_count == 0
    # the probe ran as a job step on the compute node (srun), not on the login node
    jobs = slurm_cluster.run("scontrol", "show", "job", "-o").stdout.splitlines()
    interactive = [j for j in jobs if "BatchFlag=0" in j][-2:]  # srun's own jobs: the module check, the probe
    assert all("TresPerNode=gres:gpu:1" in j for j in interactive)
    assert "Command=" + sys.executable in interactive[0] and "JobName=env" in interactive[1]


def test_pending_job_shows_its_reason_and_a_stop_cancels_it(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    # another job holds every node's GPU, so ours waits in the queue
    nodes = f"--nodes={len(slurm_cluster.node_names)}"
    blocker = slurm_cluster.run(
        "sbatch", "--parsable", nodes, "--gpus-per-node=1", "-o", "/dev/null", "--wrap", "sleep 300"
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while "JobState=RUNNING" not in slurm_cluster.run("scontrol", "show", "job", "-o", blocker).stdout:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, gpus_per_node=1)
        manager = RunManager(db_path)
        run_id = manager.launch("cluster", train_flags(model_config, steps=5), env=TRAINER_ENV)
        deadline = time.monotonic() + 30
        while not any(e["state"] == "PENDING" and e["reason"] for e in slurm_events(db_path, run_id)):
            assert time.monotonic() < deadline, slurm_events(db_path, run_id)
            time.sleep(0.2)
        pending = slurm_events(db_path, run_id)[-1]
        assert pending["reason"] in ("Resources", "Priority") and "queue_wait_s" not in pending
        # Runs shows the job waiting and why (RunStatus.queue), the history how long so far
        live = manager.status(run_id).queue
        assert live is not None and live["pending"] and live["reason"] == pending["reason"]
        assert live["submit_t"] == pending["submit_t"] and time.time() - live["submit_t"] >= 0
        db = open_db(db_path)
        try:
            waited = queue_of(db, run_id)
        finally:
            db.close()
        assert waited is not None and waited["pending"] and waited["reason"] == pending["reason"]
        assert 0 < waited["queue_wait_s"] < 120
        manager.stop(run_id)  # nothing to checkpoint: the job is cancelled, and the run can resume later
        status = manager.wait(run_id, 60)
        assert (status.state, status.exit_code) == ("stopped", 75), status
        final = slurm_events(db_path, run_id)[-1]
        assert final["state"] == "CANCELLED" and final["exit_code"] == 75 and final["billed_s"] == 0
        assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("stopped",)]
        assert all_seqs(db_path, run_id) == []  # the trainer never ran
        manager.close()
    finally:
        slurm_cluster.run("scancel", blocker)


def test_two_node_job_rendezvous_from_slurm_variables(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, nodes=2, price=1.0)
    manager = RunManager(db_path)
    flags = train_flags(model_config, steps=3, checkpoint_every_steps=2)
    run_id = manager.launch("cluster", flags, env={**TRAINER_ENV, "GLOO_SOCKET_IFNAME": "lo"})
    status = manager.wait(run_id, 240)
    assert (status.state, status.exit_code) == ("finished", 0), status
    job = slurm_cluster.run("scontrol", "show", "job", "-o", str(status.pid)).stdout
    assert "NumNodes=2" in job and "NodeList=gp[1-2]" in job
    (detail,) = rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start'", run_id)[0]
    assert json.loads(detail)["world_size"] == 2  # one process on each node, found through SLURM_*
    ckpt = Path(status.run_dir) / "checkpoints" / checkpoint.step_dir_name(2)
    assert (ckpt / "rng-rank0.pt").exists() and (ckpt / "rng-rank1.pt").exists()  # both ranks, one shared disk
    assert rows(db_path, "SELECT gpu_count FROM runs WHERE id = ?", run_id) == [(2,)]
    assert slurm_events(db_path, run_id)[-1]["gpus"] == 2
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored))) and stored
    manager.close()
