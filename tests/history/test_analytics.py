"""Analytics against hand-computed runs; alerts; planned vs actual; calibration; saved plans."""

from __future__ import annotations

import pytest
from sqlite_utils import Database

from gpuplanner.history import HistoryError, ingest_records
from gpuplanner.history.alerts import AlertSettings, run_alerts
from gpuplanner.history.analytics import summarize
from gpuplanner.history.calibration import lookup, measurements, record_bench
from gpuplanner.history.plans import delete_plan, get_plan, list_plans, planned_figures, save_plan
from gpuplanner.history.runs import create_run
from gpuplanner.plan.economics import diff_pct, unit_economics
from tests.history.streams import GIB, StreamBuilder, hand_computed_run

PLAN_DOC = {
    "inputs": {"model": "gpt2", "gpu": "H100 SXM", "gpus": 8},
    "memory": {"weights_gib": 1.0, "total_gib": 16.0, "capacity_gib": 80.0, "fits": True},
    "throughput": {"tokens_per_s": 800.0, "samples_per_min": 500.0, "source": "mfu"},
    "runtime": {"hours": 1.0, "gpu_hours": 8.0, "effective_batch": 64},
    "on_demand": {"hours": 1.0, "cost_usd": 64.0},
    "spot": {"hours": 1.2, "cost_usd": 30.0},
    "deadline_ok": True,
    "budget_ok": True,
    "warnings": [],
}


def test_unit_economics_of_the_issue_example() -> None:
    econ = unit_economics(
        gpus=8, hours=1.25, price_usd_per_gpu_hour=8.0, avg_util_pct=60.0, samples=200_000, tokens=None
    )
    assert econ.gpu_hours == pytest.approx(10.0)
    assert econ.effective_gpu_hours == pytest.approx(6.0)
    assert econ.cost_usd == pytest.approx(80.0)
    assert econ.cost_per_effective_gpu_hour_usd == pytest.approx(13.333, abs=0.001)
    assert econ.cost_per_sample_usd == pytest.approx(0.0004)
    assert econ.cost_per_million_tokens_usd is None
    assert unit_economics(gpus=1, hours=0.0, price_usd_per_gpu_hour=None, avg_util_pct=None).cost_usd is None
    assert diff_pct(2.0, 2.5) == pytest.approx(25.0) and diff_pct(0.0, 1.0) is None


def test_hand_computed_run_from_a_real_stream(db: Database) -> None:
    run_id = create_run(db, gpu_count=8, price_usd_per_gpu_hour=8.0, gpu_type="H100 SXM")
    ingest_records(db, run_id, hand_computed_run().records)
    s = summarize(db, run_id)
    assert s.status == "finished"
    assert s.hours == pytest.approx(1.25) and s.gpu_hours == pytest.approx(10.0)
    assert s.avg_util_pct == pytest.approx(60.0)
    assert s.effective_gpu_hours == pytest.approx(6.0)
    assert s.cost_usd == pytest.approx(80.0)
    assert s.cost_per_effective_gpu_hour_usd == pytest.approx(80 / 6)
    assert s.cost_per_sample_usd == pytest.approx(0.0004)
    assert s.cost_per_million_tokens_usd == pytest.approx(80 / 102.4)
    assert s.samples == 200_000 and s.tokens == 102_400_000
    assert s.util_histogram == [0, 0, 0, 0, 300, 0, 0, 0, 300, 0]
    assert s.idle_gpu_hours == 0.0 and s.interruptions == 0 and s.data_wait_pct == 0.0
    assert s.planned is None and s.alerts == []


