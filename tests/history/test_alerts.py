"""Alerts and their diagnoses on constructed telemetry streams: each rule fires on a stream built to
trigger it and stays silent on a healthy one; the settings change what fires; diagnoses name the
cause, the setting and the run's own numbers; alerts are stored with the run."""

from __future__ import annotations

from typing import Any

import pytest
from sqlite_utils import Database

from gpuplanner.history import ingest_records
from gpuplanner.history.alert_rules import AlertSettings, SettingsError
from gpuplanner.history.alerts import (
    current_alerts,
    refresh_alerts,
    run_alerts,
    store_alerts,
    stored_alerts,
    stored_settings,
)
from gpuplanner.history.diagnosis import PlannerModel, RunContext
from gpuplanner.history.runs import create_run, delete_run
from tests.history.streams import GIB, StreamBuilder

CONFIG = {"model": "gpt2", "micro_batch": 8, "grad_accum": 1, "seq_len": 1024, "num_workers": 2, "precision": "auto"}


def _start(s: StreamBuilder, gpus: int = 1, *, config: dict[str, Any] | None = None, **fields: Any) -> None:
    s.add(
        "run_start",
        0.0,
        config=config if config is not None else CONFIG,
        host="box",
        gpus=[{"index": i, "name": "NVIDIA H100 80GB HBM3", "mem_total_bytes": 80 * GIB} for i in range(gpus)],
        cpu_count=fields.pop("cpu_count", 16),
        precision=fields.pop("precision", "bf16-mixed"),
        steps_total=fields.pop("steps_total", 10_000),
        device="NVIDIA H100 80GB HBM3",
        **fields,
    )


def _run(db: Database, s: StreamBuilder, gpus: int = 1, price: float | None = 4.0, gpu_type: str = "H100 SXM") -> int:
    run_id = create_run(db, gpu_type=gpu_type, gpu_count=gpus, price_usd_per_gpu_hour=price)
    ingest_records(db, run_id, s.records, batch_size=97)  # minute rows survive batch boundaries
    return run_id


def _steps(s: StreamBuilder, minutes: int, step_time: float = 1.0, wait: float = 0.0, every: float = 60.0) -> None:
    for i in range(int(minutes * 60 / every)):
        s.step(
            i * every + 0.5,
            i + 1,
            samples_total=8 * (i + 1),
            tokens_total=8192 * (i + 1),
            step_time_s=step_time,
            data_wait_s=wait,
        )


def _kinds(alerts: list[Any]) -> list[str]:
    return [a.kind for a in alerts]


# ----------------------------------------------------------------------------- low utilisation


def test_alternating_zero_and_eighty_percent_gpu_alerts_on_its_average(db: Database) -> None:
    """0%, 80%, 0%, 80% ... every 15 s: never 10 minutes all under 50%, but 40% on average for 90 minutes."""
    s = StreamBuilder()
    _start(s)
    for i in range(90 * 4):
        s.gpu(i * 15.0, 0, 0.0 if i % 2 == 0 else 80.0)
    _steps(s, 90)
    alerts = run_alerts(db, _run(db, s))
    assert _kinds(alerts) == ["low_util"]
    (alert,) = alerts
    assert alert.gpu_index == 0
    assert alert.detail["avg_util_pct"] == pytest.approx(40.0)
    assert alert.value == pytest.approx(40.0)  # the lowest window average
    assert 90 <= alert.minutes <= 91  # whole minutes: 90 minutes of samples touch 91 clock minutes
    assert "averaged 40% utilisation over 9" in alert.message


def test_healthy_gpu_and_short_runs_stay_silent(db: Database) -> None:
    s = StreamBuilder()
    _start(s)
    for i in range(90 * 4):
        s.gpu(i * 15.0, 0, 92.0 if i % 2 else 88.0)
    _steps(s, 90)
    assert run_alerts(db, _run(db, s)) == []
    short = StreamBuilder()  # 40% for 50 minutes: the 60-minute window is never full
    _start(short)
    for i in range(50 * 2):
        short.gpu(i * 30.0, 0, 40.0)
    assert run_alerts(db, _run(db, short)) == []


