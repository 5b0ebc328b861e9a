"""History's run plots: titles in words, and a key for the dashed event lines the run has."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg

from gpuplanner.app.run_series import RunSeries
from gpuplanner.ui.history.run_plots import EVENT_PENS, RunPlots


def shown(qtbot: Any, events: list[tuple[float, str, int, str]]) -> RunPlots:
    t = np.arange(0.0, 3600.0, 30.0)
    series = RunSeries(
        0.0,
        {"GPU 0": (t, np.full(len(t), 80.0), np.full(len(t), 12.0), np.full(len(t), 200.0))},
        (t, np.linspace(3, 1, len(t)), np.full(len(t), 1000.0)),
        events,
    )
    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(1100, 600)
    plots.show()
    plots.show_series(series)
    qtbot.wait(30)
    return plots


def dashed_lines(plots: RunPlots, key: str) -> list[pg.InfiniteLine]:
    return [item for item in plots.plots[key].items if isinstance(item, pg.InfiniteLine)]


def test_titles_say_what_and_in_which_unit(qtbot: Any) -> None:
    plots = shown(qtbot, [])
    titles = {key: plot.titleLabel.text for key, plot in plots.plots.items()}
    assert titles == {
        "util": "GPU utilisation (%)",
        "mem": "GPU memory (GiB)",
        "tokens": "Tokens/s",
        "loss": "Loss",
    }
    assert plots.plots["loss"].getAxis("bottom").labelText == "minutes since the run started"


def test_the_key_names_each_kind_of_dashed_line_the_run_has_in_its_colour(qtbot: Any) -> None:
    events = [(600.0, "checkpoint", 10, ""), (1200.0, "preempted", 20, ""), (1500.0, "resumed", 20, "")]
    plots = shown(qtbot, events + [(0.0, "run_start", 0, ""), (3500.0, "run_end", 60, "")])
    assert len(dashed_lines(plots, "util")) == 3  # start and end are the axis' ends, not lines
    key = plots.key_text
    for kind in ("checkpoint", "preempted", "resumed"):
        assert f"color:{EVENT_PENS[kind]}" in key and kind in key
    assert "stopped" not in key
    assert plots.key_label.isVisible()
    label_bottom = plots.key_label.mapRectToScene(plots.key_label.boundingRect()).top()
    plot_bottom = plots.plots["loss"].mapRectToScene(plots.plots["loss"].boundingRect()).bottom()
    assert label_bottom >= plot_bottom - 1  # under the plots, covering none of them


def test_no_key_without_marked_events_and_the_key_follows_the_next_run(qtbot: Any) -> None:
    plots = shown(qtbot, [(900.0, "stopped", 15, "")])
    assert "stopped" in plots.key_text and "checkpoint" not in plots.key_text
    plots.show_series(RunSeries(0.0, {}, (np.array([]), np.array([]), np.array([])), []))
    assert plots.key_text == "" and not plots.key_label.isVisible()
    assert dashed_lines(plots, "loss") == []


def test_a_failed_run_has_one_line_where_it_failed(qtbot: Any) -> None:
    events = [(1800.0, "run_end", 30, "failed (exit 1)"), (9e6, "failure", None, "IndexError: index out of range")]
    plots = shown(qtbot, events)
    lines = dashed_lines(plots, "loss")
    assert [round(line.value(), 3) for line in lines] == [30.0]  # minutes; the failure record read later: no line
    assert "failed" in plots.key_text and f"color:{EVENT_PENS['failed']}" in plots.key_text