def test_interruptions_idle_time_and_data_wait(db: Database) -> None:
    """1 GPU at $2/h: 0-1800 s running, preempted at 1800 (last checkpoint at 1500, step 10), back at 2400
    resuming from step 10, ends at 3600. Active 3000 s; downtime 600 s; lost work 300 s."""
    s = StreamBuilder()
    s.add("run_start", 0, config={}, gpus=1)
    for i in range(30):  # one sample a minute, 0..1740 s: first 10 idle (5%), rest busy (100%)
        s.gpu(i * 60.0, 0, 5.0 if i < 10 else 100.0)
    s.add("checkpoint", 1500, step=10, path="c10")
    s.step(1600, 11, samples_total=100, tokens_total=1000, step_time_s=2.0, data_wait_s=1.0)
    s.add("preempted", 1800)
    s.add("run_start", 2400, config={}, resumed_from_step=10)
    for i in range(20):
        s.gpu(2400 + i * 60.0, 0, 100.0)
    s.step(3500, 20, samples_total=300, tokens_total=3000, step_time_s=2.0, data_wait_s=0.0)
    s.add("run_end", 3600, status="finished")
    run_id = create_run(db, price_usd_per_gpu_hour=2.0)
    ingest_records(db, run_id, s.records)
    summary = summarize(db, run_id)
    assert summary.wall_hours == pytest.approx(1.0)
    assert summary.hours == pytest.approx(3000 / 3600)
    assert summary.cost_usd == pytest.approx(2.0 * 3000 / 3600)
    assert summary.interruptions == 1
    assert summary.interruption_hours == pytest.approx((600 + 300) / 3600)
    assert summary.avg_util_pct == pytest.approx((10 * 5 + 40 * 100) / 50)
    assert summary.idle_gpu_hours == pytest.approx(3000 / 3600 * 10 / 50)
    assert summary.data_wait_pct == pytest.approx(25.0)
    assert summary.samples == 300 and summary.gpu_count == 1


def test_alerts_low_util_memory_pressure_and_input_bound(db: Database) -> None:
    s = StreamBuilder()
    for i in range(40):  # GPU 0 under 50% from minute 5 to 20 (15 min), GPU 1 at 90% memory for 3 samples
        s.gpu(i * 60.0, 0, 30.0 if 5 <= i < 20 else 95.0)
        s.gpu(i * 60.0, 1, 95.0, mem_used=72 * GIB if 10 <= i < 13 else 10 * GIB, mem_total=80 * GIB)
        s.step(
            i * 60.0 + 1, i, samples_total=i, tokens_total=i, step_time_s=1.0, data_wait_s=0.5 if i % 4 == 0 else 0.0
        )
    run_id = create_run(db)
    ingest_records(db, run_id, s.records, batch_size=17)  # intervals survive batch boundaries
    settings = AlertSettings(low_util_minutes=10, data_wait_pct=10)
    alerts = {a.kind: a for a in run_alerts(db, run_id, settings)}
    assert set(alerts) == {"low_util", "mem_pressure", "input_bound"}
    assert alerts["low_util"].gpu_index == 0 and alerts["low_util"].minutes == pytest.approx(15.0)
    assert alerts["low_util"].value == 30.0
    assert alerts["mem_pressure"].gpu_index == 1 and alerts["mem_pressure"].minutes == pytest.approx(3.0)
    assert alerts["mem_pressure"].value == pytest.approx(0.9)
    assert alerts["input_bound"].value == pytest.approx(0.5 * 10 / 40)  # share of step time spent waiting
    wider = AlertSettings(low_util_minutes=30, data_wait_pct=10)  # 15 low minutes cannot pull 30 under 50%
    assert [a.kind for a in run_alerts(db, run_id, wider)] == ["mem_pressure", "input_bound"]


