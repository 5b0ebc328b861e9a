"""The Runs pane's texts for one run (ui/run_status_text.py, no Qt): what each label says for a run's
telemetry, a failure and a measurement."""

from __future__ import annotations

from gpuplanner.ui.runs.run_status_text import (
    elapsed_eta,
    failure_text,
    measured_text,
    progress,
    spend_line,
    state_line,
)
from gpuplanner.ui.runs.run_telemetry import RunTelemetry


def telemetry(price: float | None, steps: int) -> RunTelemetry:
    tel = RunTelemetry(1)
    config = {} if price is None else {"price_per_gpu_hour": price}
    tel.add_records([{"seq": 0, "t": 0.0, "kind": "run_start", "steps_total": 100, "config": config}])
    tel.add_records(
        [
            {"seq": i, "t": float(i * 10), "kind": "step", "step": i, "loss": 2.0, "tokens_per_s": 1000.0}
            for i in range(1, steps + 1)
        ]
    )
    return tel


def test_progress_eta_and_spend_of_a_priced_run() -> None:
    tel = telemetry(price=36.0, steps=25)  # 25 of 100 steps in 250 s at $36 an hour: $2.50 so far
    tel.budget_usd = 20.0
    tel.planned_cost_usd = 9.0
    assert progress(tel, "running") == (250, "step 25 of 100 (25%)")
    assert elapsed_eta(tel, "running") == "Elapsed 4 min · ETA 12 min"  # 250 s done, 750 s to go
    assert elapsed_eta(tel, "stopped").endswith("ETA —")  # no ETA once the run is not running
    assert spend_line(tel, "running") == "Spend $2.50 of budget $20.00 (12%) · plan $9.00 · projected $10.00"
    assert spend_line(tel, "finished") == "Spend $2.50 of budget $20.00 (12%) · plan $9.00"


def test_a_run_without_a_price_has_no_spend_and_waits_for_its_first_step() -> None:
    tel = telemetry(price=None, steps=0)
    assert spend_line(tel, "running") == "Spend: no price (none set for this host)"  # never $0
    assert progress(tel, "running") == (0, "waiting for the first step…")
    assert progress(tel, "failed") == (0, "—")
    assert state_line("gpu-box", "failed", tel, 3) == "on gpu-box · <b>failed</b>, exit 3"


def test_failure_text_before_and_after_the_history_answers() -> None:
    assert failure_text(None, 1, None) == ("Failed (exit 1): reading the error from the host…", "")
    stored = {"error": "CUDA out of memory", "stderr_tail": "Traceback\nOOM", "exit_code": 1}
    assert failure_text(stored, None, None) == ("Failed (exit 1): CUDA out of memory", "Traceback\nOOM")
    assert failure_text({"error": None, "stderr_tail": ""}, 2, "killed") == (
        "Failed (exit 2): killed",
        "(the trainer wrote nothing to stderr)",
    )


def test_measured_text_says_whether_the_planner_can_use_it() -> None:
    result = {"device": "cuda", "precision": "bf16-mixed", "tokens_per_s": 12345.6, "step_time_s": 0.25, "mfu": 0.41}
    recorded = measured_text({**result, "recorded_id": 7, "recorded_gpu_type": "H100 SXM"}, "box")
    assert recorded.startswith("Measured on box (cuda, bf16-mixed): 12,346 tokens/s, 250 ms per step, MFU 41.0%.")
    assert "Recorded as bench result #7 for H100 SXM" in recorded
    unknown = measured_text({**result, "recorded_id": 8, "recorded_gpu_type": "X1", "catalog_knows_gpu": False}, "box")
    assert "the catalog knows no GPU named 'X1'" in unknown
    assert measured_text({**result, "not_recorded": "CPU run"}, "box").endswith("Not recorded (CPU run).")
