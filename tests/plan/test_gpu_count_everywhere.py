"""`--gpu NAME:N` (SkyPilot's and dstack's way to ask for GPUs) wherever --gpu/--gpus are accepted, and
compare's catalog filters (--min-gpu-memory, --gpu-family)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuplanner.cli import main
from gpuplanner.launch.hosts import get_host, update_host
from gpuplanner.plan.catalog import load_catalog


def test_sweep_size_reads_gpu_with_a_count_and_refuses_a_conflict(capsys) -> None:
    assert main(["sweep", "size", "--budget-usd", "100", "--gpu", "H100:4", "--json"]) == 0
    colon = json.loads(capsys.readouterr().out)
    assert main(["sweep", "size", "--budget-usd", "100", "--gpu", "H100", "--gpus", "4", "--json"]) == 0
    assert colon == json.loads(capsys.readouterr().out)
    assert colon["inputs"]["gpus"] == 4
    assert main(["sweep", "size", "--budget-usd", "100", "--gpu", "H100:4", "--gpus", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpuplanner sweep: error: --gpu: 'H100:4' says 4 GPUs but --gpus says 2; give one"]


def test_run_gpu_checks_the_hosts_gpu_type_and_count_before_launching(tmp_path, capsys) -> None:
    db = str(tmp_path / "history.sqlite")
    update_host(db, replace(get_host(db, "local"), gpu_type="NVIDIA GeForce RTX 4090", gpu_count=1))
    base = ["run", "--db", db, "--host", "local", "--no-follow"]
    assert main([*base, "--gpu", "H100:1", "--", "python3", "-c", "pass"]) == 2
    assert capsys.readouterr().err.strip().endswith("--gpu: host local has NVIDIA GeForce RTX 4090 GPUs, not H100 SXM")
    assert main([*base, "--gpu", "4090:2", "--gpus", "1", "--", "python3", "-c", "pass"]) == 2
    assert "says 2 GPUs but --gpus says 1" in capsys.readouterr().err
    assert main([*base, "--gpu", "B9000:1", "--", "python3", "-c", "pass"]) == 2
    assert "--gpu: unknown GPU 'B9000'" in capsys.readouterr().err


def test_compare_filters_the_catalog_by_memory_as_sold_and_family(capsys) -> None:
    argv = ["compare", "--no-calibration", "--json", "--min-gpu-memory", "40", "--gpu-family", "ampere"]
    assert main(argv) == 0
    gpus = {row["gpu"] for row in json.loads(capsys.readouterr().out)}
    catalog = load_catalog()
    expected = {g.name for g in catalog.gpus if g.architecture == "Ampere" and g.marketing_memory_gb >= 40}
    assert gpus == expected and "A100 40GB" in gpus and "A10G" not in gpus and "RTX 3090" not in gpus
    assert main(["compare", "--no-calibration", "--json", "--gpu-family", "ada", "--gpu-family", "hopper"]) == 0
    families = {catalog.gpu(row["gpu"]).architecture for row in json.loads(capsys.readouterr().out)}
    assert families == {"Ada Lovelace", "Hopper"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpu-family", "pascal"], "--gpu-family: no GPU family 'pascal'; families: Ada Lovelace, Ampere"),
        (["--min-gpu-memory", "500"], "--min-gpu-memory: no catalog GPU has 500 GB or more"),
        (["--min-gpu-memory", "nan"], "--min-gpu-memory: a positive number of GB, got nan"),
        (["--min-gpu-memory", "40", "--gpu", "H100"], "--min-gpu-memory/--gpu-family: filter the catalog's GPUs"),
    ],
)
def test_compare_filter_errors_are_one_line_naming_the_flag(flags, message, capsys) -> None:
    assert main(["compare", "--no-calibration", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