def test_the_settings_change_what_fires(db: Database) -> None:
    s = StreamBuilder()
    _start(s)
    for i in range(90 * 2):
        s.gpu(i * 30.0, 0, 40.0, mem_used=70 * GIB)  # 87.5% of 80 GiB
    for i in range(30):
        s.step(i * 60.0 + 1, i + 1, i + 1, i + 1, step_time_s=1.0, data_wait_s=0.3)
    run_id = _run(db, s)
    assert _kinds(run_alerts(db, run_id)) == ["low_util", "mem_pressure", "input_bound"]
    quiet = AlertSettings(low_util_pct=35, mem_pct=90, data_wait_pct=35)
    assert run_alerts(db, run_id, quiet) == []
    assert _kinds(run_alerts(db, run_id, AlertSettings(low_util_minutes=120))) == ["mem_pressure", "input_bound"]
    assert _kinds(run_alerts(db, run_id, AlertSettings(low_util_minutes=30))) == [
        "low_util",
        "mem_pressure",
        "input_bound",
    ]


def test_bad_settings_name_their_field() -> None:
    with pytest.raises(SettingsError, match="low_util_pct: 0 is outside 1 to 100") as err:
        AlertSettings(low_util_pct=0)
    assert err.value.field == "low_util_pct"
    with pytest.raises(SettingsError, match="comm_factor: needs a number"):
        AlertSettings.from_dict({"comm_factor": "fast", "unknown": 1})


# ----------------------------------------------------------------------------- memory, input, throttling


def test_memory_pressure_fires_above_85_percent_with_a_micro_batch_that_keeps_the_effective_batch(db: Database) -> None:
    s = StreamBuilder()
    _start(s)
    for i in range(30):
        s.gpu(i * 60.0, 0, 95.0, mem_used=(72 if 10 <= i < 14 else 40) * GIB)
    _steps(s, 30)
    alerts = run_alerts(db, _run(db, s))
    assert _kinds(alerts) == ["mem_pressure"]
    (alert,) = alerts
    assert alert.minutes == 4 and alert.value == pytest.approx(0.9)
    d = alert.diagnosis
    assert d["cause"] == "memory"
    assert "micro-batch from 8 to 4" in d["text"] and "accumulation to 2" in d["text"]
    assert d["plan_inputs"]["micro_batch"] == 4 and d["plan_inputs"]["grad_accum"] == 2
    assert d["saving_hours"] is not None and d["saving_hours"] <= 0  # smaller micro-batches cost time
    healthy = StreamBuilder()
    _start(healthy)
    for i in range(30):
        healthy.gpu(i * 60.0, 0, 95.0, mem_used=64 * GIB)  # 80%
    assert run_alerts(db, _run(db, healthy)) == []


def test_input_bound_diagnosis_names_workers_cores_and_the_saving(db: Database) -> None:
    s = StreamBuilder()
    _start(s, cpu_count=16)
    for i in range(30):
        s.gpu(i * 60.0, 0, 70.0)
    _steps(s, 30, step_time=1.0, wait=0.38)
    run_id = _run(db, s, price=4.0)
    alerts = run_alerts(db, run_id)
    assert _kinds(alerts) == ["input_bound"]
    (alert,) = alerts
    assert alert.value == pytest.approx(0.38)
    d = alert.diagnosis
    assert d["cause"] == "input_pipeline"
    assert d["text"].startswith(
        "Data wait is 38% of step time with 2 loader workers on 16 cores: raise the loader workers to 15"
    )
    assert d["trainer_settings"] == {"num_workers": 15}
    remaining = 10_000 - 30
    assert d["saving_hours"] == pytest.approx(remaining * 0.38 / 3600)
    assert d["saving_usd"] == pytest.approx(remaining * 0.38 / 3600 * 4.0)
    assert "$" in d["text"] and "remaining 9,970 steps" in d["text"]
    fine = StreamBuilder()
    _start(fine)
    for i in range(30):
        fine.gpu(i * 60.0, 0, 95.0)
    _steps(fine, 30, wait=0.02)
    assert run_alerts(db, _run(db, fine)) == []


