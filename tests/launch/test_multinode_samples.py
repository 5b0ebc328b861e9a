"""Every node's GPU samples reach the history, on the real two-node Slurm of ``tests/launch/slurm_cluster.py``
(two ``slurmd`` on this host, ``gp1`` and ``gp2``, sharing its filesystem as cluster nodes share theirs).

Node 0 writes ``events.jsonl``, node N > 0 its own ``events.nodeN.jsonl`` in the shared run directory
(seq numbers from N x ``NODE_SEQ_STRIDE``); the watcher streams each file from its stored offset, so a
cut login connection loses and duplicates nothing in either file. ``runs show --json`` totals the samples
per node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplanner.launch.manager import RunManager
from tests.conftest import REPO_ROOT
from tests.launch.conftest import TRAINER_ENV, add_slurm_host, events_file_seqs, rows
from tests.launch.test_runs import Watch
from trainer.protocol import StreamParser
from trainer.telemetry import NODE_SEQ_STRIDE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
PLAIN = REPO_ROOT / "tests" / "data" / "user_scripts" / "plain_loop.py"


def file_seqs(path: Path) -> list[int]:
    return [r["seq"] for r in StreamParser().feed(path.read_bytes())] if path.exists() else []


def stored_seqs(db_path: Path, run_id: int) -> list[int]:
    out: list[int] = []
    for table in ("steps", "gpu_samples", "evals", "events"):
        out += [r[0] for r in rows(db_path, f"SELECT seq FROM {table} WHERE run_id = ? AND seq >= 0", run_id)]
    return sorted(out)


def samples_per_node(db_path: Path, run_id: int) -> dict[str, tuple[int, int, int]]:
    """node -> (samples, lane of its seq numbers, simulated)"""
    found = rows(
        db_path,
        "SELECT node, COUNT(*), MIN(seq) / ?, MIN(simulated) FROM gpu_samples WHERE run_id = ? GROUP BY node",
        NODE_SEQ_STRIDE,
        run_id,
    )
    return {node: (n, lane, simulated) for node, n, lane, simulated in found}


def runs_show(db_path: Path, run_id: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "gpuplanner", "runs", "show", str(run_id), "--json", "--db", str(db_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_two_node_user_command_samples_both_nodes_across_a_cut(
    db_path: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, price=1.0, nodes=2, gpus_per_node=1)
    manager = RunManager(db_path)
    watch = Watch()
    run_id = manager.launch(
        "cluster",
        [],
        command=[sys.executable, str(PLAIN), "--steps", "60", "--step-sleep", "0.1"],
        env=TRAINER_ENV,
        on_records=watch.on_records,
    )
    # both nodes' first samples arrived: then the login node drops the connection mid-run
    watch.until(lambda: {r.get("node") for r in watch.records if r["kind"] == "gpu"} >= {"gp1", "gp2"}, 240)
    assert slurm_login.cut_connections() >= 1
    status = manager.wait(run_id, 300)
    manager.close()
    assert (status.state, status.exit_code) == ("finished", 0), status
    assert status.reconnects >= 1
    run_dir = Path(status.run_dir)
    node0, node1 = file_seqs(run_dir / "events.jsonl"), file_seqs(run_dir / "events.node1.jsonl")
    assert node1 and all(s // NODE_SEQ_STRIDE == 1 for s in node1)
    stored = stored_seqs(db_path, run_id)
    assert stored == sorted(node0 + node1)  # nothing lost, nothing twice, in either file
    lost = len(node0) + len(node1) - len(stored)
    per_node = samples_per_node(db_path, run_id)
    assert set(per_node) == {"gp1", "gp2"}
    assert per_node["gp1"][1:] == (0, 1) and per_node["gp2"][1:] == (1, 1)  # lanes 0 and 1, both simulated
    # only node 0's copy of the command logged steps (the other node's has no telemetry file)
    assert [r[0] for r in rows(db_path, "SELECT step FROM steps WHERE run_id = ? ORDER BY seq", run_id)] == list(
        range(1, 61)
    )
    shown = runs_show(db_path, run_id)
    assert {n["node"]: n["samples"] for n in shown["nodes"]} == {k: v[0] for k, v in per_node.items()}
    assert all(n["gpus"] == 1 for n in shown["nodes"])
    print(f"\nFIGURES slurm_two_node_records_lost_across_cut={lost}")


def test_two_node_bundled_trainer_samples_both_nodes(
    db_path: Path, model_config: Path, slurm_cluster: Any, slurm_login: Any, known_hosts: Path
) -> None:
    from tests.launch.conftest import train_flags

    add_slurm_host(db_path, "cluster", slurm_login, trust=known_hosts, nodes=2, price=1.0)
    manager = RunManager(db_path)
    flags = train_flags(model_config, steps=6) + ["--gpu-interval-s", "0.2"]
    run_id = manager.launch("cluster", flags, env={**TRAINER_ENV, "GLOO_SOCKET_IFNAME": "lo"})
    status = manager.wait(run_id, 240)
    manager.close()
    assert (status.state, status.exit_code) == ("finished", 0), status
    run_dir = Path(status.run_dir)
    node1 = file_seqs(run_dir / "events.node1.jsonl")
    assert node1 and min(node1) == NODE_SEQ_STRIDE  # node 1's local rank 0 sampled its node's GPUs
    assert stored_seqs(db_path, run_id) == sorted(events_file_seqs(run_dir) + node1)
    per_node = samples_per_node(db_path, run_id)
    assert set(per_node) == {"gp1", "gp2"}
    # torchrun's c10d rendezvous may make either node group rank 0: one node per lane
    assert sorted(lane for _, lane, _ in per_node.values()) == [0, 1]
    assert all(n >= 1 for n, _, _ in per_node.values())
    shown = runs_show(db_path, run_id)
    assert sorted(n["node"] for n in shown["nodes"]) == ["gp1", "gp2"]
