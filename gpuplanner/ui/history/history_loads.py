"""The History pane's worker jobs: each opens its own connection on the pane's worker thread, reads (or
deletes) and closes it, and hands plain data back (an absent database file is an empty history)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from gpuplanner.app.run_series import OverlaySeries, RunSeries, overlay_series
from gpuplanner.history.alert_rules import AlertSettings
from gpuplanner.history.analytics import RunSummary, summarize
from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.history.runs import delete_run, list_runs
from gpuplanner.history.stops import stopped_by_user
from gpuplanner.ui.history.history_model import run_series


def load_summaries(path: Path, alert_settings: AlertSettings | None = None) -> list[RunSummary]:
    """Every run's summary, its alerts evaluated under ``alert_settings`` and stored with the run (a
    worker's job: its own connection; an absent file is an empty history)."""
    if not path.exists():
        return []
    db = open_db(path)
    try:
        summaries = []
        for run in list_runs(db):
            try:
                summary = summarize(db, run.id, alert_settings=alert_settings, store_alerts=True)
            except HistoryError:
                continue
            if summary.status == "preempted" and stopped_by_user(db, run.id):
                summary = dataclasses.replace(summary, status="stopped")  # the user's Stop, not a preemption
            summaries.append(summary)
        return summaries
    finally:
        db.close()


def load_series(path: Path, run_id: int) -> RunSeries:
    db = open_db(path)
    try:
        return run_series(db, run_id)
    finally:
        db.close()


def load_overlay(path: Path, runs: Sequence[tuple[int, str]]) -> list[OverlaySeries]:
    """The curves of several runs for the overlay (a worker's job)."""
    db = open_db(path)
    try:
        return [overlay_series(db, run_id, label) for run_id, label in runs]
    finally:
        db.close()


def delete_and_load(path: Path, run_ids: Sequence[int]) -> list[RunSummary]:
    db = open_db(path)
    try:
        for run_id in run_ids:
            try:
                delete_run(db, run_id)
            except HistoryError:
                continue
    finally:
        db.close()
    return load_summaries(path)
