"""Two hosts (two sshd on 127.0.0.2 and 127.0.0.3) run one 2-node gloo job through torchrun.

The nodes have separate run directories (no shared file system, as on two cloud machines): each
node writes its own checkpoints and ``final/``, and both end with identical weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import TRAINER_ENV, add_ssh_host, all_seqs, final_weights, train_flags
from tests.sshd import free_port

pytestmark = pytest.mark.slow


def test_two_node_gloo_job_matches_single_process(
    db_path: Path, model_config: Path, sshd_pair, known_hosts: Path, tmp_path: Path
) -> None:
    a, b = sshd_pair
    add_ssh_host(db_path, "node-a", a, trust=known_hosts, remote_root=str(tmp_path / "disk-a"))
    add_ssh_host(db_path, "node-b", b, trust=known_hosts, remote_root=str(tmp_path / "disk-b"))
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    # 2 nodes x micro-batch 2 x accumulation 2 = the single process's micro-batch 4 x accumulation 2
    flags = train_flags(model_config, steps=4) + ["--grad-accum", "2", "--checkpoint-every-steps", "2"]
    two = [*flags[: flags.index("--micro-batch")], "--micro-batch", "2", *flags[flags.index("--micro-batch") + 2 :]]
    single = manager.launch("local", flags)
    run_id = manager.launch(
        "node-a",
        two,
        nodes=["node-b"],
        rdzv_port=free_port("127.0.0.2"),
        env={**TRAINER_ENV, "GLOO_SOCKET_IFNAME": "lo"},
    )
    status = manager.wait(run_id, 240)
    assert (status.state, status.exit_code) == ("finished", 0), status
    assert manager.wait(single, 240).state == "finished"
    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored)))
    run_start = manager_events(db_path, run_id)
    assert run_start["world_size"] == 2
    dir_a = Path(status.run_dir)
    dir_b = tmp_path / "disk-b" / dir_a.relative_to(tmp_path / "disk-a")
    assert dir_a.is_relative_to(tmp_path / "disk-a") and dir_b.is_dir()
    for run_dir in (dir_a, dir_b):  # each node completed its own checkpoints, with its ranks' RNG state
        ckpt = run_dir / "checkpoints" / "step-00000002"
        assert (ckpt / "COMPLETE.json").exists() and (ckpt / "model.pt").exists(), sorted(run_dir.rglob("*"))
    assert (dir_a / "checkpoints" / "step-00000002" / "rng-rank0.pt").exists()
    assert (dir_b / "checkpoints" / "step-00000002" / "rng-rank1.pt").exists()
    x, x_b = final_weights(dir_a), final_weights(dir_b)
    y = final_weights(Path(manager.status(single).run_dir))
    assert set(x) == set(x_b) == set(y)
    for name in x:
        assert torch.equal(x[name], x_b[name]), name
        torch.testing.assert_close(x[name], y[name], rtol=1e-4, atol=1e-5)
    manager.close()


def manager_events(db_path: Path, run_id: int) -> dict:
    import json

    from tests.launch.conftest import rows

    (detail,) = rows(db_path, "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start'", run_id)[0]
    return json.loads(detail)
