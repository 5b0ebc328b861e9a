"""Commands end to end: probe, monitor, bench, TOML config precedence, and a 2-process gloo DDP run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, final_weights, make_config, read_events, trainer_env
from trainer import protocol
from trainer.cli import _parser
from trainer.config import resolve
from trainer.loop import train


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        cwd=REPO_ROOT,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): real training or a subprocess
def test_probe_describes_the_host(tmp_path: Path) -> None:
    out = _run("probe", "--run-root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["torch"] == torch.__version__ and doc["transformers"]
    assert doc["cpu_cores"] >= 1 and doc["ram_bytes"] > 0 and doc["disk_free_bytes"] > 0
    assert isinstance(doc["gpus"], list) and doc["gpu_count"] == len(doc["gpus"])


def test_monitor_prints_gpu_records() -> None:
    out = _run("monitor", "--interval", "0.05", "--count", "3", "--simulate")
    assert out.returncode == 0, out.stderr
    records = protocol.StreamParser().feed(out.stdout.encode())
    assert [r["seq"] for r in records] == [0, 1, 2]
    assert all(r["kind"] == "gpu" and r["simulated"] is True for r in records)


def test_toml_config_with_flag_override(tmp_path: Path, model_config: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(
        f'[train]\nmodel-config = "{model_config}"\ndata = ["x"]\nseq-len = 48\nmicro_batch = 2\n'
        'lora-targets = ["c_attn"]\n'
    )
    args = _parser().parse_args(["train", "--config", str(toml), "--seq-len", "16", "--no-events-stdout"])
    cfg = resolve(args)
    assert (cfg.seq_len, cfg.micro_batch, cfg.events_stdout, cfg.lora_targets) == (16, 2, False, ["c_attn"])
    bad = tmp_path / "bad.toml"
    bad.write_text("sequence-length = 3\n")
    with pytest.raises(ValueError, match="unknown setting"):
        resolve(_parser().parse_args(["train", "--config", str(bad)]))
    with pytest.raises(ValueError, match="--model"):
        resolve(_parser().parse_args(["train", "--data", "x"]))


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): real training or a subprocess
def test_resolved_config_is_written_and_reusable(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=1)) == 0
    args = _parser().parse_args(["train", "--config", str(run / "config.resolved.toml")])
    assert resolve(args) == make_config(run, model_config, max_steps=1)


@pytest.mark.slow
def test_bench_prints_throughput_json(tmp_path: Path, model_config: Path) -> None:
    args = base_args(tmp_path / "bench", model_config)
    args.pop("max_steps")
    out = _run("bench", *cli_args(args), "--bench-warmup-steps", "2", "--bench-steps", "4")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["measured_steps"] == 4 and doc["tokens_per_s"] > 0
    assert doc["tokens_per_s"] == pytest.approx(doc["samples_per_s"] * 32)
    assert 0 <= doc["data_wait_share"] < 1 and doc["step_time_s"] > 0 and doc["mfu"] is None
    assert doc["flops_per_token"] > 6 * doc["params"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_gloo_ddp_matches_single_process_big_batch(tmp_path: Path, model_config: Path) -> None:
    nodrop = tmp_path / "nodrop.json"
    nodrop.write_text(
        model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')
    )
    ddp = base_args(tmp_path / "ddp", nodrop, micro_batch=2, grad_accum=2, max_steps=4, checkpoint_every_steps=2)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "-m",
        "trainer",
        "train",
        *cli_args(ddp),
    ]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    events = read_events(tmp_path / "ddp")
    assert len([e for e in events if e["kind"] == "run_start"]) == 1  # only rank 0 writes telemetry
    assert events[0]["world_size"] == 2 and events[-1]["status"] == "finished"
    steps = [e for e in events if e["kind"] == "step"]
    assert steps[-1]["samples_total"] == 4 * 2 * 2 * 2
    ck = tmp_path / "ddp" / "checkpoints" / "step-00000004"
    assert (ck / "rng-rank0.pt").exists() and (ck / "rng-rank1.pt").exists()
    # Same global batch (2 x 2 x 2 = 8) in one process: same weights up to float summation order.
    single = make_config(tmp_path / "single", nodrop, micro_batch=4, grad_accum=2, max_steps=4)
    assert train(single) == 0
    a, b = final_weights(tmp_path / "ddp"), final_weights(tmp_path / "single")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5)


def test_every_train_flag_is_documented() -> None:
    doc = (REPO_ROOT / "docs" / "trainer.md").read_text()
    train_parser = _parser()._subparsers._group_actions[0].choices["train"]
    flags = [
        s
        for a in train_parser._actions
        for s in a.option_strings
        if s.startswith("--") and s != "--help" and not s.startswith("--no-")
    ]
    assert [f for f in flags if f"`{f}`" not in doc] == []