def test_saved_plans_and_planned_against_actual(db: Database) -> None:
    plan_id = save_plan(db, "gpt2 on 8xH100", PLAN_DOC)
    assert get_plan(db, plan_id).document == PLAN_DOC
    second = save_plan(db, "other", {"inputs": {}, "warnings": ["x"]})
    assert [p.id for p in list_plans(db)] == [second, plan_id]
    save_plan(db, "renamed", PLAN_DOC, plan_id=plan_id)
    assert (
        get_plan(db, plan_id).name == "renamed" and get_plan(db, plan_id).created_at <= get_plan(db, plan_id).updated_at
    )
    figures = planned_figures(PLAN_DOC)
    assert figures == {
        "hours": 1.0,
        "cost_usd": 64.0,
        "peak_mem_bytes": 16 * GIB,
        "tokens_per_s": 800.0,
        "samples_per_s": pytest.approx(500 / 60),
    }
    assert planned_figures(PLAN_DOC, "spot")["cost_usd"] == 30.0
    run_id = create_run(db, gpu_count=8, price_usd_per_gpu_hour=8.0, plan_id=plan_id, planned=figures)
    ingest_records(db, run_id, hand_computed_run().records)
    planned = summarize(db, run_id).planned
    assert planned is not None and planned["plan_id"] == plan_id
    assert planned["hours"] == {"planned": 1.0, "actual": 1.25, "diff_pct": pytest.approx(25.0)}
    assert planned["cost_usd"]["diff_pct"] == pytest.approx(25.0)
    assert planned["peak_mem_bytes"]["diff_pct"] == pytest.approx(25.0)  # 20 GiB measured vs 16 planned
    assert planned["tokens_per_s"]["diff_pct"] == pytest.approx(25.0)
    delete_plan(db, plan_id)
    assert summarize(db, run_id).planned["plan_id"] is None  # type: ignore[index]
    with pytest.raises(HistoryError):
        get_plan(db, plan_id)
    with pytest.raises(ValueError):
        save_plan(db, " ", PLAN_DOC)


def test_calibration_prefers_finished_runs_over_bench(db: Database) -> None:
    bench = record_bench(
        db,
        gpu_type="H100 SXM",
        model_name="gpt2",
        result={
            "tokens_per_s": 5000.0,
            "samples_per_s": 10.0,
            "peak_mem_reserved_bytes": 9 * GIB,
            "seq_len": 512,
            "micro_batch": 8,
            "mfu": 0.4,
        },
    )
    record_bench(db, gpu_type="L4", model_name="gpt2", result={"tokens_per_s": 700.0, "samples_per_s": 1.5})
    cal = lookup(db, "H100 SXM", "gpt2")
    assert cal is not None and cal.source == "bench" and cal.ids == (bench,)
    assert (cal.tokens_per_s, cal.samples_per_min, cal.peak_mem_bytes) == (5000.0, 600.0, 9 * GIB)
    running = create_run(db, gpu_type="H100 SXM", gpu_count=8)  # not finished: not used
    ingest_records(db, running, hand_computed_run().records[:200])
    assert lookup(db, "H100 SXM", "gpt2").source == "bench"  # type: ignore[union-attr]
    finished = create_run(db, gpu_type="H100 SXM", gpu_count=8)
    ingest_records(db, finished, hand_computed_run().records)
    cal = lookup(db, "H100 SXM", "gpt2")
    assert cal is not None and cal.source == "run" and cal.ids == (finished,)
    assert cal.tokens_per_s == 1000.0 and cal.samples_per_min == 600.0
    assert cal.tokens_per_s_per_gpu == 125.0 and cal.samples_per_min_per_gpu == 75.0
    assert cal.peak_mem_bytes == 20 * GIB and cal.gpu_count == 8
    everything = measurements(db)
    assert set(everything) == {
        ("H100 SXM", "gpt2", "full", 512, "16-bit"),
        ("H100 SXM", "gpt2", "full", None, "16-bit"),
        ("L4", "gpt2", "full", None, "16-bit"),
    }
    assert everything[("L4", "gpt2", "full", None, "16-bit")].source == "bench"
    assert lookup(db, "H100 SXM", "gpt2", seq_len=512).source == "bench"  # type: ignore[union-attr]
    assert lookup(db, "A10", "gpt2") is None
    assert lookup(db, "H100 SXM", "gpt2", method="lora") is None


