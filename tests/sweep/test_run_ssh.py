"""A search over two real SSH hosts (two sshd servers on loopback, each with its own run root); its trials
are the protocol fake under the monitor on each host (tests/sweep/fake_trials.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplanner.commands.sweep import describe_result, result_document
from gpuplanner.export.human import human_money
from gpuplanner.history.db import connect
from gpuplanner.launch.hosts import Host, add_host
from gpuplanner.sweep.budget import Caps
from gpuplanner.sweep.runner import SweepRunner, SweepSettings
from gpuplanner.sweep.schedule import Schedule
from gpuplanner.sweep.space import load_space
from tests.sshd import SSHServer, available
from tests.sweep.conftest import PRICE, TRAINER_ENV, trainer_flags
from tests.sweep.fake_trials import FakeTrialManager

pytestmark = pytest.mark.slow  # two real sshd servers


@pytest.fixture
def two_hosts(tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    known_hosts = home / ".ssh" / "known_hosts"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GPUPLANNER_KNOWN_HOSTS", str(known_hosts))
    monkeypatch.setenv("GPUPLANNER_SSH_CONFIG", str(home / ".ssh" / "config"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    a = SSHServer(tmp_path / "sshd-a", "127.0.0.2").start()
    b = SSHServer(tmp_path / "sshd-b", "127.0.0.3", client_key=a.client_key).start()
    roots = []
    for name, server in (("box-a", a), ("box-b", b)):
        root = tmp_path / f"root-{name}"
        roots.append(root)
        add_host(
            db_path,
            Host(
                name=name, kind="ssh", hostname=server.address, port=server.port, user="root",
                identity_file=str(server.client_key), python=sys.executable, remote_root=str(root),
                price_usd_per_gpu_hour=PRICE,
            ),
        )  # fmt: skip
        with open(known_hosts, "a") as handle:
            handle.write(server.known_hosts_line)
    yield roots
    a.stop()
    b.stop()


def test_trials_run_on_both_hosts_each_in_its_own_run_root(
    two_hosts: list[Path], db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    settings = SweepSettings(
        study="ssh-search",
        hosts=("box-a", "box-b"),
        space=load_space(space_file),
        trials=2,
        schedule=Schedule("successive-halving", max_resource=40, min_resource=20, reduction_factor=3, unit="steps"),
        caps=Caps(usd=100.0),
        trainer_flags=tuple(trainer_flags(model_config, tmp_path / "cache")),
        step_seconds=0.03,
        seed=5,
        env=tuple(TRAINER_ENV.items()),  # an SSH session does not inherit this process's environment
    )
    manager = FakeTrialManager(db_path)  # each trial is the protocol fake under the monitor on the SSH host
    try:
        result = SweepRunner(db_path, settings, manager).run()
    finally:
        manager.close()
    assert result.stop_reason == "done: all 2 trials ran"
    assert {t["state"] for t in result.trials} <= {"complete", "pruned"}
    assert {t["host"] for t in result.trials} == {"box-a", "box-b"}
    conn = connect(db_path)
    try:
        runs = conn.execute("SELECT id, host, launch_json FROM runs ORDER BY id").fetchall()
    finally:
        conn.close()
    assert len(runs) == 2

    for run_id, host, config in runs:
        run_dir = json.loads(config)["launch"]["nodes"][0]["run_dir"]
        root = two_hosts[0] if host == "box-a" else two_hosts[1]
        assert Path(run_dir).is_relative_to(root) and (Path(run_dir) / "events.jsonl").is_file(), (run_id, run_dir)
    complete = [t for t in result.trials if t["state"] == "complete"]
    assert complete, result.trials
    assert result.best == min(complete, key=lambda t: t["value"])
    assert result.spent_usd <= 100.0
    document = result_document(result, settings)
    assert document["spent_usd"] == round(result.spent_usd, 6)
    text = describe_result(document)
    assert text.splitlines()[0].split() == [
        "trial",
        "state",
        "end",
        "run",
        "host",
        "last_step",
        "eval_loss",
        "spend_usd",
        "params",
    ]
    spent = human_money(document["spent_usd"], 4)  # export/human.py, as the command writes it
    assert f"study ssh-search: done: all 2 trials ran; spent {spent} of $100.00" in text
    assert f"best: trial {result.best['number']} (run {result.best['run_id']})" in text
