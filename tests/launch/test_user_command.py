"""A user's own command launched through the RunManager and the CLI, locally and over a real sshd:
step records from ``gpuplanner_telemetry`` (plain API and the HF ``Trainer`` callback), simulated GPU
samples, spend, planned-against-actual, calibration, budget stops and auto-resume after exit 75."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.analytics import summarize
from gpuplanner.history.calibration import lookup
from gpuplanner.history.db import connect, open_db
from gpuplanner.history.plans import save_plan
from gpuplanner.launch.hosts import get_host, update_host
from gpuplanner.launch.manager import RunManager
from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from tests.launch.conftest import TRAINER_ENV, add_ssh_host, all_seqs, events_file_seqs, rows
from tests.launch.test_runs import Watch

pytestmark = pytest.mark.slow
SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"
PLAIN = str(SCRIPTS / "plain_loop.py")
HF = str(SCRIPTS / "hf_trainer.py")
FIGURES: dict[str, float] = {}
GPU = "A100-80GB"


def make_plan(db_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    """A real plan (``gpuplanner plan --json``) of the tiny model the test script trains, saved in the history."""
    args = ["plan", "--params", "100000", "--method", "full", "--gpu", GPU, "--seq-len", "32", "--micro-batch", "16"]
    args += [
        "--grad-accum",
        "1",
        "--tokens",
        "20480",
        "--precision",
        "fp32",
        "--price",
        "36",
        "--json",
        "--no-calibration",
    ]
    capsys.readouterr()
    assert main(args) == 0
    document = json.loads(capsys.readouterr().out)
    with open_db(db_path) as db:
        return save_plan(db, "tiny plan", document), document


def history_of(db_path: Path, run_id: int) -> dict:
    db = connect(db_path)
    try:
        return summarize(db, run_id).as_dict()
    finally:
        db.close()


def assert_in_history(db_path: Path, run_id: int, steps: int) -> None:
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored))), "gap or duplicate seq in the history"
    assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == list(
        range(1, steps + 1)
    )
    simulated = rows(db_path, "SELECT COUNT(*), MIN(simulated) FROM gpu_samples WHERE run_id = ?", run_id)[0]
    assert simulated[0] >= 1 and simulated[1] == 1  # GPU samples, labelled simulated
    spend = rows(db_path, "SELECT MAX(spend_usd) FROM steps WHERE run_id = ?", run_id)[0][0]
    assert spend > 0


def test_local_plain_script_reaches_history_plan_and_calibration(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_db(db_path).close()
    update_host(db_path, replace(get_host(db_path, "local"), gpu_type=GPU))  # what the plan is for
    plan_id, plan = make_plan(db_path, capsys)
    watch = Watch()
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch(
        "local",
        [],
        command=[sys.executable, "plain_loop.py", "--steps", "40"],
        workdir=str(SCRIPTS),
        plan_id=plan_id,
        price_usd_per_gpu_hour=36.0,
        env=TRAINER_ENV,
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    status = manager.wait(run_id, 240)
    manager.close()
    assert (status.state, status.exit_code) == ("finished", 0)
    assert_in_history(db_path, run_id, 40)
    assert len(rows(db_path, "SELECT step FROM evals WHERE run_id = ?", run_id)) == 4
    model = plan["inputs"]["model"]
    row = rows(db_path, "SELECT status, model_name, gpu_type, config_json FROM runs WHERE id = ?", run_id)[0]
    assert row[:3] == ("finished", model, GPU)
    config = json.loads(row[3])
    assert config["command"][1] == "plain_loop.py" and config["seq_len"] == 32 and config["precision"] == "fp32"
    summary = history_of(db_path, run_id)
    assert summary["cost_usd"] > 0
    planned = summary["planned"]["tokens_per_s"]
    assert planned["planned"] == pytest.approx(plan["throughput"]["tokens_per_s"])
    assert planned["actual"] > 0 and planned["diff_pct"] is not None
    # The run knows what it trained (GPU, model, length, arithmetic), but this CPU-only machine's GPU
    # samples are simulated: its speed is no A100's, so it does not calibrate, and says why (issue 30.4).
    db = connect(db_path)
    try:
        cal = lookup(db, GPU, model, seq_len=32, precision="fp32")
    finally:
        db.close()
    assert cal is None
    assert summary["calibration"]["reason"] == "simulated" and summary["planned"]["hardware"]["comparable"] is False
    assert (tmp_path / "runs" / str(run_id) / "final.pt").exists()


def test_ssh_plain_and_hf_trainer_scripts(db_path: Path, sshd, known_hosts: Path, tmp_path: Path) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts, price_usd_per_gpu_hour=3.0)
    manager = RunManager(db_path)
    watch = Watch()
    plain = manager.launch(
        "box",
        [],
        command=[sys.executable, PLAIN, "--steps", "30", "--step-sleep", "0.2"],
        env=TRAINER_ENV,
        on_records=watch.on_records,
    )
    watch.until(lambda: watch.first_step_s is not None, 180)
    FIGURES["ssh_user_command_launch_to_first_step_s"] = watch.first_step_s or 0
    assert sshd.cut_connections() >= 1  # the host drops us mid-run: nothing is lost
    cut_at = watch.steps()[-1]
    # launched at once on the cut connection, which looks alive until paramiko reads the reset: the launch
    # reconnects (a session that could not open never ran its command) instead of failing
    hf = manager.launch("box", [], command=[sys.executable, HF, "--steps", "6"], env=TRAINER_ENV)
    statuses = {run_id: manager.wait(run_id, 300) for run_id in (plain, hf)}
    manager.close()
    for run_id, status in statuses.items():
        assert (status.state, status.exit_code) == ("finished", 0), (run_id, status)
        assert status.run_dir.startswith(str(tmp_path / "remote"))
    assert cut_at < 30  # cut while the first run was training
    assert_in_history(db_path, plain, 30)
    in_file = events_file_seqs(Path(statuses[plain].run_dir))
    FIGURES["ssh_user_command_records_lost_after_cut"] = len(set(in_file) - set(all_seqs(db_path, plain)))
    assert FIGURES["ssh_user_command_records_lost_after_cut"] == 0
    assert_in_history(db_path, hf, 6)
    hf_steps = rows(db_path, "SELECT loss, tokens_total, samples_total FROM steps WHERE run_id = ? ORDER BY step", hf)
    assert all(loss > 0 for loss, _, _ in hf_steps)
    assert [(t, s) for _, t, s in hf_steps] == [(128 * i, 4 * i) for i in range(1, 7)]
    assert [r[0] for r in rows(db_path, "SELECT step FROM evals WHERE run_id = ? ORDER BY step", hf)] == [3, 6]
    for run_id in (plain, hf):
        row = rows(db_path, "SELECT host, price_usd_per_gpu_hour, status FROM runs WHERE id = ?", run_id)[0]
        assert row == ("box", 3.0, "finished")
        assert history_of(db_path, run_id)["cost_usd"] > 0
    print("\nFIGURES", json.dumps(FIGURES))


def test_preempted_user_command_checkpoints_and_auto_resumes(db_path: Path, tmp_path: Path) -> None:
    watch = Watch()
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    barriers = fake.Barriers(tmp_path / "barriers")
    # the first start holds after step 3 (the resumed start, after it, never reaches that barrier again)
    command = fake.command("--steps", "12", "--hold-at-step", "3", "--barrier-dir", str(barriers.folder))
    run_id = manager.launch(
        "local",
        [],
        command=command,
        auto_resume=True,
        price_usd_per_gpu_hour=1.0,
        env=TRAINER_ENV,
        on_records=watch.on_records,
        on_status=watch.on_status,
    )
    barriers.wait("step-3")
    manager.simulate_preemption(run_id, resume_after_s=0.0)  # SIGTERM to the job's process group
    status = manager.wait(run_id, 240)
    manager.close()
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 1)
    assert "preempted" in watch.states
    ends = [r for r in watch.records if r["kind"] == "run_end"]
    assert [(e["status"], e["exit_code"]) for e in ends] == [("preempted", 75), ("finished", 0)]
    assert len([r for r in watch.records if r["kind"] == "resumed"]) == 1
    assert_in_history(db_path, run_id, 12)  # each step once: the command resumed after its checkpoint


BUDGET = 6.0  # $ at $1 a second: 6 s of run


def test_budget_stops_a_user_command_without_resuming(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    barriers = fake.Barriers(tmp_path / "barriers")
    run_id = manager.launch(
        "local",
        [],
        # holds after step 2 until the budget's SIGTERM: the stop lands at a known step
        command=fake.command("--steps", "100", "--hold-at-step", "2", "--barrier-dir", str(barriers.folder)),
        price_usd_per_gpu_hour=3600.0,  # $1 a second
        budget_usd=BUDGET,
        auto_resume=True,
        env=TRAINER_ENV,
    )
    status = manager.wait(run_id, 120)
    manager.close()
    assert barriers.reached("step-2")
    assert (status.state, status.exit_code, status.restarts) == ("finished", 0, 0)
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("budget_stop",)]
    end = json.loads(
        rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end'", run_id)[0][0]
    )
    # SIGTERM comes the grace period (a tenth of the cap's 6 s: 0.6 s) before the cap, SIGKILL at the cap; the
    # command checkpoints on SIGTERM and exits 75 at once, so the run ends between the two
    assert f"the budget ${BUDGET:g}" in end["reason"] and end["exit_code"] == 75, end
    assert BUDGET - 0.1 * BUDGET - 0.5 <= end["totals"]["spend_usd"] <= BUDGET
    assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == [1, 2]


def test_cli_runs_a_command(db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--db", str(db_path), "--host", "local", "--json", "--price", "1", "--env", "STEPS_FROM_ENV=5"]
    code = main([*args, "--workdir", str(SCRIPTS), "--", sys.executable, "-c", _ENV_SCRIPT])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and doc["state"] == "finished"
    assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ?", doc["run_id"])] == [1, 2, 3, 4, 5]
    # bad input names the flag, and nothing is launched
    assert main([*args, "--max-gpu-hours", "-1", "--", "true"]) == 2
    assert "--max-gpu-hours" in capsys.readouterr().err
    assert main(["run", "--db", str(db_path), "--host", "local", "--workdir", "/tmp", "--", "--max-steps", "3"]) == 2
    assert "--workdir" in capsys.readouterr().err
    assert main([*args, "--env", "1BAD=x", "--", "true"]) == 2
    assert "--env" in capsys.readouterr().err
    assert len(rows(db_path, "SELECT id FROM runs")) == 1


_ENV_SCRIPT = """
import os, pathlib, gpuplanner_telemetry as gt
assert pathlib.Path.cwd().name == "user_scripts"
for step in range(1, int(os.environ["STEPS_FROM_ENV"]) + 1):
    gt.log_step(step, tokens=10, samples=1, loss=1.0 / step)
