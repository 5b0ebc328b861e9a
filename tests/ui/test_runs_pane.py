"""Runs pane: ring buffers, telemetry, dialogs, and real tiny runs launched, stopped and resumed from the pane."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QDialog

from gpuplanner.ui.runs.ring_buffer import RingBuffer
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from tests.ui.helpers import FakeHostKeyError, tiny_request

pytestmark = pytest.mark.xdist_group("ui_runs")


def test_ring_buffer_keeps_newest_rows_contiguous() -> None:
    buf = RingBuffer(("x", "y"), capacity=5, initial=2)
    for i in range(13):
        buf.append((i, -i))
        assert list(buf.view("x")) == list(range(max(0, i - 4), i + 1))
    buf.extend(np.array([[i, i] for i in range(100, 120)], dtype=float))
    assert list(buf.view("y")) == [115, 116, 117, 118, 119]
    assert buf.total == 33 and buf.last("x") == 119
    assert buf.view("x").base is not None  # a view, not a copy


def test_telemetry_from_records_and_markers() -> None:
    tel = RunTelemetry(1)
    recs = [
        {"seq": 0, "t": 100.0, "kind": "run_start", "config": {"budget_usd": 5.0}, "steps_total": 10},
        {
            "seq": 1,
            "t": 101.0,
            "kind": "gpu",
            "node": "n",
            "index": 0,
            "util_pct": 90,
            "mem_used_bytes": 2 << 30,
            "mem_total_bytes": 8 << 30,
            "power_w": 200,
            "simulated": True,
        },
        {
            "seq": 2,
            "t": 102.0,
            "kind": "step",
            "step": 5,
            "loss": 2.0,
            "tokens_per_s": 10.0,
            "spend_usd": 1.0,
            "tokens_total": 1,
            "samples_total": 1,
            "step_time_s": 1.0,
        },
        {"seq": 3, "t": 103.0, "kind": "checkpoint", "step": 5, "path": "x"},
        {
            "seq": 4,
            "t": 104.0,
            "kind": "step",
            "step": 6,
            "loss": 1.9,
            "tokens_per_s": 10.0,
            "spend_usd": 1.2,
            "tokens_total": 1,
            "samples_total": 1,
            "step_time_s": 1.0,
        },
    ]
    assert tel.add_records(recs) == 5
    assert tel.add_records(recs) == 0  # duplicates by seq are dropped
    assert tel.simulated is True and tel.budget_usd == 5.0
    assert list(tel.gpus[("n", 0)].view("mem_used_gib")) == [2.0]
    assert tel.progress() == pytest.approx(0.6) and tel.eta_s() == pytest.approx(8.0)
    assert [m.kind for m in tel.markers] == ["checkpoint"]
    tel.planned_cost_usd = 1.0
    assert "Over plan" in (tel.over_plan() or "")


def test_trust_dialog_accepts_and_refuses(qtbot) -> None:
    from gpuplanner.ui.dialogs.trust_dialog import TrustHostKeyDialog, ask_trust, changed_key_box

    exc = FakeHostKeyError()
    dialog = TrustHostKeyDialog(exc)
    qtbot.addWidget(dialog)
    assert dialog.fingerprint_label.text() == exc.fingerprint_sha256
    assert dialog.key_type_label.text() == "ssh-ed25519"

    def press(accept: bool) -> None:
        from PySide6.QtWidgets import QApplication

        active = QApplication.activeModalWidget()
        assert isinstance(active, TrustHostKeyDialog)
        active.trust_button.click() if accept else active.reject()

    QTimer.singleShot(50, lambda: press(True))
    assert ask_trust(exc) is True and exc.trusted == 1
    QTimer.singleShot(50, lambda: press(False))
    assert ask_trust(exc) is False and exc.trusted == 1

    box = changed_key_box(exc)
    qtbot.addWidget(box)
    assert "refuses to connect" in box.text()
    assert exc.fingerprint_sha256 in box.informativeText()
    assert len(box.buttons()) == 1  # Close only: no way to connect anyway
    assert "revoked" not in box.windowTitle()

    exc.revoked = True  # a key listed under @revoked in known_hosts (launch.known_hosts.RevokedHostKey)
    revoked = changed_key_box(exc)
    qtbot.addWidget(revoked)
    assert revoked.windowTitle() == "Host key revoked: connection refused"
    assert "marked revoked" in revoked.text() and exc.fingerprint_sha256 in revoked.informativeText()
    assert len(revoked.buttons()) == 1


def test_launch_dialog_maps_plan_settings(qtbot) -> None:
    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

    settings = {
        "model": "gpt2",
        "model_config": None,
        "method": "lora",
        "lora_rank": 8,
        "precision": "bf16",
        "micro_batch": 4,
        "grad_accum": 2,
        "seq_len": 256,
        "grad_checkpointing": "full",
        "epochs": 2,
        "gpus": 2,
        "gpu": "A100-80GB",
        "price_per_gpu_hour": 1.5,
        "budget_usd": 40.0,
        "plan_id": 7,
        "spot": True,
        "data": ["/data/train.jsonl"],
    }
    dialog = LaunchDialog([("local", "This machine", None), ("box", "box", 2.0)], settings)
    qtbot.addWidget(dialog)
    request = dialog.request()
    args = request.trainer_args
    assert args[args.index("--model") + 1] == "gpt2"
    assert args[args.index("--lora-rank") + 1] == "8" and args[args.index("--precision") + 1] == "bf16"
    assert args[args.index("--grad-checkpointing") + 1] == "every" and args[args.index("--seq-len") + 1] == "256"
    assert "--price-per-gpu-hour" not in args and "--budget-usd" not in args  # the launcher sets them
    assert request.gpus == 2 and request.budget_usd == 40.0 and request.plan_id == 7 and request.auto_resume
    assert "1.50" in dialog.price_label.text()
    dialog.data_edit.setText("")
    dialog.accept()
    assert dialog.error_label.text().startswith("Data: needs the training data")


def test_peak_decimator_matches_a_fresh_reduction_as_rows_arrive_and_drop() -> None:
    """The incremental bucket summary equals min/max over the rows the ring buffer holds, after each
    batch, also while the ring drops its oldest rows; each update only reduces the new rows."""
    from gpuplanner.ui.runs.ring_buffer import PeakDecimator

    rng = np.random.default_rng(1)
    buf = RingBuffer(("x", "a", "b"), 3000, initial=16)
    dec = PeakDecimator(buf, ("a", "b"))
    t, bucket = 0.0, 7.5
    for i in range(150):
        m = int(rng.integers(1, 60))
        xs = t + np.cumsum(rng.uniform(0.2, 2.0, m))
        t = float(xs[-1])
        a = rng.normal(0, 1, m)
        a[rng.random(m) < 0.02] = 50.0  # spikes
        b = rng.normal(0, 1, m)
        b[rng.random(m) < 0.05] = np.nan  # missing values
        buf.extend(np.column_stack([xs, a, b]))
        before = dec.reduced_rows
        ids, x, lo, hi = dec.buckets(bucket)
        if i > 1:
            assert dec.reduced_rows - before <= m + 200  # new rows, the open bucket and a cut first bucket
        raw = buf.columns_view()
        raw_ids = np.floor(raw[0] / bucket).astype(int)
        assert list(ids) == sorted(set(raw_ids))
        for col in (1, 2):
            for k, lo_k, hi_k in zip(ids, lo[col - 1], hi[col - 1]):
                values = raw[col][raw_ids == k]
                if np.isnan(values).all():
                    assert np.isnan(lo_k) and np.isnan(hi_k)
                else:
                    assert (lo_k, hi_k) == (np.nanmin(values), np.nanmax(values))
    assert buf.total > buf.capacity  # the ring did drop rows


@pytest.mark.parametrize("follow", [False, True])
def test_live_plots_keep_every_bucket_extreme_and_the_latest_sample(qtbot, follow: bool) -> None:
    """A day of 1 Hz samples for 2 GPUs with rare spikes, one row more than the ring holds: the curves
    have about two points per pixel column, yet within every bucket of the visible window they reach
    exactly the raw min and max (no spike hidden), and they end at the newest sample, also after more
    samples arrive. ``follow``: the scrolling "last 10 minutes", over enough frames for the window to
    pass chunk boundaries (the settled body is then rebuilt, otherwise only the live ends move)."""
    from gpuplanner.ui.runs.live_plots import LivePlots
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(2, 86_400, seed=3)
    for i, buf in enumerate(tel.gpus.values()):
        util = buf.view("util")
        util[1234 + 40_000 * i] = 100.0  # one-sample spikes up and down
        util[50_321] = 0.0
        util[86_400 - 333 + 100 * i] = 100.0  # and in the last 10 minutes
        util[86_400 - 45] = 0.0
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1280, 800)
    plots.set_follow(follow)
    plots.show()
    plots.redraw(tel, force=True)
    qtbot.wait(10)
    for k in range(40 if follow else 3):
        for buf in tel.gpus.values():
            buf.append((86_400 + k, 3.0 if k == 1 else 70.0, None, 60.0, 80.0, 400.0, 3.0 if k == 1 else 70.0))
        tel.last_t = 86_400.0 + k
        tel.version += 1
        plots.redraw()
        x_lo, x_hi, bucket = plots._window(tel)
        width = plots._pixel_width()
        for key, buf in tel.gpus.items():
            for name, column in (("util", "util"), ("power", "power_w")):
                x, y = plots.gpu_curves[key][name].points()
                assert len(x) < 4 * width  # decimated (86,400 rows)
                raw_x, raw_y = buf.view("x"), buf.view(column)
                assert x[-1] == raw_x[-1] and y[np.argmax(x)] == raw_y[-1]  # ends at the newest sample
                inside = (raw_x >= x_lo) & (raw_x <= x_hi)
                raw_x, raw_y = raw_x[inside], raw_y[inside]
                raw_ids = np.floor(raw_x / bucket).astype(int)
                shown = (x >= x_lo) & (x <= x_hi)  # points left of the window are clipped by the view
                x, y = x[shown], y[shown]
                ids = np.floor(x / bucket).astype(int)
                starts = np.flatnonzero(np.diff(np.concatenate(([raw_ids[0] - 1], raw_ids))))
                for s_, e_ in zip(starts, np.append(starts[1:], len(raw_ids))):
                    in_bucket = y[ids == raw_ids[s_]]
                    assert np.nanmin(in_bucket) == raw_y[s_:e_].min()
                    assert np.nanmax(in_bucket) == raw_y[s_:e_].max()
            util_y = plots.gpu_curves[key]["util"].points()[1]
            assert np.nanmax(util_y) == 100.0 and np.nanmin(util_y) == 0.0  # the spikes are drawn


@pytest.mark.parametrize("width", [1060, 900])  # the pane alone; its plots inside the 1280x800 window
def test_plot_titles_fit_their_plots(qtbot, width: int) -> None:
    """Simulated telemetry with SM activity gives the longest titles; none may be cut off."""
    from gpuplanner.ui.runs.live_plots import LivePlots
    from tests.benchmarks.synthetic_runs import synthetic_telemetry

    tel = synthetic_telemetry(2, 600)
    tel.simulated, tel.sm_reported, tel.price_per_gpu_hour, tel.budget_usd = True, True, None, None
    tel.steps.clear()
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(width, 560)  # 1060: the plots of the pane alone at 1280; 900: in the 1280x800 window
    plots.show()
    plots.redraw(tel, force=True)
    qtbot.wait(20)
    assert "(sim.)" in plots.plots["mem"].titleLabel.text
    view_width = plots.graphics.viewport().width()
    for key, plot in plots.plots.items():
        text_width = plot.titleLabel.item.boundingRect().width()
        assert text_width <= plot.width(), f"{key}: title {text_width:.0f} px in a {plot.width():.0f} px plot"
        # a long title widens the layout past the view instead: the right column is then cut off
        assert plot.sceneBoundingRect().right() <= view_width + 1, f"{key} ends past the view's {view_width} px"


def test_redraw_benchmark_runs() -> None:
    from tests.benchmarks.synthetic_runs import redraw_benchmark

    assert 0 < redraw_benchmark(gpus=2, samples=2000, frames=3) < 5


@pytest.mark.slow
def test_demo_run_shows_simulated_live_data_and_ends_in_history(qtbot, runs_pane, monkeypatch) -> None:
    from gpuplanner.history.db import connect
    from gpuplanner.history.runs import get_run
    from gpuplanner.ui.runs import runs_pane as module

    original = module.demo_request

    def demo():  # 60 steps train in well under a second here: sample the GPUs often enough to plot
        request = _demo_cpu(original(max_steps=60))
        request.trainer_args += ["--gpu-interval-s", "0.05"]
        return request

    monkeypatch.setattr(module, "demo_request", demo)
    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    runs_pane.start_demo_run()
    qtbot.waitUntil(lambda: runs_pane.current() is not None, timeout=30_000)
    entry = runs_pane.current()
    qtbot.waitUntil(
        lambda: runs_pane.plots.curve_lengths().get("gpu0", 0) >= 2 and runs_pane.plots.curve_lengths()["loss"] >= 2,
        timeout=60_000,
    )
    assert len(entry.telemetry.gpus[next(iter(entry.telemetry.gpus))]) >= 2
    if entry.telemetry.simulated:  # no GPU here: the badge and the plot titles say so
        qtbot.waitUntil(lambda: runs_pane.simulated_badge.isVisible(), timeout=5_000)
        assert "SIMULATED" in runs_pane.simulated_badge.text()
        assert "(sim.)" in runs_pane.plots.plots["util"].titleLabel.text
    qtbot.waitUntil(lambda: finished == [entry.run_id], timeout=90_000)
    assert entry.state == "finished" and entry.telemetry.end_status == "finished"
    assert runs_pane.progress.value() == 1000
    db = connect(runs_pane.services.db_path)
    try:
        run = get_run(db, entry.run_id)
        steps = db.execute("SELECT COUNT(*) FROM steps WHERE run_id = ?", [entry.run_id]).fetchone()[0]
    finally:
        db.close()
    assert run.status == "finished" and steps == len(entry.telemetry.steps)
    assert runs_pane.resume_button.isEnabled() is False


def _demo_cpu(request):
    request.trainer_args += ["--device", "cpu", "--no-events-stdout"]
    return request


@pytest.mark.slow
def test_launch_from_dialog_then_stop_resume_from_buttons(qtbot, runs_pane, monkeypatch) -> None:
    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

    def accept(dialog: LaunchDialog) -> int:
        dialog.extra_edit.setText(" ".join(tiny_request(4000).trainer_args[4:]))
        dialog.ckpt_spin.setValue(0)
        dialog.accept()
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(LaunchDialog, "exec", accept)
    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    demo_model = str(
        __import__("gpuplanner.ui.runs.launch_request", fromlist=["demo_dir"]).demo_dir() / "tiny-gpt2.json"
    )
    runs_pane.open_launch_dialog(
        {
            "model": None,
            "model_config": demo_model,
            "method": "full",
            "lora_rank": 0,
            "precision": "fp32",
            "micro_batch": 4,
            "grad_accum": 1,
            "seq_len": 32,
            "grad_checkpointing": "none",
            "epochs": 1,
            "gpus": 1,
            "gpu": None,
            "price_per_gpu_hour": None,
            "budget_usd": None,
            "plan_id": None,
            "spot": False,
        }
    )
    qtbot.waitUntil(lambda: runs_pane.current() is not None, timeout=30_000)
    entry = runs_pane.current()
    qtbot.waitUntil(lambda: len(entry.telemetry.steps) >= 3 and runs_pane.stop_button.isEnabled(), timeout=60_000)
    runs_pane.stop_button.click()
    qtbot.waitUntil(lambda: entry.state == "stopped", timeout=60_000)
    assert entry.exit_code == 75 and finished == [entry.run_id]
    from gpuplanner.history.db import connect

    db = connect(runs_pane.services.db_path)
    try:  # the launcher recorded the Stop: a stop, not a preemption
        assert db.execute("SELECT status FROM runs WHERE id = ?", [entry.run_id]).fetchone()[0] == "stopped"
        by = db.execute("SELECT detail_json FROM events WHERE run_id = ? AND kind = 'user_stop'", [entry.run_id])
        assert [json.loads(r[0])["by"] for r in by.fetchall()] == ["window"]
    finally:
        db.close()
    qtbot.waitUntil(runs_pane.resume_button.isEnabled, timeout=5_000)
    steps_before = entry.telemetry.current_step()
    runs_pane.resume_button.click()
    qtbot.waitUntil(lambda: entry.state == "running", timeout=30_000)
    qtbot.waitUntil(lambda: any(m.kind == "resumed" for m in entry.telemetry.markers), timeout=60_000)
    qtbot.waitUntil(lambda: (entry.telemetry.current_step() or 0) > steps_before, timeout=60_000)
    qtbot.waitUntil(
        lambda: all(
            {"checkpoint", "resumed"} <= {m.kind for m in lines.markers}  # on every plot
            for lines in runs_pane.plots.marker_lines.values()
        ),
        timeout=5_000,
    )
    runs_pane.kill_button.click()
    qtbot.waitUntil(lambda: entry.state == "killed", timeout=30_000)
    assert finished == [entry.run_id, entry.run_id]


@pytest.mark.slow
def test_launch_a_command_from_the_dialog_shows_its_steps_and_ends_in_history(qtbot, runs_pane, monkeypatch) -> None:
    """The dialog's "a command of my own": a real script under the monitor, its log_step records plotted
    live, the run finished in the history with its steps."""
    import sys

    from gpuplanner.history.db import connect
    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog
    from tests.conftest import REPO_ROOT

    scripts = REPO_ROOT / "tests" / "data" / "user_scripts"

    def accept(dialog: LaunchDialog) -> int:
        dialog.command_radio.setChecked(True)
        dialog.command_edit.setText(f"{sys.executable} plain_loop.py --steps 25")
        dialog.workdir_edit.setText(str(scripts))
        dialog.env_edit.setPlainText("OMP_NUM_THREADS=1")
        dialog.accept()
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(LaunchDialog, "exec", accept)
    finished: list[int] = []
    runs_pane.runFinished.connect(finished.append)
    runs_pane.open_launch_dialog({})
    qtbot.waitUntil(lambda: runs_pane.current() is not None, timeout=30_000)
    entry = runs_pane.current()
    qtbot.waitUntil(lambda: finished == [entry.run_id], timeout=120_000)
    assert entry.state == "finished" and entry.telemetry.end_status == "finished"
    assert len(entry.telemetry.steps) == 25 and entry.telemetry.current_step() == 25
    db = connect(runs_pane.services.db_path)
    try:
        steps = db.execute("SELECT COUNT(*) FROM steps WHERE run_id = ?", [entry.run_id]).fetchone()[0]
        config = db.execute("SELECT config_json FROM runs WHERE id = ?", [entry.run_id]).fetchone()[0]
    finally:
        db.close()
    assert steps == 25 and '"plain_loop.py"' in config
