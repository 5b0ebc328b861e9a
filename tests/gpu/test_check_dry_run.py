"""The GPU check (``python3 -m tests.gpu.check``) on the CPU: its dry run, its time budget, ``--record``.

The dry run trains three of the matrix's configurations for real (tiny Llama shapes in bf16-mixed: the
bundled trainer, the Hugging Face ``Trainer``, QLoRA where bitsandbytes is installed; each in its own
process), samples the fake NVML beside the fake
nvidia-smi, and plans each configuration; every other configuration must be listed as skipped with a
reason. The other tests need no training.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from tests.gpu import matrix, report
from tests.gpu.check import BNB_CARRY, main, run_worker

STATUSES = {"measured", "skipped", "oom", "failed", "timed_out"}
BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "planner_accuracy.py"


def _load(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def _check_schema(doc: dict) -> None:
    assert doc["schema"] == report.SCHEMA and doc["complete"] is True
    env = doc["environment"]
    for key in ("gpu_name", "gpu_catalog", "driver", "torch", "commit", "date", "dry_run"):
        assert key in env
    assert env["dry_run"] is True and env["torch"]
    names = [r["name"] for r in doc["records"]]
    assert names == [r["name"] for r in matrix.rows(True)]  # every configuration, once, in order
    for rec in doc["records"]:
        assert rec["status"] in STATUSES
        assert rec["settings"]["name"] == rec["name"]
        assert all(rec[key] == env[key] for key in ("gpu_name", "driver", "torch", "commit", "date"))
        if rec["status"] == "measured":
            m = rec["measured"]
            assert m["tokens_per_s"] > 0 and m["step_time_s"] > 0
        else:
            assert rec["reason"], rec["name"]


@pytest.mark.slow
def test_dry_run_measures_plans_and_lists_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["--dry-run", "--out", str(out), "--only", "full-1b-s2048,hf-full-1b-s2048,qlora-1b-s2048"])
    assert code == 0
    doc = _load(out)
    _check_schema(doc)
    recs = {r["name"]: r for r in doc["records"]}
    ours, hf = recs["full-1b-s2048"], recs["hf-full-1b-s2048"]
    assert ours["status"] == "measured", ours.get("log_tail")
    assert hf["status"] == "measured", hf.get("log_tail")
    # the trainer's own figures and its time breakdown
    assert ours["measured"]["measured_steps"] == 2
    assert ours["measured"]["phases_s"]["startup"] > 0 and "train" in ours["measured"]["phases_s"]
    assert ours["measured"]["smi_used_max_bytes"] == 10 * 1024**3  # the fake nvidia-smi's 10240 MiB
    # predicted against measured: the errors are the file's own numbers
    for rec in (ours, hf):
        assert rec["predicted"]["gpu"] == "H100 SXM" and rec["predicted"]["tokens_per_s"] > 0
        for key, pred_key in report.COMPARED.items():
            pred, meas = rec["predicted"][pred_key], rec["measured"][key]
            if isinstance(meas, (int, float)) and meas > 0:
                assert math.isclose(rec["errors"][key], (pred / meas - 1) * 100, rel_tol=1e-9)
            else:
                assert rec["errors"][key] is None
    assert math.isclose(hf["ratio_ours_over_hf"], ours["measured"]["tokens_per_s"] / hf["measured"]["tokens_per_s"])
    # the product's sampler paired with nvidia-smi: the fake Hopper and the fake smi agree
    nv = ours["measured"]["nvml"]
    assert nv["samples"] >= 2 and nv["gpm"] is True and nv["nvlink_links"] == 18
    for field in ("util_pct", "mem_used_bytes", "sm_clock_mhz", "power_w", "temp_c"):
        assert nv["both"][field]["pairs"] == nv["samples"] and nv["both"][field]["max_abs_diff"] == 0
    assert nv["both"]["throttle_reasons"]["agree"] == nv["samples"]
    assert nv["both"]["throttle_reasons"]["nvml_names"] == ["power_cap"]
    assert nv["nvml_only"]["tensor_active_pct"]["mean"] == pytest.approx(42.25)
    assert nv["smi_unsupported_fields"] == ["pcie.link.width.current"]  # refused, then left out
    # what could not run here says why; the OOM probe still has the planner's verdict
    qlora = recs["qlora-1b-s2048"]
    if importlib.util.find_spec("bitsandbytes") is None:
        assert qlora["status"] == "skipped" and qlora["reason"] == BNB_CARRY
    else:  # bitsandbytes' CPU backend: the random model is saved, loaded in 4 bit and trained
        assert qlora["status"] == "measured", qlora.get("log_tail")
        assert 0 < qlora["measured"]["trainable_params"] < qlora["measured"]["params"]
    oom = recs["oom-1b-s2048"]
    assert oom["status"] == "skipped" and oom["predicted"]["fits"] is False
    assert "does not fit" in oom["oom_verdict"]
    assert recs["lora-1b-s2048"]["reason"] == "not selected (--only)"
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} |" in summary for name in recs)


def test_a_configuration_over_the_time_left_is_skipped_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["--dry-run", "--out", str(out), "--time-limit-s", "30", "--only", "full-1b-s2048"])
    assert code == 1  # nothing measured
    doc = _load(out)
    _check_schema(doc)
    first = doc["records"][0]
    assert first["status"] == "skipped" and first["reason"].startswith("out of time: it needs about 30 s (budget 90 s)")
    assert first["predicted"]["tokens_per_s"] > 0  # planned even when not run
    assert all(r["status"] == "skipped" for r in doc["records"])


def _gpu_doc() -> dict:
    """A results.json as a GPU run writes it: one measured row, one skipped."""
    settings = {**matrix.rows(False)[0], "device": "cuda", "precision": "bf16-mixed", "warmup_steps": 3, "steps": 10}
    measured = {
        "tokens_per_s": 30000.0,
        "step_time_s": 0.27,
        "mfu": 0.3,
        "hfu": 0.3,
        "peak_allocated_bytes": 40 * 1024**3,
        "peak_reserved_bytes": 44 * 1024**3,
        "smi_used_max_bytes": 45 * 1024**3,
    }
    predicted = {"tokens_per_s": 41562.0, "peak_allocated_bytes": 44 * 1024**3}
    return {
        "schema": report.SCHEMA,
        "environment": {
            "dry_run": False,
            "gpu_name": "NVIDIA H100 80GB HBM3",
            "gpu_catalog": "H100 SXM",
            "driver": "580.159.04",
            "torch": "2.11.0+cu130",
            "commit": "0123456789abcdef",
            "date": "2026-11-27T18:00:00+00:00",
        },
        "records": [
            {
                "name": settings["name"],
                "status": "measured",
                "settings": settings,
                "measured": measured,
                "predicted": predicted,
            },
            {"name": "qlora-1b-s2048", "status": "skipped", "reason": "no bitsandbytes", "settings": settings},
        ],
    }


def test_record_appends_measured_rows_once_and_the_accuracy_benchmark_scores_them(tmp_path: Path) -> None:
    results, table = tmp_path / "results", tmp_path / "gpu_check.csv"
    results.mkdir()
    (results / "results.json").write_text(json.dumps(_gpu_doc()))
    assert report.record(results, table) == 1
    assert report.record(results, table) == 0  # the same run again adds nothing
    with table.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    row = rows[0]
    assert (row["gpu"], row["date"], row["commit"], row["engine"]) == (
        "NVIDIA H100 80GB HBM3",
        "2026-11-27",
        "0123456789abcdef",
        "bundled",
    )
    assert (row["checkpointing"], row["seq_len"], row["tokens_per_s"], row["peak_allocated_gib"]) == (
        "none",
        "2048",
        "30000",
        "40",
    )

    spec = importlib.util.spec_from_file_location("planner_accuracy", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    speed, memory = module.measured_rows(table)
    assert [r.measured for r in speed] == [30000.0] and [r.measured for r in memory] == [40.0]
    assert {r.source for r in speed} == {"gpu-check H100 SXM 2026-11-27"}
    tables = module.measured_figures(table)
    score = next(iter(tables.values()))["overall (rows)"]
    assert score.rows == 1
    assert math.isclose(score.mape, abs(module.predict_speed(speed[0]) / 30000.0 - 1) * 100)
    assert module.measured_figures(tmp_path / "none.csv") == {}


def test_record_refuses_a_dry_run(tmp_path: Path) -> None:
    doc = _gpu_doc()
    doc["environment"]["dry_run"] = True
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="dry run"):
        report.record(tmp_path, tmp_path / "gpu_check.csv")
    assert not (tmp_path / "gpu_check.csv").exists()


@pytest.mark.parametrize(
    ("script", "status", "reason"),
    [
        (
            "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate'); sys.exit(1)",
            "oom",
            "CUDA out of memory",
        ),
        ("import sys; sys.exit(3)", "failed", "exit 3"),
        ("import time; time.sleep(600)", "timed_out", "stopped at its budget of 1 s"),
    ],
)
def test_a_worker_that_runs_out_of_memory_fails_or_overruns_is_told_apart(
    tmp_path: Path, script: str, status: str, reason: str
) -> None:
    got = run_worker({"name": "probe"}, tmp_path, timeout_s=1, worker=("-c", script))
    assert (got["status"], got["reason"]) == (status, reason)
    assert "measured" not in got


def test_a_worker_that_writes_its_figures_is_measured(tmp_path: Path) -> None:
    script = "import json, sys; open(sys.argv[2], 'w').write(json.dumps({'tokens_per_s': 5.0}))"
    got = run_worker({"name": "ok"}, tmp_path, timeout_s=60, worker=("-c", script))
    assert got["status"] == "measured" and got["measured"] == {"tokens_per_s": 5.0}


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine would run the check")
def test_without_a_gpu_the_check_refuses_and_names_the_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "--dry-run" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