@pytest.mark.parametrize(("bits", "cause", "words"), [(0x4, "power", "power"), (0x40, "thermal", "temperature")])
def test_throttling_names_the_gpu_the_cause_and_its_share(db: Database, bits: int, cause: str, words: str) -> None:
    s = StreamBuilder()
    _start(s, gpus=4)
    for i in range(60):
        for g in range(4):
            throttled = g == 3 and i % 5 < 2  # GPU 3: 24 of 60 minutes
            s.gpu(i * 60.0, g, 95.0, throttle=bits if throttled else 0, clock=1400 if throttled else 1980)
    _steps(s, 60)
    alerts = run_alerts(db, _run(db, s, gpus=4))
    assert _kinds(alerts) == ["throttle"]
    (alert,) = alerts
    assert alert.gpu_index == 3 and alert.detail["cause"] == cause
    assert alert.value == pytest.approx(0.4) and alert.minutes == 24
    assert f"GPU 3 on n0 throttled for {words} 40% of the time" in alert.message
    d = alert.diagnosis
    assert d["cause"] == cause
    loss = 0.4 * (1 - 1400 / 1980)
    assert d["saving_hours"] == pytest.approx((10_000 - 60) * 1.0 * loss / 3600)
    quiet = run_alerts(db, _run(db, s, gpus=4), AlertSettings(throttle_minutes=30))
    assert quiet == []


# ----------------------------------------------------------------------------- multi-GPU


def test_one_idle_gpu_of_eight(db: Database) -> None:
    s = StreamBuilder()
    _start(s, gpus=8)
    for i in range(30):
        for g in range(8):
            s.gpu(i * 60.0, g, 0.0 if g == 5 else 93.0)
    _steps(s, 30, step_time=2.0)
    alerts = run_alerts(db, _run(db, s, gpus=8, price=3.0))
    idle = [a for a in alerts if a.kind == "idle_gpu"]
    assert [a.gpu_index for a in idle] == [5]
    assert idle[0].minutes == 30 and idle[0].value == pytest.approx(1.0)
    d = idle[0].diagnosis
    assert d["cause"] == "idle_gpu" and d["plan_inputs"]["gpus"] == 7
    assert d["saving_hours"] == 0.0
    assert d["saving_usd"] == pytest.approx((10_000 - 30) * 2.0 / 3600 * 3.0)
    healthy = StreamBuilder()
    _start(healthy, gpus=8)
    for i in range(30):
        for g in range(8):
            healthy.gpu(i * 60.0, g, 90.0)
    assert run_alerts(db, _run(db, healthy, gpus=8)) == []


def _model_step(gpus: int) -> float:
    ctx = RunContext(0, "running", gpus, "H100 SXM", 4.0, CONFIG, "bf16-mixed")
    step = PlannerModel(ctx).step_s(gpus=1)
    assert step is not None
    return step


def test_communication_bound_steps_far_above_the_single_gpu_model(db: Database) -> None:
    model = _model_step(8)
    s = StreamBuilder()
    _start(s, gpus=8)
    for i in range(30):
        for g in range(8):
            s.gpu(i * 60.0, g, 30.0)
    _steps(s, 30, step_time=model * 5)
    alerts = run_alerts(db, _run(db, s, gpus=8))
    comm = [a for a in alerts if a.kind == "comm_bound"]
    assert len(comm) == 1 and comm[0].value == pytest.approx(5.0)
    d = comm[0].diagnosis
    assert d["cause"] == "communication"
    assert d["plan_inputs"]["gpus"] == 4 and d["plan_inputs"]["grad_accum"] == 2
    assert d["saving_usd"] > 0
    fast = StreamBuilder()  # the same utilisation but steps at the model's pace: not communication
    _start(fast, gpus=8)
    for i in range(30):
        for g in range(8):
            fast.gpu(i * 60.0, g, 30.0)
    _steps(fast, 30, step_time=model * 1.1)
    assert "comm_bound" not in _kinds(run_alerts(db, _run(db, fast, gpus=8)))


# ----------------------------------------------------------------------------- diagnoses from the planner


