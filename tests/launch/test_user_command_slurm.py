"""A user's own command through ``sbatch`` on the real single-node Slurm (tests/launch/slurm_cluster.py),
reached through a real sshd: the plain ``log_step`` script and the HF ``Trainer`` callback script run to
completion under the monitor and reach the history with their steps, simulated GPU samples and spend."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplanner.launch.manager import RunManager
from tests.conftest import REPO_ROOT
from tests.launch.conftest import TRAINER_ENV, add_slurm_host, all_seqs, rows
from tests.launch.test_runs import Watch

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"


def test_user_commands_through_sbatch_reach_the_history(
    db_path: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
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
    manager = RunManager(db_path)
    watch = Watch()
    plain = manager.launch(
        "cluster",
        [],
        command=[sys.executable, "plain_loop.py", "--steps", "20"],
        workdir=str(SCRIPTS),
        env=TRAINER_ENV,
        on_records=watch.on_records,
    )
    watch.until(lambda: watch.first_step_s is not None, 240)
    figures = {"slurm_user_command_launch_to_first_step_s": watch.first_step_s}
    hf = manager.launch(
        "cluster", [], command=[sys.executable, str(SCRIPTS / "hf_trainer.py"), "--steps", "4"], env=TRAINER_ENV
    )
    statuses = {run_id: manager.wait(run_id, 400) for run_id in (plain, hf)}
    manager.close()
    for run_id, steps in ((plain, 20), (hf, 4)):
        status = statuses[run_id]
        assert (status.state, status.exit_code) == ("finished", 0), status
        stored = all_seqs(db_path, run_id)
        assert stored == list(range(len(stored)))
        assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == list(
            range(1, steps + 1)
        )
        assert rows(db_path, "SELECT MIN(simulated) FROM gpu_samples WHERE run_id = ?", run_id) == [(1,)]
        assert rows(db_path, "SELECT status, price_usd_per_gpu_hour FROM runs WHERE id = ?", run_id) == [
            ("finished", 2.0)
        ]
        assert rows(db_path, "SELECT MAX(spend_usd) FROM steps WHERE run_id = ?", run_id)[0][0] > 0
        assert any(
            json.loads(r[0]).get("state")
            for r in rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'slurm_job'", run_id)
        )
    print("\nFIGURES", json.dumps(figures))
