"""Fixtures of the search tests: a fresh data folder and history, this machine at a known price, the tiny
CPU model of the launch tests and a one-parameter search space."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

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
# $3,600 per GPU-hour: a CPU "trial" of a few seconds costs a few dollars, so the caps are easy to read.
PRICE = 3600.0


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("GPUPLANNER_DATA_DIR", str(folder))
    monkeypatch.delenv("GPUPLANNER_DB", raising=False)
    for key, value in TRAINER_ENV.items():
        monkeypatch.setenv(key, value)
    return folder


@pytest.fixture
def db_path(data_dir: Path) -> Path:
    from gpuplanner.launch.hosts import Host, update_host

    path = data_dir / "history.sqlite"
    update_host(path, Host(name="local", kind="local", price_usd_per_gpu_hour=PRICE))
    return path


@pytest.fixture
def model_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2))
    return path


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "space.toml"
    path.write_text('[params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 3e-2\nlog = true\n')
    return path


def trainer_flags(model_config: Path, cache: Path) -> list[str]:
    return [
        "--model-config", str(model_config), "--data", str(CORPUS), "--cache-dir", str(cache),
        "--seq-len", "32", "--micro-batch", "4", "--device", "cpu", "--seed", "7", "--warmup-steps", "2",
        "--checkpoint-every-minutes", "0", "--log-interval-s", "0", "--gpu-interval-s", "0", "--no-events-stdout",
    ]  # fmt: skip
