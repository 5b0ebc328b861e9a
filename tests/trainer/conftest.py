"""Shared fixtures for trainer tests: a tiny config-built GPT-2, the shipped corpus, helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

CORPUS = REPO_ROOT / "tests" / "data" / "corpus"
TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64, "vocab_size": 257}


@pytest.fixture(autouse=True, scope="session")
def _few_threads() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def model_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2))
    return path


def base_args(run_dir: Path, model_config: Path, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "run_dir": str(run_dir),
        "model_config": str(model_config),
        "data": [str(CORPUS)],
        "seq_len": 32,
        "micro_batch": 4,
        "grad_accum": 1,
        "max_steps": 8,
        "lr": 2e-3,
        "seed": 7,
        "warmup_steps": 2,
        "checkpoint_every_minutes": 0.0,
        "log_interval_s": 0.0,
        "gpu_interval_s": 0.0,
        "events_stdout": False,
        "device": "cpu",
    }
    args.update(overrides)
    return args


def make_config(run_dir: Path, model_config: Path, **overrides: Any):
    from trainer.config import TrainConfig, validate

    config = TrainConfig(**base_args(run_dir, model_config, **overrides))
    validate(config)
    return config


def cli_args(args: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list):
            for v in value:
                out += [flag, str(v)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=str(REPO_ROOT),
        TOKENIZERS_PARALLELISM="false",
        PYTHONWARNINGS="ignore",
    )
    return env


def spawn_train(args: dict[str, Any], **popen: Any) -> subprocess.Popen:
    """Start ``python -m trainer train``; stderr goes to ``RUN_DIR.stderr.log`` (see :func:`stderr_of`)."""
    log = Path(str(args["run_dir"]) + ".stderr.log")
    with open(log, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer", "train", *cli_args(args)],
            cwd=REPO_ROOT,
            env=trainer_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            **popen,
        )


def stderr_of(run_dir: Path) -> str:
    return Path(str(run_dir) + ".stderr.log").read_text(errors="replace")[-3000:]


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    from trainer.protocol import StreamParser

    parser = StreamParser()
    return parser.feed((run_dir / "events.jsonl").read_bytes())


def final_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "model.safetensors"))
