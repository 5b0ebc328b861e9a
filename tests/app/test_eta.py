"""The CLI's progress line and the Runs pane show one ETA (gpuplanner.app.eta) for the same telemetry."""

from __future__ import annotations

import pytest

from gpuplanner.app.eta import ETA_WINDOW, eta_s, steps_per_s
from gpuplanner.commands.run import _Progress
from gpuplanner.export.human import human_duration
from gpuplanner.ui.runs.run_telemetry import RunTelemetry
from trainer.protocol import make_record


def _records() -> list[dict]:
    """A 1,000-step run: a slow first step (warm-up: 60 s), 2 s steps up to 40, then 1 s steps up to 70."""
    records = [make_record("run_start", 0, 1000.0, steps_total=1000, config={}, world_size=1)]
    t, seq = 1000.0, 1
    for step in range(1, 71):
        t += 60.0 if step == 1 else 2.0 if step <= 40 else 1.0
        records.append(
            make_record(
                "step",
                seq,
                t,
                step=step,
                loss=2.0,
                tokens_per_s=100.0,
                tokens_total=step * 64,
                samples_total=step,
                step_time_s=1.0,
            )
        )
        seq += 1
    return records


def test_eta_is_the_recent_rate_from_the_records_clock() -> None:
    times, steps = [0.0, 60.0, 62.0, 64.0], [0.0, 1.0, 2.0, 3.0]
    assert steps_per_s(times, steps, window=3) == pytest.approx(0.5)  # the warm-up is out of the window
    assert eta_s(times, steps, 13, window=3) == pytest.approx(20.0)
    assert eta_s(times, steps, 3) == 0.0  # done
    assert eta_s(times, steps, None) is None and eta_s([1.0], [1.0], 10) is None
    assert eta_s([1.0, 1.0], [1.0, 1.0], 10) is None  # no progress: no rate


def test_cli_and_window_show_the_same_eta_for_the_same_telemetry() -> None:
    records = _records()
    window = RunTelemetry(run_id=1)
    window.add_records(records)
    cli = _Progress([], quiet=True)  # no --max-steps: the total is the trainer's own, as the window's
    for start in range(0, len(records), 7):  # the CLI gets the records in batches, as the watcher delivers them
        cli.on_records(1, records[start : start + 7])
    # the last ETA_WINDOW steps are 1 s apart: 930 steps left at 1 step/s
    assert ETA_WINDOW == 30
    assert window.eta_s() == pytest.approx(930.0)
    assert cli.eta_s() == pytest.approx(window.eta_s())
    # and in the same words as the Runs pane's ETA label (export/human.py's duration)
    assert "ETA 16 min" in cli.line() and f"ETA {human_duration(window.eta_s())}" in cli.line()
    assert "step 70/1000" in cli.line()


def test_runs_show_gives_a_running_runs_eta_from_the_history(tmp_path, capsys) -> None:
    """`runs show --json` of a running run: the same ETA as the live views, from the stored records."""
    import json

    from gpuplanner.cli import main
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run

    db_path = tmp_path / "history.db"
    records = _records()
    with open_db(db_path) as db:
        run_id = create_run(db, name="live", host="local", gpu_count=1)
        ingest_records(db, run_id, records)
    window = RunTelemetry(run_id=run_id)
    window.add_records(records)
    assert main(["runs", "show", str(run_id), "--db", str(db_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "running"
    assert shown["eta_s"] == pytest.approx(930.0) == window.eta_s()
