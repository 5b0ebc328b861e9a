"""Billed time: a run's host is paid from launch until the run ended and the host's after-run command (run on
this machine, e.g. a cloud CLI stopping the instance) finished; the idle time shows in ``runs show``."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import open_db
from gpuplanner.launch import after_run
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


def test_stop_when_idle_runs_the_command_once_the_gpus_stayed_idle(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host's GPUs read through ``python -m trainer.nvml_sampler`` (the simulated source here: idle)."""
    open_db(db_path).close()
    marker = tmp_path / "stopped.txt"
    flags = ["--when-idle-below", "5", "--idle-minutes", "0.02", "--db", str(db_path)]  # 1.2 s under 5%
    assert main(["hosts", "set-after-run", "local", f"echo stopped > {marker}", *flags]) == 0
    assert "once its GPUs stayed under 5% for 0.02 min" in capsys.readouterr().out
    assert get_host(db_path, "local").after_run_idle == {"util_pct": 5.0, "minutes": 0.02}
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    manager.idle_poll_s = 0.2
    run_id = manager.launch("local", [], command=[sys.executable, "-c", "pass"], env=TRAINER_ENV)
    assert manager.wait(run_id, 120).state == "finished"
    deadline = time.monotonic() + 60
    while not rows(db_path, "SELECT 1 FROM events WHERE kind = 'billed'"):  # billed once the command ran
        assert time.monotonic() < deadline
        time.sleep(0.1)
    manager.close()
    detail = json.loads(rows(db_path, "SELECT detail_json FROM events WHERE kind = 'billed'")[0][0])
    idle = detail["after_run"]["when_idle"]
    assert idle["idle"] and idle["simulated"] and idle["readings"] >= 2 and idle["waited_s"] >= 1.2
    assert detail["after_run"]["exit_status"] == 0 and marker.read_text().strip() == "stopped"
    last_t = rows(db_path, "SELECT last_t FROM runs WHERE id = ?", run_id)[0][0]
    assert detail["ended_at"] >= last_t + 1.2  # the idle wait is billed
    # bad input names the flag
    assert main(["hosts", "set-after-run", "local", "true", "--idle-minutes", "3", "--db", str(db_path)]) == 2
    assert "--idle-minutes" in capsys.readouterr().err
    assert main(["hosts", "set-after-run", "local", "true", "--when-idle-below", "0", "--db", str(db_path)]) == 2
    assert "--when-idle-below" in capsys.readouterr().err


def test_wait_until_idle_counts_again_after_a_busy_reading() -> None:
    readings = iter([[50.0], [2.0], [2.0], [70.0, 1.0], [1.0, 3.0], [1.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0]])
    ticks = iter(range(100))  # one second per clock reading: start, then one per utilisation reading
    answer = after_run.wait_until_idle(
        lambda: {"util_pct": next(readings)}, 5.0, 3 / 60, threading.Event(), poll_s=0, clock=lambda: next(ticks)
    )  # 3 s under 5%: two idle readings (1 s) are not enough, the busy 4th starts the count again
    assert answer["idle"] and answer["readings"] == 8 and answer["waited_s"] == 9 and not answer["simulated"]
    failures = after_run.wait_until_idle(lambda: 1 / 0, 5.0, 1.0, threading.Event(), poll_s=0.001)
    assert not failures["idle"] and "could not be read" in failures["reason"] and failures["readings"] == 0
    stop = threading.Event()
    stop.set()
    stopped = after_run.wait_until_idle(lambda: {"util_pct": [90.0]}, 5.0, 1.0, stop, poll_s=0.001)
    assert not stopped["idle"] and stopped["reason"] == "the launcher stopped watching"