def test_fp32_on_a_bf16_gpu(db: Database) -> None:
    s = StreamBuilder()
    _start(s, config={**CONFIG, "precision": "fp32"}, precision="fp32")
    for i in range(30):
        s.gpu(i * 60.0, 0, 97.0)
    _steps(s, 30, step_time=2.0)
    alerts = run_alerts(db, _run(db, s, gpu_type="A100 80GB"))
    assert _kinds(alerts) == ["precision"]
    (alert,) = alerts
    speedup = alert.value
    assert speedup > 1.5
    assert f"bf16-mixed is about {speedup:.1f}x faster here" in alert.message and "A100 80GB" in alert.message
    d = alert.diagnosis
    assert d["cause"] == "fp32" and d["plan_inputs"]["precision"] == "bf16-mixed"
    assert d["saving_hours"] == pytest.approx((10_000 - 30) * 2.0 * (1 - 1 / speedup) / 3600)
    bf16 = StreamBuilder()
    _start(bf16)
    for i in range(30):
        bf16.gpu(i * 60.0, 0, 97.0)
    assert run_alerts(db, _run(db, bf16, gpu_type="A100 80GB")) == []


def test_low_utilisation_with_a_small_micro_batch_suggests_a_larger_one(db: Database) -> None:
    config = {**CONFIG, "micro_batch": 1, "grad_accum": 8, "seq_len": 512}
    s = StreamBuilder()
    _start(s, config=config)
    for i in range(70):
        s.gpu(i * 60.0, 0, 35.0, mem_used=int(0.2 * 80 * GIB))
    _steps(s, 70, step_time=3.0, wait=0.03)
    alerts = run_alerts(db, _run(db, s))
    assert _kinds(alerts) == ["low_util"]
    d = alerts[0].diagnosis
    assert d["cause"] == "small_micro_batch"
    mb, accum = d["plan_inputs"]["micro_batch"], d["plan_inputs"]["grad_accum"]
    assert mb > 1 and mb * accum == 8  # the effective batch is kept
    assert f"raise the micro-batch to {mb} and lower accumulation from 8 to {accum}" in d["text"]
    assert "uses 20% of memory" in d["text"]
    assert d["saving_hours"] > 0 and d["saving_usd"] > 0


def test_low_utilisation_from_data_wait_points_at_the_input(db: Database) -> None:
    s = StreamBuilder()
    _start(s)
    for i in range(70):
        s.gpu(i * 60.0, 0, 45.0)
    _steps(s, 70, step_time=1.0, wait=0.15)  # under the input-bound alert, enough to explain the low average
    alerts = run_alerts(db, _run(db, s))
    assert _kinds(alerts) == ["low_util"]
    assert alerts[0].diagnosis["cause"] == "input_pipeline"
    assert "Data wait is 15% of step time with 2 loader workers on 16 cores" in alerts[0].diagnosis["text"]


# ----------------------------------------------------------------------------- stored with the run


def test_alerts_are_stored_with_the_run_and_rewritten_only_on_change(db: Database) -> None:
    s = StreamBuilder()
    _start(s)
    for i in range(90 * 2):
        s.gpu(i * 30.0, 0, 40.0)
    run_id = _run(db, s)
    assert stored_alerts(db, run_id) == []
    alerts = refresh_alerts(db, run_id)
    stored = stored_alerts(db, run_id)
    assert _kinds(stored) == ["low_util"] and stored[0].message == alerts[0].message
    assert stored[0].diagnosis == alerts[0].diagnosis
    assert stored_settings(db, run_id) == AlertSettings()
    assert store_alerts(db, run_id, alerts, AlertSettings()) is False  # nothing changed: no write
    refresh_alerts(db, run_id, AlertSettings(low_util_pct=30))
    assert stored_alerts(db, run_id) == []
    refresh_alerts(db, run_id)
    delete_run(db, run_id)
    assert db.execute("SELECT COUNT(*) FROM run_alerts").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM gpu_minutes").fetchone()[0] == 0