def _finished_run(db: Database, *, seq_len: int, tokens_per_s: float, **config: object) -> int:
    from trainer.protocol import make_record

    run_id = create_run(db, gpu_type="A100 80GB", gpu_count=1)
    records = [make_record("run_start", 0, 100.0, config={"model_name": "llama-3-8b", "seq_len": seq_len, **config})]
    records += [
        make_record(
            "step",
            k,
            100.0 + k,
            step=k,
            loss=2.0,
            tokens_total=k * seq_len,
            samples_total=k,
            step_time_s=1.0,
            tokens_per_s=tokens_per_s,
            samples_per_s=tokens_per_s / seq_len,
        )
        for k in range(1, 4)
    ]
    records.append(make_record("run_end", 4, 104.0, status="finished"))
    ingest_records(db, run_id, records)
    return run_id


def test_calibration_keeps_methods_and_sequence_lengths_apart(db: Database) -> None:
    full_2k = _finished_run(db, seq_len=2048, tokens_per_s=3000.0)
    full_2k_again = _finished_run(db, seq_len=2048, tokens_per_s=3400.0)
    full_8k = _finished_run(db, seq_len=8192, tokens_per_s=2000.0)
    lora = _finished_run(db, seq_len=2048, tokens_per_s=9000.0, lora_rank=16)
    imported = _finished_run(db, seq_len=2048, tokens_per_s=7000.0, method="QLoRA")
    cal = lookup(db, "A100 80GB", "llama-3-8b", seq_len=2048)
    assert cal is not None and cal.ids == (full_2k, full_2k_again) and cal.tokens_per_s == 3200.0  # median of 2
    assert lookup(db, "A100 80GB", "llama-3-8b", seq_len=8192).ids == (full_8k,)  # type: ignore[union-attr]
    assert lookup(db, "A100 80GB", "llama-3-8b", method="lora").ids == (lora,)  # type: ignore[union-attr]
    assert lookup(db, "A100 80GB", "llama-3-8b", method="qlora").ids == (imported,)  # type: ignore[union-attr]
    assert lookup(db, "A100 80GB", "llama-3-8b", seq_len=4096) is None
    bench = record_bench(
        db,
        gpu_type="A100 80GB",
        model_name="llama-3-8b",
        result={"tokens_per_s": 8000.0, "seq_len": 1024, "params": 100, "trainable_params": 4},
    )
    assert lookup(db, "A100 80GB", "llama-3-8b", method="lora", seq_len=1024).ids == (bench,)  # type: ignore[union-attr]
    assert set(measurements(db, method="full")) == {
        ("A100 80GB", "llama-3-8b", "full", 2048, "16-bit"),
        ("A100 80GB", "llama-3-8b", "full", 8192, "16-bit"),
    }


def test_calibration_keeps_fp32_and_16_bit_apart(db: Database) -> None:
    auto = _finished_run(db, seq_len=2048, tokens_per_s=3000.0, precision="auto")  # 16-bit on every GPU
    bf16 = _finished_run(db, seq_len=2048, tokens_per_s=3100.0, precision="bf16")
    fp32 = _finished_run(db, seq_len=2048, tokens_per_s=600.0, precision="fp32")
    assert lookup(db, "A100 80GB", "llama-3-8b", precision="bf16-mixed").ids == (auto, bf16)  # type: ignore[union-attr]
    assert lookup(db, "A100 80GB", "llama-3-8b", precision="fp32").ids == (fp32,)  # type: ignore[union-attr]
    bench = record_bench(
        db,
        gpu_type="A100 80GB",
        model_name="llama-3-8b",
        result={"tokens_per_s": 650.0, "seq_len": 4096, "precision": "float32"},
    )
    assert lookup(db, "A100 80GB", "llama-3-8b", precision="fp32", seq_len=4096).ids == (bench,)  # type: ignore[union-attr]
    assert lookup(db, "A100 80GB", "llama-3-8b", precision="bf16", seq_len=4096) is None
