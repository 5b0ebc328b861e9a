"""Issue 29 item 4: the Runs pane, its Spend plot and the Sweep cap chart in the states a new user meets first
(no run, a launch under way, no data yet, an unpriced run, a run that ended, a search without a cap)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from PySide6.QtWidgets import QLabel

from gpuplanner.ui.runs.live_plots import LivePlots
from gpuplanner.ui.runs.run_demo import demo_request
from gpuplanner.ui.runs.run_status_text import NO_RUN, WAITING
from gpuplanner.ui.runs.run_telemetry import GPU_TABLE_COLUMNS, RunTelemetry

GPU = {"kind": "gpu", "node": "n", "index": 0, "util_pct": 100, "mem_used_bytes": 2 << 30, "mem_total_bytes": 8 << 30}
GPU.update({"power_w": 300, "temp_c": 80})


def _step(seq: int, t: float, step: int, spend: float | None = None) -> dict[str, Any]:
    record = {"seq": seq, "t": t, "kind": "step", "step": step, "loss": 2.0, "tokens_per_s": 1000.0}
    return record | ({"spend_usd": spend} if spend is not None else {})


def test_one_honest_state_from_no_run_to_the_first_step(qtbot, runs_pane, monkeypatch) -> None:
    pane = runs_pane
    assert pane.plots_stack.currentWidget() is pane.waiting_label and pane.waiting_label.text() == NO_RUN
    assert not pane.plots.isVisibleTo(pane)  # no empty 0-1 axes beside the words
    launched: list[Any] = []
    monkeypatch.setattr(pane.controller, "launch", lambda request, done, failed: launched.append(done))
    pane.launch(demo_request(max_steps=10))
    # one state, not "No run yet" beside "Launching on local…"
    assert pane.title_label.text() == "Starting on local…" and pane.message_label.text() == ""
    assert "No run" not in pane.waiting_label.text() and "waiting for the first step" in pane.waiting_label.text()
    launched[0](7)  # the launcher answered with run 7: no sample yet
    assert pane.title_label.text().startswith("#7 ") and pane.waiting_label.text() == WAITING
    assert pane.plots_stack.currentWidget() is pane.waiting_label and not pane.gpu_table.isVisibleTo(pane)
    entry = pane.runs[7]
    entry.telemetry.add_records(
        [{"seq": 0, "t": 10.0, "kind": "run_start", "config": {}}, {"seq": 1, "t": 11.0, **GPU}]
    )
    pane._update_text()
    assert pane.plots_stack.currentWidget() is pane.plots_split and pane.gpu_table.isVisibleTo(pane)
    util = [key for key, _ in GPU_TABLE_COLUMNS].index("util_pct")
    live = pane.gpu_table.table.item(0, util).foreground().color()
    assert "ended" not in pane.gpu_table.caption.text()
    pane._on_status(SimpleNamespace(run_id=7, state="finished", run_dir=None, exit_code=0, host="local", queue=None))
    # the last readings stay but are greyed out and labelled: not a live 100 % / 80 C after the end
    assert pane.gpu_table.caption.text().startswith("Run ended")
    assert pane.gpu_table.table.item(0, util).foreground().color() != live


def test_a_failed_launch_leaves_no_starting_state(qtbot, runs_pane, monkeypatch) -> None:
    failed: list[Any] = []
    monkeypatch.setattr(runs_pane.controller, "launch", lambda request, done, fail: failed.append(fail))
    runs_pane.launch(demo_request(max_steps=10))
    failed[0](RuntimeError("no trainer"))
    assert runs_pane.title_label.text() == "No run yet" and runs_pane.waiting_label.text() == NO_RUN
    assert runs_pane.message_label.text() == "Launch failed: no trainer"


def test_an_unpriced_run_says_so_inside_its_spend_plot_on_an_axis_from_zero(qtbot) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1024, 420)  # the Runs pane's plots at 1024x700: the spend plot is about 300 px wide
    plots.show()
    tel = RunTelemetry(1)
    tel.add_records([{"seq": 0, "t": 10.0, "kind": "run_start", "config": {}}, _step(1, 11.0, 1), _step(2, 12.0, 2)])
    plots.redraw(tel, force=True)
    view = plots.plots["spend"].getViewBox()
    label = plots.no_price_label
    assert label.isVisible() and "No price set" in label.textItem.toPlainText()
    inside = view.mapRectToScene(view.rect()).contains(label.mapRectToScene(label.boundingRect()))
    assert inside, "the unpriced words are clipped by the spend plot"
    assert plots.y_range("spend")[0] == 0.0


def test_spend_axis_starts_at_zero_when_nothing_was_spent_yet(qtbot) -> None:
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(1000, 600)
    plots.show()
    tel = RunTelemetry(1)
    tel.price_per_gpu_hour = 2.0
    tel.add_records([{"seq": 0, "t": 10.0, "kind": "run_start", "config": {}}, _step(1, 11.0, 1, 0.0)])
    plots.redraw(tel, force=True)
    lo, hi = plots.y_range("spend")
    assert lo == 0.0 and hi > 0.0  # was -0.5..0.5: a negative-dollar axis


def test_search_without_a_cap_draws_no_cap_zero_line(qtbot) -> None:
    from gpuplanner.ui.history.search_view import SearchPlots

    plots = SearchPlots()
    qtbot.addWidget(plots)
    plots.resize(800, 300)
    plots.show()
    review = SimpleNamespace(best_curve=[], spent_usd=0.0, spend_curve=[(0.0, 0.0), (60.0, 0.0)], budget_usd=0.0)
    plots.show_review(review)
    assert not plots.cap_line.isVisible() and "no cap" in plots.spend_plot.plotItem.titleLabel.text
    lo, hi = plots.spend_plot.getViewBox().viewRange()[1]
    assert lo == 0.0 and hi > 0.0  # was -$0.4..$0.4 with "cap $0.00"
    review.budget_usd, review.spend_curve = 2.0, [(0.0, 0.0), (60.0, 0.5)]
    plots.show_review(review)
    assert plots.cap_line.isVisible() and plots.cap_line.value() == 2.0
    assert plots.spend_plot.getViewBox().viewRange()[1][0] == 0.0


def test_the_demo_promise_names_what_the_demo_runs(qtbot, tmp_path) -> None:
    from gpuplanner.ui.dialogs.welcome_dialog import WelcomeDialog
    from gpuplanner.ui.runs.run_demo import DEMO_PROMISE, DEMO_STEPS

    request = demo_request()
    args = request.trainer_args
    assert args[args.index("--max-steps") + 1] == str(DEMO_STEPS) == "1000"
    assert request.env == {"OMP_NUM_THREADS": "1"}  # as measured: one thread, about a minute
    dialog = WelcomeDialog(tmp_path / "history.db", tmp_path / "config")
    qtbot.addWidget(dialog)
    text = dialog.findChildren(QLabel)[0].text()
    assert f"trains {DEMO_STEPS:,} steps" in text and DEMO_PROMISE in text and "minute or two" not in text
