"""Plots across a preemption: lines break over the time no process ran (live and history), the history's
memory plot keeps every segment in its y range, and a user's Stop is not called a preemption."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuplanner.app.run_series import RunSeries
from gpuplanner.ui.history.run_plots import RunPlots
from gpuplanner.ui.runs.live_plots import LivePlots
from gpuplanner.ui.runs.plot_lines import break_at_gaps
from gpuplanner.ui.runs.run_telemetry import RunTelemetry


def _segment(seq: int, t0: float, n: int, mem_gib: float, step0: int) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        t = t0 + i
        records.append(
            {
                "seq": seq,
                "t": t,
                "kind": "gpu",
                "node": "n",
                "index": 0,
                "util_pct": 80.0,
                "mem_used_bytes": int(mem_gib * 2**30),
                "mem_total_bytes": 0,
                "power_w": 200.0,
            }
        )
        records.append(
            {"seq": seq + 1, "t": t + 0.5, "kind": "step", "step": step0 + i, "loss": 2.0, "tokens_per_s": 1e3}
        )
        seq += 2
    return records


def _preempted_run() -> RunTelemetry:
    tel = RunTelemetry(1)
    records = [{"seq": 0, "t": 100.0, "kind": "run_start", "steps_total": 100}]
    records += _segment(1, 101.0, 20, 10.0, 0)
    records += [
        {"seq": 41, "t": 121.0, "kind": "checkpoint", "step": 19},
        {"seq": 42, "t": 121.5, "kind": "preempted", "step": 19},
    ]
    records += [
        {"seq": 43, "t": 160.0, "kind": "run_start", "steps_total": 100, "resumed_from_step": 19},
        {"seq": 44, "t": 160.5, "kind": "resumed", "step": 19},
    ]
    records += _segment(45, 161.0, 20, 30.0, 20)
    tel.add_records(records)
    return tel


def test_telemetry_knows_the_gap() -> None:
    tel = _preempted_run()
    assert tel.gaps == [(21.5, 60.5)]  # from the last record before the restart to the resume
    assert tel.checkpoints == 1


def test_live_lines_break_across_the_gap(qtbot: Any) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 700)
    plots.show()
    plots.set_follow(False)
    plots.redraw(_preempted_run(), force=True)
    for line in (plots.loss_curve, plots.gpu_curves[("n", 0)]["mem"]):
        polys = [
            poly for part in (line.body, line.live) if id(line) in part._lines for poly in part._lines[id(line)][1]
        ]
        spans = [[poly.at(i).x() for i in range(poly.size())] for poly in polys]
        assert any(max(xs) <= 21.5 for xs in spans) and any(min(xs) >= 60.5 for xs in spans)
        for xs in spans:  # no polyline has points on both sides of the gap
            assert not (min(xs) < 21.5 and max(xs) > 60.5), xs


def test_break_at_gaps_inserts_one_nan_per_crossed_gap() -> None:
    x = np.array([0.0, 1.0, 2.0, 10.0, 11.0, 30.0])
    gx, gy = break_at_gaps(x, x * 2, np.array([[2.0, 10.0], [11.0, 30.0], [50.0, 60.0]]))
    assert list(gx) == [0.0, 1.0, 2.0, 6.0, 10.0, 11.0, 20.5, 30.0]
    assert np.isnan(gy[3]) and np.isnan(gy[6]) and np.isfinite(gy).sum() == 6


def test_history_memory_plot_fits_every_segment(qtbot: Any) -> None:
    t1, t2 = np.arange(0, 600, 5.0), np.arange(1800, 2400, 5.0)
    t = np.concatenate([t1, t2])
    mem = np.concatenate([np.full(len(t1), 10.0), np.full(len(t2), 30.0)])
    series = RunSeries(
        0.0,
        {"GPU 0": (t, np.full(len(t), 80.0), mem, np.full(len(t), 200.0))},
        (t, np.linspace(3, 1, len(t)), np.full(len(t), 1000.0)),
        [(600.0, "preempted", 10, ""), (1800.0, "resumed", 10, "")],
    )
    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(1200, 700)
    plots.show()
    plots.show_series(series)
    qtbot.wait(50)
    lo, hi = plots.plots["mem"].getViewBox().viewRange()[1]
    assert lo <= 10.0 and hi >= 30.0  # the samples after the resume are inside the y range
    x_lo, x_hi = plots.plots["mem"].getViewBox().viewRange()[0]
    assert x_lo <= 0.0 and x_hi >= 2395 / 60.0


def test_a_user_stop_is_not_called_a_preemption(tmp_path: Any) -> None:
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run
    from gpuplanner.history.stops import record_user_stop
    from gpuplanner.ui.history.history_loads import load_summaries
    from gpuplanner.ui.history.history_model import run_series

    tel = RunTelemetry(1)
    tel.add_records([{"seq": 0, "t": 100.0, "kind": "run_start"}, *_segment(1, 101.0, 5, 1.0, 0)])
    tel.user_stopped = True  # the Runs pane's Stop button
    tel.add_records([{"seq": 20, "t": 110.0, "kind": "preempted", "step": 4}])
    tel.add_records([{"seq": 21, "t": 111.0, "kind": "run_end", "status": "preempted", "exit_code": 75}])
    assert [m.kind for m in tel.markers] == ["stopped"] and tel.markers[0].label == "stopped @ step 4"
    assert tel.end_status == "stopped"

    path = tmp_path / "history.sqlite"
    db = open_db(path)
    try:
        run_id = create_run(db, name="stop-me", host="local", gpu_count=1)
        ingest_records(db, run_id, [{"v": 1, "seq": 0, "t": 100.0, "kind": "run_start", "config": {}}])
        record_user_stop(db, run_id, "window")
        ingest_records(
            db,
            run_id,
            [
                {"v": 1, "seq": 1, "t": 4e9, "kind": "preempted", "step": 4},
                {"v": 1, "seq": 2, "t": 4e9 + 1, "kind": "run_end", "status": "preempted", "exit_code": 75},
            ],
        )
        assert db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()[0] == "stopped"
        kinds = [e[1] for e in run_series(db, run_id).events]
        assert "stopped" in kinds and "preempted" not in kinds
    finally:
        db.close()
    [summary] = load_summaries(path)
    assert summary.status == "stopped"


def test_history_gaps_keep_x_finite_and_break_y(tmp_path: Any) -> None:
    from gpuplanner.app.run_series import overlay_series, with_gaps
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run

    t = np.array([0.0, 1.0, 2.0, 3.0, 60.0, 61.0, 62.0])
    gx, gy = with_gaps(t, t * 10)
    assert np.isfinite(gx).all() and list(gx[:5]) == [0.0, 1.0, 2.0, 3.0, 31.5]
    assert np.isnan(gy[4]) and np.isfinite(np.delete(gy, 4)).all()

    db = open_db(tmp_path / "h.sqlite")
    try:
        run_id = create_run(db, name="gap", host="h", gpu_count=1, price_usd_per_gpu_hour=1.0)
        records = [{"v": 1, "seq": 0, "t": 0.0, "kind": "run_start", "config": {}}]
        times = [*range(1, 40), *range(3000, 3040)]  # 50 minutes without a process in between
        for i, at in enumerate(times):
            records.append(
                {"v": 1, "seq": i + 1, "t": float(at), "kind": "step", "step": i, "loss": 2.0 - i / 100}
                | {"tokens_total": 64 * (i + 1), "samples_total": i + 1, "step_time_s": 1.0}
            )
        ingest_records(db, run_id, records)
        series = overlay_series(db, run_id, "gap")
    finally:
        db.close()
    assert np.isnan(series.loss).sum() == 1  # one break, at the gap
    assert np.isfinite(series.minutes).all() and np.isfinite(series.step).all()
