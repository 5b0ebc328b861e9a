"""The Slurm engine's pure parts: settings, sbatch options, the batch script, and reading scontrol and
sacct answers (the scontrol line is one the test cluster printed; the sacct lines follow sacct's
``-P`` format, which the test cluster cannot print without accounting storage)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from gpuplanner.launch.slurm_jobs import (
    JobInfo,
    batch_script,
    billed_seconds,
    exit_code_of,
    final_exit_code,
    job_from_sacct,
    job_from_scontrol,
    parse_attempts,
    parse_sacct,
    parse_scontrol,
)
from gpuplanner.launch.slurm_settings import SlurmSettingsError, parse_settings, time_limit_seconds

SCONTROL = (
    "JobId=2 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=(null) "
    "QOS=(null) JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 "
    "ExitCode=0:15 RunTime=00:00:00 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-23T14:09:12 "
    "EligibleTime=2026-11-23T14:11:13 AccrueTime=2026-11-23T14:11:13 StartTime=2026-11-23T14:11:13 "
    "EndTime=2026-11-23T14:12:13 Deadline=N/A SuspendTime=None SecsPreSuspend=0 Partition=debug "
    "AllocNode:Sid=localhost:5241 NodeList=vm NumNodes=1 NumCPUs=1 TRES=cpu=1,node=1,billing=1 "
    "Socks/Node=* Command=/home/me/my job.sh WorkDir=/home/me/run dir StdOut=/home/me/o.txt Power= "
    "TresPerNode=gres:gpu:1"
)
SACCT = (
    "41|REQUEUED|0:15|37|2026-11-23T10:00:00|2026-11-23T10:00:05|2026-11-23T10:00:42|None\n"
    "41|COMPLETED|0:0|120|2026-11-23T10:00:42|2026-11-23T10:02:50|2026-11-23T10:04:50|None\n"
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 5400), ("5:30", 330), ("1:30:00", 5400), ("2-0", 172800), ("1-2:3", 93780), ("1-02:03:04", 93784)],
)
def test_time_limits(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds


def test_settings_are_checked_by_field() -> None:
    for doc, field in [
        ({"partition": "a b"}, "partition"),
        ({"gpus_per_node": -1}, "gpus_per_node"),
        ({"nodes": 0}, "nodes"),
        ({"nodes": "two"}, "nodes"),
        ({"time_limit": "12h"}, "time_limit"),
        ({"container_image": "a b"}, "container_image"),
        ({"gpu_flag": "gpus"}, "gpu_flag"),
        ({"requeue": "yes"}, "requeue"),
        ({"colour": "red"}, "colour"),
        ({"time_limit": "2", "signal_lead_s": 120}, "signal_lead_s"),
    ]:
        with pytest.raises(SlurmSettingsError) as caught:
            parse_settings(doc)
        assert caught.value.field == field
    s = parse_settings({"gpus_per_node": "8", "nodes": 4, "gpu_flag": "gres", "signal_lead_s": 0})
    assert s.sbatch_options() == ["--nodes=4", "--ntasks-per-node=1", "--gres=gpu:8", "--no-requeue"]
    assert (s.processes_per_node, s.gpus_in_job, parse_settings({"nodes": 3}).gpus_in_job) == (8, 32, 3)


def test_scontrol_line_with_spaces_in_values() -> None:
    fields = parse_scontrol(SCONTROL)
    assert fields["Command"] == "/home/me/my job.sh" and fields["WorkDir"] == "/home/me/run dir"
    assert fields["AllocNode:Sid"] == "localhost:5241" and fields["TRES"] == "cpu=1,node=1,billing=1"
    job = job_from_scontrol(2, fields, "+0100")
    assert (job.state, job.reason, job.restarts, job.exit_code, job.active) == ("PENDING", "BeginTime", 1, 143, True)
    assert job.submit_t == datetime(2026, 11, 23, 13, 9, 12, tzinfo=UTC).timestamp()


def test_sacct_attempts_and_billed_time() -> None:
    rows = parse_sacct(SACCT)
    job = job_from_sacct(41, rows, "+0000")
    assert job is not None and (job.state, job.restarts, job.exit_code, job.run_s) == ("COMPLETED", 1, 0, 120.0)
    assert job.source == "sacct" and job_from_sacct(42, rows, "+0000") is None
    assert billed_seconds(job, [], rows) == 157.0  # both attempts
    # without accounting: the earlier attempts the script logged plus scontrol's run time of the last
    attempts = parse_attempts(
        '{"job_id": 41, "restart": 0, "start": 100, "end": 137, "exit_code": 75}\nnot json\n'
        '{"job_id": 40, "restart": 0, "start": 1, "end": 2, "exit_code": 0}\n',
        41,
    )
    assert billed_seconds(JobInfo(41, "COMPLETED", restarts=1, run_s=120.0), attempts, None) == 157.0


def test_exit_codes() -> None:
    assert (exit_code_of("75:0"), exit_code_of("0:9"), exit_code_of("x")) == (75, 137, None)
    done = JobInfo(7, "FAILED", restarts=1, exit_code=1)
    assert final_exit_code(done, [{"restart": 1, "exit_code": 75}]) == 75
    assert final_exit_code(done, [{"restart": 0, "exit_code": 75}]) == 1  # an earlier attempt's code is not the end
    assert final_exit_code(JobInfo(7, "TIMEOUT", exit_code=0), []) is None  # killed at the limit with no trace
    assert final_exit_code(JobInfo(7, "CANCELLED", exit_code=0), []) is None  # never "finished"


def _script(**settings: object) -> str:
    return batch_script(
        run_dir="/shared/runs/5",
        tag="node0",
        python="python3",
        wrapper="/shared/payload/w.py",
        command=[
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            "-m",
            "trainer",
            "train",
            "--x",
            "a b",
        ],
        env={"PYTHONPATH": "/shared/payload", "LABEL": "it's"},
        settings=parse_settings(settings),
        mounts=["/shared"],
    )


def test_batch_scripts_are_valid_bash_for_every_layout() -> None:
    one = _script()
    assert "setsid python3 /shared/payload/w.py /shared/runs/5 node0 -- python3 -m trainer train --x 'a b'" in one
    assert "export LABEL='it'\"'\"'s'" in one and "srun" not in one
    gpus = _script(gpus_per_node=4)
    assert "python3 -m torch.distributed.run --standalone --nproc-per-node 4 -m trainer train" in gpus
    multi = _script(gpus_per_node=8, nodes=2, container_image="nvcr.io#nvidia/pytorch:24.05-py3")
    assert "srun --nodes 2 --ntasks-per-node 1 --kill-on-bad-exit=1 '--container-image=nvcr.io#nvidia" in multi
    assert "--container-mounts=/shared:/shared" in multi
    assert '--node-rank "$SLURM_NODEID"' in multi and 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in multi
    for script in (one, gpus, multi):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_batch_script_of_a_user_command_runs_the_monitor_on_every_node() -> None:
    """A user's command under the monitor (``-m trainer exec``): the command lays out its own processes,
    so no torchrun is added; on several nodes srun starts one monitor per node."""
    monitor = ["-m", "trainer", "exec", "--run-dir", "/shared/runs/5", "--gpus", "4", "--", "torchrun", "train.py"]
    for settings in ({"gpus_per_node": 4}, {"gpus_per_node": 4, "nodes": 2}):
        script = batch_script(
            run_dir="/shared/runs/5",
            tag="node0",
            python="python3",
            wrapper="/shared/payload/w.py",
            command=monitor,
            env={"PYTHONPATH": "/shared/payload"},
            settings=parse_settings(settings),
        )
        node = "python3 -m trainer exec --run-dir /shared/runs/5 --gpus 4 -- torchrun train.py"
        assert node in script and "torch.distributed.run" not in script
        assert ("srun --nodes 2" in script) == (settings.get("nodes") == 2)
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize(
    "hostile",
    [
        "/shared/runs/5\ntouch {marker}\n",
        "/shared/runs/5\r\ntouch {marker}\n#SBATCH --wrap=x",
        "/shared/runs/5\x0btouch {marker}",
    ],
)
def test_a_run_root_with_a_newline_runs_nothing(hostile: str, tmp_path: pytest.TempPathFactory) -> None:
    """A remote root containing a newline once went raw into the script's comment line, so the next line ran
    on the cluster (issue 27 item 5). The script is run by bash here: it must stop at its ``cd`` (the folder
    does not exist) without running the injected line, and sbatch must find no option line in it."""
    marker = f"{tmp_path}/injected"
    run_dir = hostile.format(marker=marker)
    script = batch_script(
        run_dir=run_dir,
        tag="node0",
        python="python3",
        wrapper="/shared/payload/w.py",
        command=["-m", "trainer", "train"],
        env={},
        settings=parse_settings({}),
    )
    lines = script.split("\n")
    assert lines[1].startswith("# GPU Planner: node0 of /shared/runs/5\\x") and "touch" in lines[1]
    header = lines[: next(i for i, line in enumerate(lines) if line and not line.startswith("#"))]
    assert len(header) == 2 and not any(line.startswith("#SBATCH") for line in header)  # sbatch reads only these
    done = subprocess.run(["bash", "-s"], input=script, text=True, capture_output=True, cwd=tmp_path)
    assert done.returncode == 1  # `cd` failed: nothing after it ran
    assert not (tmp_path / "injected").exists()
