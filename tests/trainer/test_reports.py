"""What ``trainer probe``, ``trainer bench`` and the NVML sampler print has exactly the keys their
TypedDicts (trainer/reports.py) name, so the launcher's types cannot drift from the trainer's output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import make_config
from trainer.reports import BenchReport, GpuUtilisation, ProbeReport


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


@pytest.mark.slow  # imports transformers and peft for their versions (seconds)
def test_probe_prints_every_key_of_probe_report(tmp_path: Path) -> None:
    from trainer.probe import probe

    doc = probe(tmp_path / "not-yet" / "runs")
    assert set(doc) == _keys(ProbeReport)
    assert doc["run_root"] == str(tmp_path.resolve()) and doc["gpu_count"] == len(doc["gpus"])
    assert doc["disk_total_bytes"] >= doc["disk_free_bytes"] > 0


def test_bench_prints_every_key_of_bench_report(tmp_path: Path, model_config: Path) -> None:
    from trainer.bench import bench

    doc = bench(make_config(tmp_path / "run", model_config), warmup_steps=1, steps=2)
    assert set(doc) == _keys(BenchReport) - {"compile_s"}  # compile_s: only a compiled model reports it
    assert doc["measured_steps"] == 2 and doc["device"] == "cpu" and doc["mfu"] is None


def test_the_sampler_prints_every_key_of_gpu_utilisation() -> None:
    from trainer.nvml_sampler import utilisation_once

    reading = utilisation_once(0.0)
    assert set(reading) == _keys(GpuUtilisation) and isinstance(reading["util_pct"], list)
