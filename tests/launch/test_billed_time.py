"""Billed time: a run's host is paid from launch until the run ended and the host's after-run command (run on
this machine, e.g. a cloud CLI stopping the instance) finished; the idle time shows in ``runs show``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import open_db
from gpuplanner.launch.hosts import get_host, set_price
from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import TRAINER_ENV, rows

pytestmark = pytest.mark.slow


def test_billed_from_launch_until_the_after_run_command_finished(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_db(db_path).close()
    set_price(db_path, "local", 3600.0)  # $1 per GPU-second
    marker = tmp_path / "after.txt"
    after = f'sleep 1.5; echo "stopped $GPUPLANNER_HOST run $GPUPLANNER_RUN_ID" > {marker}'
    assert main(["hosts", "set-after-run", "local", after, "--db", str(db_path)]) == 0
    assert get_host(db_path, "local").after_run_command == after
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch(
        "local", [], command=[sys.executable, "-c", "import time; time.sleep(1)"], gpus=2, env=TRAINER_ENV
    )
    status = manager.wait(run_id, 120)
    manager.close()
    assert status.state == "finished"
    assert marker.read_text().strip() == f"stopped local run {run_id}"
    (detail,) = [json.loads(r[0]) for r in rows(db_path, "SELECT detail_json FROM events WHERE kind = 'billed'")]
    first_t, last_t = rows(db_path, "SELECT first_t, last_t FROM runs WHERE id = ?", run_id)[0]
    assert detail["launched_at"] <= first_t and detail["ended_at"] >= last_t + 1.5  # idle before and after
    assert detail["after_run"]["exit_status"] == 0 and detail["after_run"]["seconds"] >= 1.5
    assert detail["billed_usd"] == pytest.approx(detail["billed_s"] * 2, rel=1e-3)  # 2 GPUs at $1/s each
    capsys.readouterr()
    assert main(["runs", "show", str(run_id), "--json", "--db", str(db_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["billed_hours"] == pytest.approx(detail["billed_s"] / 3600)
    assert shown["billed_cost_usd"] == pytest.approx(detail["billed_usd"])
    assert shown["idle_billed_hours"] * 3600 >= 1.5 and shown["billed_cost_usd"] > shown["cost_usd"]
    assert shown["after_run"]["command"] == after


def test_a_failing_after_run_command_is_recorded_and_the_cli_checks_its_input(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_db(db_path).close()
    assert main(["hosts", "set-after-run", "local", "echo nope >&2; exit 3", "--db", str(db_path)]) == 0
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", [], command=[sys.executable, "-c", "pass"], env=TRAINER_ENV)
    manager.wait(run_id, 120)
    manager.close()
    detail = json.loads(rows(db_path, "SELECT detail_json FROM events WHERE kind = 'billed'")[0][0])
    assert detail["after_run"]["exit_status"] == 3 and "nope" in detail["after_run"]["output_tail"]
    assert not detail["billed_usd"]  # no price: hours only
    assert main(["hosts", "set-after-run", "local", "none", "--db", str(db_path)]) == 0
    assert get_host(db_path, "local").after_run_command is None
    assert main(["hosts", "set-after-run", "local", "  ", "--db", str(db_path)]) == 2
    assert "COMMAND" in capsys.readouterr().err
    assert main(["hosts", "set-after-run", "nohost", "true", "--db", str(db_path)]) == 2
