"""Fixtures of the launch tests: real sshd servers on loopback, a tiny CPU model, a fresh history.

Nothing touches the real ``~/.ssh``: HOME, the known_hosts file and the SSH config path point into
the test's temp dir, and every run directory and payload lives there too.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.sshd import SSHServer, available

with warnings.catch_warnings():
    # paramiko 5 imports cryptography's deprecated TripleDES/Blowfish ciphers for old key formats;
    # the deprecation is theirs to fix and says nothing about our code.
    warnings.filterwarnings("ignore", message=".*(TripleDES|Blowfish).*")
    import paramiko  # noqa: F401

CORPUS = REPO_ROOT / "tests" / "data" / "corpus"
TINY_GPT2 = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": 64,
    "vocab_size": 257,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}
TRAINER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONWARNINGS": "ignore",
}

needs_sshd = pytest.mark.skipif(not available(), reason="needs /usr/sbin/sshd and root")


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GPUPLANNER_KNOWN_HOSTS", str(home / ".ssh" / "known_hosts"))
    monkeypatch.setenv("GPUPLANNER_SSH_CONFIG", str(home / ".ssh" / "config"))
    monkeypatch.setenv("GPUPLANNER_REMOTE_ROOT", str(tmp_path / "remote"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    for key, value in TRAINER_ENV.items():
        monkeypatch.setenv(key, value)
    return home


@pytest.fixture
def known_hosts(_private_home: Path) -> Path:
    return _private_home / ".ssh" / "known_hosts"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


@pytest.fixture
def model_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2))
    return path


def train_flags(model_config: Path, *, steps: int = 8, data: Path = CORPUS, **extra: Any) -> list[str]:
    flags = [
        "--model-config",
        str(model_config),
        "--data",
        str(data),
        "--seq-len",
        "32",
        "--micro-batch",
        "4",
        "--max-steps",
        str(steps),
        "--device",
        "cpu",
        "--seed",
        "7",
        "--lr",
        "2e-3",
        "--warmup-steps",
        "2",
        "--checkpoint-every-minutes",
        "0",
        "--log-interval-s",
        "0",
        "--gpu-interval-s",
        "0",
        "--no-events-stdout",
    ]
    for key, value in extra.items():
        flags += ["--" + key.replace("_", "-"), str(value)]
    return flags


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SSHServer]:
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    server = SSHServer(tmp_path / "sshd-a", "127.0.0.1").start()
    yield server
    server.stop()


@pytest.fixture
def sshd_pair(tmp_path: Path) -> Iterator[tuple[SSHServer, SSHServer]]:
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    a = SSHServer(tmp_path / "sshd-b", "127.0.0.2").start()
    b = SSHServer(tmp_path / "sshd-c", "127.0.0.3", client_key=a.client_key).start()
    yield a, b
    a.stop()
    b.stop()


def add_ssh_host(db_path: Path, name: str, server: SSHServer, *, trust: Path | None = None, **fields: Any) -> Any:
    """Store ``server`` as host ``name`` (Python = this interpreter); append its key to ``trust`` if given."""
    from gpuplanner.launch.hosts import Host, add_host

    fields.setdefault("identity_file", str(server.client_key))
    host = Host(
        name=name, kind="ssh", hostname=server.address, port=server.port, user="root", python=sys.executable, **fields
    )
    add_host(db_path, host)
    if trust is not None:
        with open(trust, "a") as handle:
            handle.write(server.known_hosts_line)
    return host


def rows(db_path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    from gpuplanner.history.db import connect

    db = connect(db_path)
    try:
        return db.execute(sql, list(params)).fetchall()
    finally:
        db.close()


def all_seqs(db_path: Path, run_id: int) -> list[int]:
    """Every stored trainer record's seq (all kinds), sorted, duplicates kept."""
    out: list[int] = []
    for table in ("steps", "gpu_samples", "evals", "events"):
        out += [r[0] for r in rows(db_path, f"SELECT seq FROM {table} WHERE run_id = ? AND seq >= 0", run_id)]
    return sorted(out)


def final_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final" / "model.safetensors"))


def events_file_seqs(run_dir: Path) -> list[int]:
    from trainer.protocol import StreamParser

    return [r["seq"] for r in StreamParser().feed((Path(run_dir) / "events.jsonl").read_bytes())]


# -- Slurm: one real single-node cluster per test session, reached through a real sshd ----------------
@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real two-node Slurm on this host (see ``tests/launch/slurm_cluster.py``), started once; tests
    using it go in the ``slurm`` xdist group, so one worker owns it."""
    from tests.launch.slurm_cluster import SlurmCluster
    from tests.launch.slurm_cluster import available as slurm_available

    if not slurm_available():
        pytest.fail("the Slurm tests need root and the slurmctld, slurmd, slurm-client and munge packages")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm_login(tmp_path: Path, slurm_cluster: Any) -> Iterator[SSHServer]:
    """The cluster's login node: an sshd whose sessions find the cluster (``SLURM_CONF``)."""
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    server = SSHServer(tmp_path / "sshd-slurm", "127.0.0.1", options=[f"SetEnv SLURM_CONF={slurm_cluster.conf}"])
    server.start()
    yield server
    server.stop()


def add_slurm_host(
    db_path: Path, name: str, server: SSHServer, *, trust: Path, price: float | None = None, **slurm: Any
) -> Any:
    """Store the login node ``server`` as Slurm host ``name`` (Python = this interpreter) and trust its key."""
    from gpuplanner.launch.hosts import Host, add_host

    host = Host(
        name=name,
        kind="slurm",
        hostname=server.address,
        port=server.port,
        user="root",
        identity_file=str(server.client_key),
        python=sys.executable,
        price_usd_per_gpu_hour=price,
        slurm=slurm,
    )
    add_host(db_path, host)
    with open(trust, "a") as handle:
        handle.write(server.known_hosts_line)
    return host
