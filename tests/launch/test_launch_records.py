"""What RunManager records for every launch, whichever front end asked: the pre-flight check's outcome
(a ``preflight`` launcher event) and, for a failed run, its error and stderr tail (a ``failure`` event)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.launch.preflight import values_from_args
from tests.conftest import REPO_ROOT
from tests.launch.conftest import rows, train_flags


def launcher(db_path: Path, run_id: int, kind: str) -> list[dict[str, object]]:
    found = rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND seq < 0 AND kind = ?", run_id, kind)
    return [json.loads(r[0]) for r in found]


def test_the_dialog_values_of_a_trainer_command_line() -> None:
    args = ["--model-config=cfg.json", "--data", "a", "--seq-len", "512", "--data=b", "--max-steps", "3"]
    assert values_from_args(args) == {"model_config": "cfg.json", "model": "", "seq_len": 512, "data": ["a", "b"]}
    assert values_from_args(["--model", "gpt2"]) == {"model_config": "", "model": "gpt2", "seq_len": 0, "data": []}


@pytest.mark.slow
def test_a_cli_launch_records_the_preflight_and_the_failure(
    db_path: Path, model_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-corpus"
    flags = train_flags(model_config, steps=2, data=missing)
    assert main(["run", "--db", str(db_path), "--host", "local", "--json", "--", *flags]) == 1
    run_id = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["run_id"]
    [checked] = launcher(db_path, run_id, "preflight")
    assert checked == {"problems": [f"Data: {missing} does not exist on this machine."]}
    [failure] = launcher(db_path, run_id, "failure")
    assert failure["exit_code"] not in (None, 0, 75) and failure["host"] == "local"
    assert str(missing) in failure["stderr_tail"] and failure["error"]

    command = [sys.executable, str(REPO_ROOT / "tests" / "data" / "user_scripts" / "hold.py"), "--fail"]
    assert main(["run", "--db", str(db_path), "--host", "local", "--json", "--", *command]) == 1
    own = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["run_id"]
    [checked] = launcher(db_path, own, "preflight")
    assert checked["problems"] == [] and "command of your own" in str(checked["not_checked"])
