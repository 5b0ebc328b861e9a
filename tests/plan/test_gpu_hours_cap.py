"""`--max-gpu-hours` beside `--budget-usd` in `plan` and `compare`: options over the cap are marked."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

import pytest

from gpuplanner.cli import main
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import compare, recommendation
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanInputError, PlanRequest, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

# 200k samples at 500 samples/min = 6.667 h on the run's GPUs (the measured speed is for the whole run).
DIRECT = (
    "--params", "7B", "--samples", "100k", "--epochs", "2", "--seq-len", "1024", "--samples-per-min", "500",
    "--price", "2.5", "--spot-discount", "0.6", "--spot-overhead-pct", "10",
)  # fmt: skip
HOURS = 200_000 / 500 / 60


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("gpus", "cap", "ok"), [(2, 13.0, False), (2, 13.5, True), (1, 6.5, False), (1, 7.0, True)])
def test_plan_json_marks_the_gpu_hour_cap(capsys: pytest.CaptureFixture[str], gpus: int, cap: float, ok: bool) -> None:
    code, out, err = _run(capsys, "plan", *DIRECT, "--gpus", str(gpus), "--max-gpu-hours", str(cap), "--json")
    assert code == 0, err
    document = json.loads(out)
    # hand calculation: 6.667 h x GPUs; 2 GPUs = 13.33 GPU-hours, 1 GPU = 6.67
    assert document["runtime"]["gpu_hours"] == pytest.approx(HOURS * gpus, rel=1e-4)
    assert document["inputs"]["max_gpu_hours"] == cap
    assert document["gpu_hours_ok"] is ok
    assert document["budget_ok"] is None  # the two caps are separate verdicts


def test_plan_without_a_cap_says_null(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan", *DIRECT, "--json")
    assert code == 0
    document = json.loads(out)
    assert document["gpu_hours_ok"] is None and document["inputs"]["max_gpu_hours"] is None


def test_spot_checks_the_p90_gpu_hours(capsys: pytest.CaptureFixture[str]) -> None:
    # spot with a flat 10% overhead: 6.667 x 1.1 = 7.333 h on 1 GPU; on-demand 6.667 fits under 7
    code, out, _ = _run(capsys, "plan", *DIRECT, "--pricing", "spot", "--max-gpu-hours", "7", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["spot"]["p90_hours"] == pytest.approx(HOURS * 1.1, rel=1e-3)
    assert document["gpu_hours_ok"] is False
    code, out, _ = _run(capsys, "plan", *DIRECT, "--max-gpu-hours", "7", "--json")
    assert json.loads(out)["gpu_hours_ok"] is True


def test_plan_text_names_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan", *DIRECT, "--gpus", "2", "--max-gpu-hours", "12")
    assert code == 0
    assert "GPU-hours cap 12: OVER (on-demand)" in out


@pytest.mark.parametrize("value", ["0", "-3", "abc", "nan"])
def test_bad_cap_names_the_flag(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = _run(capsys, "plan", *DIRECT, f"--max-gpu-hours={value}")
    assert code == 2
    assert "--max-gpu-hours" in err
    with pytest.raises(PlanInputError) as info:
        PlanRequest(from_preset("gpt2"), TrainSetup(), Workload(samples=10), max_gpu_hours=-1.0)
    assert info.value.field == "max-gpu-hours"


def test_compare_marks_options_over_the_cap_like_over_budget() -> None:
    catalog = load_catalog()
    base = PlanRequest(from_preset("llama-3.1-8b"), TrainSetup(method="lora"), Workload(samples=100_000), gpu=None)
    free = compare(base, catalog)
    needed = sorted(row.plan.runtime.gpu_hours for row in free if row.usable and row.pricing == "on-demand")
    cap = needed[len(needed) // 2]  # half the on-demand options fit under it
    rows = compare(replace(base, max_gpu_hours=cap), catalog)
    over = [r for r in rows if r.pricing == "on-demand" and r.plan.fits and r.plan.on_demand is not None]
    assert over
    for row in over:
        expected = row.plan.runtime.gpu_hours <= cap
        assert row.plan.gpu_hours_ok is expected
        assert row.usable is (expected and row.plan.budget_ok is not False and row.plan.deadline_ok is not False)
        assert ("over the GPU-hour cap" in row.reason) is (not expected)
    assert any(not r.plan.gpu_hours_ok for r in over) and any(r.plan.gpu_hours_ok for r in over)
    assert "the GPU-hour cap" in recommendation(rows)


def test_compare_json_and_csv_carry_the_stable_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "compare", *DIRECT, "--gpu", "A100-80GB", "--max-gpu-hours", "10", "--json")
    assert code == 0, err
    rows = json.loads(out)
    by_gpus = {(r["gpus"], r["pricing"]): r for r in rows}
    one, two = by_gpus[(1, "on-demand")], by_gpus[(2, "on-demand")]
    assert one["within_gpu_hours"] is True and one["usable"] is True
    assert two["within_gpu_hours"] is False and two["usable"] is False and "over the GPU-hour cap" in two["reason"]
    code, out, _ = _run(capsys, "compare", *DIRECT, "--gpu", "A100-80GB", "--max-gpu-hours", "10", "--csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert {row["within_gpu_hours"] for row in table} >= {"True", "False"}


def test_make_plan_keeps_the_verdict_with_the_catalog() -> None:
    request = PlanRequest(
        from_preset("gpt2"), TrainSetup(gpus=4), Workload(samples=1_000_000), gpu="A100-80GB", max_gpu_hours=0.001
    )
    plan = make_plan(request, load_catalog())
    assert plan.runtime.gpu_hours > 0.001 and plan.gpu_hours_ok is False