def test_a_gpu_without_throttle_reasons_or_clocks_is_not_counted_as_unthrottled(db: Database) -> None:
    """An older GPU/driver reports no throttle reasons: no throttle shares at all (None, never 0)."""
    from gpuplanner.history.alerts import gpu_minutes

    s = StreamBuilder()
    _start(s)
    for i in range(20):
        s.add("gpu", i * 60.0, node="n0", index=0, util_pct=95.0, mem_used_bytes=GIB, mem_total_bytes=80 * GIB)
    run_id = _run(db, s)
    minutes = gpu_minutes(db, run_id)[("n0", 0)]
    assert len(minutes) == 20
    assert {(m.power_share, m.thermal_share, m.clock_mhz) for m in minutes} == {(None, None, None)}
    assert run_alerts(db, run_id) == []


def test_further_metrics_reach_the_rules_as_per_minute_means(db: Database) -> None:
    """The documented way in for a new metric: ``Rollups.add(..., extra=...)`` -> ``GpuMinute.metrics``."""
    from gpuplanner.history.alerts import gpu_minutes
    from gpuplanner.history.rollup import Rollups

    run_id = create_run(db)
    rollups = Rollups(db, run_id)
    for k in range(4):  # two minutes, two samples each; the second minute lacks the metric once
        t = 1_763_800_020.0 + k * 30.0  # 1_763_800_020 starts a minute
        rollups.add(t, "n0", 0, 50.0, None, None, None, False, extra={"sm_active_pct": None if k == 3 else 10.0 * k})
    rollups.save()
    db.conn.commit()
    minutes = gpu_minutes(db, run_id)[("n0", 0)]
    assert [m.metrics for m in minutes] == [{"sm_active_pct": 5.0}, {"sm_active_pct": 20.0}]


def test_an_unchanged_run_is_read_back_and_new_data_is_evaluated(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplanner.history.alerts as alerts_module

    s = StreamBuilder()
    _start(s)
    for i in range(90 * 2):
        s.gpu(i * 30.0, 0, 40.0)
    s.add("run_end", 90 * 60.0, status="finished")
    run_id = _run(db, s)
    # the ingest evaluated the ended run once and stored its alerts under the default settings
    assert stored_settings(db, run_id) == AlertSettings() and _kinds(stored_alerts(db, run_id)) == ["low_util"]
    evaluated: list[int] = []
    real = alerts_module.run_alerts

    def counting(*args: Any, **kwargs: Any) -> Any:
        evaluated.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(alerts_module, "run_alerts", counting)
    fresh = current_alerts(db, run_id)
    assert evaluated == [] and [a.as_dict() for a in fresh] == [a.as_dict() for a in real(db, run_id)]
    assert _kinds(current_alerts(db, run_id, AlertSettings(low_util_pct=30))) == [] and evaluated == [1]
    more = StreamBuilder()  # memory climbs after the stored evaluation: the stamp changed
    for i in range(3):
        more.add(
            "gpu",
            100 * 60.0 + i * 60,
            node="n0",
            index=0,
            util_pct=40.0,
            mem_used_bytes=79 * GIB,
            mem_total_bytes=80 * GIB,
        )
    for record in more.records:
        record["seq"] += len(s.records)
    ingest_records(db, run_id, more.records)
    assert "mem_pressure" in _kinds(current_alerts(db, run_id)) and evaluated == [1, 1]


def test_concurrent_evaluations_store_one_set_of_alerts(db_path: Any) -> None:
    """Two windows (connections, threads) refreshing one run at once: no duplicate, no lost alert."""
    import threading

    from gpuplanner.history import open_db

    with open_db(db_path) as first:
        s = StreamBuilder()
        _start(s)
        for i in range(90 * 2):
            s.gpu(i * 30.0, 0, 40.0, mem_used=70 * GIB)
        run_id = _run(first, s)
    errors: list[BaseException] = []

    def evaluate(settings: AlertSettings) -> None:
        try:
            with open_db(db_path) as db:
                for _ in range(5):
                    refresh_alerts(db, run_id, settings)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=evaluate, args=(AlertSettings(mem_pct=p),)) for p in (85, 95)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    with open_db(db_path) as db:
        kinds = _kinds(stored_alerts(db, run_id))
        settings = stored_settings(db, run_id)
        assert settings is not None
        assert kinds == (["low_util", "mem_pressure"] if settings.mem_pct == 85 else ["low_util"])
        assert db.execute("SELECT COUNT(*) FROM run_alert_state").fetchone()[0] == 1
