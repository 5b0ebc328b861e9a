"""`gpuplanner sweep size`: the compute-optimal model a budget buys, against a hand calculation."""

from __future__ import annotations

import json

import pytest

from gpuplanner.cli import main


def size(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sweep", "size", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_buys_the_hand_computed_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = size(
        capsys, "--budget-usd", "1000", "--price", "2", "--peak-tflops", "100", "--mfu", "0.5", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    # $1,000 / $2 = 500 GPU-hours; x 3,600 s x 100e12 FLOP/s x 0.5 = 9e19 FLOPs
    flops = 500 * 3600 * 100e12 * 0.5
    tokens = 1.7424 * flops**0.5005  # Chinchilla: D = 1.7424 C^0.5005, N = C / 6D
    params = flops / (6 * tokens)
    assert doc["compute"] == {
        "gpu_hours": 500.0,
        "binding_cap": "budget_usd",
        "flops": pytest.approx(flops),
        "usd_per_gpu_hour": 2.0,
        "peak_tflops": 100.0,
        "mfu": 0.5,
    }
    assert doc["model"]["params"] == pytest.approx(params, rel=1e-6)
    assert doc["model"]["tokens"] == pytest.approx(tokens, rel=1e-6)
    assert doc["run"] == {"hours": 500.0, "gpu_hours": 500.0, "cost_usd": 1000.0}
    assert doc["sources"]["price"] == "given (--price)" and "Chinchilla" in doc["sources"]["formula"]


def test_the_gpu_hour_cap_binds_when_it_is_smaller(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = size(
        capsys, "--budget-usd", "1000", "--max-gpu-hours", "12", "--gpu", "H100 SXM", "--gpus", "4", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["compute"]["binding_cap"] == "max_gpu_hours" and doc["compute"]["gpu_hours"] == 12.0
    assert doc["run"]["hours"] == 3.0  # 12 GPU-hours on 4 GPUs
    assert doc["compute"]["peak_tflops"] == pytest.approx(989.5) and doc["compute"]["mfu"] == 0.4
    assert "H100 SXM" in doc["sources"]["peak_tflops"] and doc["sources"]["price"].startswith("catalog: cheapest")
    assert doc["run"]["cost_usd"] == pytest.approx(12 * doc["compute"]["usd_per_gpu_hour"], abs=0.01)


def test_text_report_names_every_source(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = size(capsys, "--budget-usd", "10000")
    assert code == 0
    assert "compute-optimal model" in out and "tokens per parameter" in out
    for label in ("price", "peak", "MFU", "sizes"):
        assert f"  {label}" in out


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ([], "--budget-usd: give a budget"),
        (["--budget-usd", "100", "--price", "2", "--peak-tflops", "50"], "--mfu: without a catalog GPU"),
        (["--budget-usd", "100", "--gpu", "no-such-gpu"], "--gpu:"),
        (["--budget-usd", "100", "--mfu", "1.5"], "--mfu: must be a share between 0 and 1"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], flags: list[str], needle: str) -> None:
    code, out, err = size(capsys, *flags)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1