"""


def test_two_node_command_has_gpu_samples_from_both_nodes(
    db_path: Path, sshd_pair, known_hosts: Path, tmp_path: Path
) -> None:
    """A monitor on every node: node 0 reports the run (steps, spend for both nodes' GPUs), each node its
    GPU samples, under its own lane of seq numbers, so none collide in the history."""
    a, b = sshd_pair
    add_ssh_host(
        db_path, "node-a", a, trust=known_hosts, remote_root=str(tmp_path / "disk-a"), price_usd_per_gpu_hour=1.0
    )
    add_ssh_host(db_path, "node-b", b, trust=known_hosts, remote_root=str(tmp_path / "disk-b"))
    manager = RunManager(db_path)
    watch = Watch()
    # each node runs the script; rank 0 of the job (node 0 here) writes the step records
    script = f"RANK=$GPUPLANNER_NODE_RANK exec {sys.executable} {PLAIN} --steps 25 --step-sleep 0.05"
    run_id = manager.launch(
        "node-a", [], command=["bash", "-c", script], nodes=["node-b"], env=TRAINER_ENV, on_records=watch.on_records
    )
    status = manager.wait(run_id, 300)
    manager.close()
    assert (status.state, status.exit_code) == ("finished", 0)
    nodes = rows(
        db_path,
        "SELECT node, COUNT(*), MIN(seq), MAX(simulated) FROM gpu_samples WHERE run_id = ? GROUP BY node",
        run_id,
    )
    assert {n[0] for n in nodes} == {"node-a", "node-b"} and all(n[1] >= 1 and n[3] == 1 for n in nodes)
    lanes = {n[0]: n[2] // (1 << 40) for n in nodes}
    assert lanes == {"node-a": 0, "node-b": 1}
    assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == list(
        range(1, 26)
    )
    start = [r for r in watch.records if r["kind"] == "run_start"]
    assert len(start) == 1 and start[0]["world_size"] == 2  # one GPU on each of 2 nodes is priced
    assert {r.get("node") for r in watch.records if r["kind"] == "gpu"} == {"node-a", "node-b"}  # live too
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("finished",)]


def test_local_hf_trainer_script_with_the_callback(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch(
        "local", [], command=[sys.executable, HF, "--steps", "3"], price_usd_per_gpu_hour=1.0, env=TRAINER_ENV
    )
    status = manager.wait(run_id, 300)
    manager.close()
    assert (status.state, status.exit_code) == ("finished", 0)
    assert_in_history(db_path, run_id, 3)
    assert rows(db_path, "SELECT tokens_total, samples_total FROM steps WHERE run_id = ? AND step = 3", run_id) == [
        (3 * 128, 3 * 4)
    ]
    assert [r[0] for r in rows(db_path, "SELECT step FROM evals WHERE run_id = ?", run_id)] == [3]
