"""How a run's end is recorded when it ends oddly (issue 27 item 12): a job that deletes its own run folder and
exits 0 succeeded (not "failed with 0 h and $0"), with the reason its end record is missing; a run killed by
`gpuplanner run kill` from another process is "killed" to the process following it, not "failed"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplanner.history.db import connect
from gpuplanner.launch.manager import RunManager
from tests.conftest import REPO_ROOT
from tests.launch.conftest import TRAINER_ENV, rows

pytestmark = pytest.mark.slow

DELETE_OWN_FOLDER = """
import os, shutil, sys
from gpuplanner_telemetry import log_step
for step in range(1, 4):
    log_step(step, loss=1.0 / step, tokens=100)
open(sys.argv[1], "w").close()
while os.path.exists(sys.argv[2]):  # the test deletes the marker once the steps are in the history
    pass
shutil.rmtree(os.environ["GPUPLANNER_RUN_DIR"])
"""


def test_a_job_that_deletes_its_run_folder_and_exits_0_succeeded(db_path: Path, tmp_path: Path) -> None:
    script, logged, hold = tmp_path / "job.py", tmp_path / "logged", tmp_path / "hold"
    script.write_text(DELETE_OWN_FOLDER)
    hold.touch()
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id = manager.launch(
            "local",
            [],
            command=[sys.executable, str(script), str(logged), str(hold)],
            env=TRAINER_ENV,
            price_usd_per_gpu_hour=3600.0,
        )
        deadline = time.monotonic() + 120
        while len(rows(db_path, "SELECT step FROM steps WHERE run_id = ?", run_id)) < 3:
            assert time.monotonic() < deadline, "the job's steps never reached the history"
            time.sleep(0.05)
        hold.unlink()
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert (status.state, status.exit_code) == ("finished", 0)
    assert not Path(status.run_dir).exists() or not (Path(status.run_dir) / "events.jsonl").exists()
    (stored,) = rows(db_path, "SELECT status, ended_at FROM runs WHERE id = ?", run_id)
    assert stored[0] == "finished" and stored[1] is not None
    reasons = rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'end_unrecorded'", run_id)
    assert len(reasons) == 1 and "run_end record never arrived" in json.loads(reasons[0][0])["reason"]
    conn = connect(db_path)
    try:
        from gpuplanner.history.analytics import summarize

        summary = summarize(conn, run_id).as_dict()
    finally:
        conn.close()
    assert summary["status"] == "finished" and summary["cost_usd"] > 0 and summary["hours"] > 0


def test_run_kill_from_another_process_is_killed_to_the_follower(db_path: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    try:
        run_id = manager.launch(
            "local", [], command=[sys.executable, "-c", "import time; time.sleep(600)"], env=TRAINER_ENV
        )
        kill = subprocess.run(
            [sys.executable, "-m", "gpuplanner", "run", "kill", str(run_id), "--db", str(db_path)],
            cwd=REPO_ROOT,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        status = manager.wait(run_id, 120)
    finally:
        manager.close()
    assert kill.returncode == 1 and "Traceback" not in kill.stderr
    assert f"run {run_id}: killed" in kill.stdout
    assert status.state == "killed"  # the following process: before, "failed" (the process died without a trace)
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("killed",)]
