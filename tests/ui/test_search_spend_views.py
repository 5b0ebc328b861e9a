"""History's Spend and Searches dialogs with real widgets over a real history file and a real Optuna study:
sums by tag and month, bad input at the field, a search's trials, plots, best command and exports."""

from __future__ import annotations

import calendar
import csv
import io
import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run, update_run
from gpuplanner.sweep.study import storage_url
from gpuplanner.ui.history.history_pane import HistoryPane
from gpuplanner.ui.history.search_view import SearchesDialog
from gpuplanner.ui.history.spend_view import SpendDialog
from tests.ui.pdf_check import outside, overlaps, read_words


def utc(month: int, day: int) -> float:
    return float(calendar.timegm((2026, month, day, 12, 0, 0)))


def add_run(db_path: Path, start: float, hours: float, gpus: int, price: float, **tags: str) -> int:
    with open_db(db_path) as db:
        run_id = create_run(db, gpu_count=gpus, price_usd_per_gpu_hour=price, started_at=start, tags=tags)
        update_run(db, run_id, first_t=start, last_t=start + hours * 3600.0, status="finished")
    return run_id


@pytest.fixture
def pane(qtbot: Any, services: Any) -> Any:
    widget = HistoryPane(services)
    qtbot.addWidget(widget)
    widget.resize(1280, 800)
    widget.show()
    yield widget
    widget.shutdown() if hasattr(widget, "shutdown") else None


def table(dialog: Any) -> list[list[str]]:
    t = dialog.table
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def test_spend_dialog_sums_by_tag_and_month(qtbot: Any, pane: HistoryPane, services: Any, tmp_path: Path) -> None:
    db = services.db_path
    add_run(db, utc(11, 2), 2.0, 2, 3.0, project="search", owner="ana")  # $12
    add_run(db, utc(11, 20), 0.5, 1, 4.0, project="search", owner="bob")  # $2
    add_run(db, utc(11, 25), 1.0, 8, 1.5, project="pretrain", owner="ana")  # $12
    add_run(db, utc(10, 30), 1.0, 1, 10.0, project="search")  # October $10
    with qtbot.waitSignal(pane.spend_button.clicked, timeout=1000):
        pane.spend_button.click()
    dialog = pane.findChild(SpendDialog)
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=10_000)
    assert dialog.report.total.cost_usd == pytest.approx(36.0)
    with qtbot.waitSignal(dialog.updated, timeout=10_000):
        dialog.by_combo.setCurrentText("project")
    with qtbot.waitSignal(dialog.updated, timeout=10_000):
        dialog.month_edit.setText("2026-11")
        dialog.month_edit.editingFinished.emit()
    rows = {r[0]: r for r in table(dialog)}
    assert rows["search"][1:3] == ["2026-11", "2"] and rows["search"][4] == "14.00"
    assert rows["pretrain"][4] == "12.00" and rows["total"][4] == "26.00"
    headers = [dialog.table.horizontalHeaderItem(c).text() for c in range(dialog.table.columnCount())]
    assert headers == ["Project", "Month", "Runs", "GPU-hours", "Cost", "Runs without a price"]  # no snake_case
    assert rows["search"][3] == "4.5"  # 2 h x 2 GPUs + 0.5 h x 1 GPU
    with qtbot.waitSignal(dialog.updated, timeout=10_000):
        dialog.tags_edit.setText("owner=ana")
        dialog.tags_edit.editingFinished.emit()
    assert {r[0]: r[4] for r in table(dialog)} == {"search": "12.00", "pretrain": "12.00", "total": "24.00"}
    target = tmp_path / "spend.csv"
    dialog.export(target, "csv")
    exported = {r["project"]: float(r["cost_usd"]) for r in csv.DictReader(io.StringIO(target.read_text()))}
    assert exported == {"search": 12.0, "pretrain": 12.0, "total": 24.0}
    dialog.month_edit.setText("2026-13")
    dialog.month_edit.editingFinished.emit()
    assert dialog.error_label.text().startswith("Month: expected a month as YYYY-MM")
    dialog.month_edit.setText("")
    dialog.tags_edit.setText("owner")
    dialog.tags_edit.editingFinished.emit()
    assert dialog.error_label.text().startswith("Filter tags: 'owner' is not key=value")
    dialog.close()


def make_search(db_path: Path) -> dict[str, Any]:
    """A finished search of three trials, as the runner leaves it: the study beside the history, each trial's
    run with the trainer's spend records (t, spend_usd)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(study_name="demo", storage=storage_url(db_path), direction="minimize")
    study.set_user_attr("caps", {"budget_usd": 20.0, "max_gpu_hours": None})
    study.set_user_attr("tags", {"project": "search"})
    study.set_user_attr("stop_reason", "done: all 3 trials ran")
    t0 = utc(11, 3)
    plan = [  # (value or None for pruned, start offset s, [(dt, spend)], lr)
        (2.0, 0, [(60, 1.0), (120, 2.0), (180, 3.0)], 0.01),
        (None, 30, [(60, 1.5)], 0.2),
        (1.5, 200, [(60, 1.0), (120, 2.5), (180, 4.0)], 0.003),
    ]
    with open_db(db_path) as db:
        for value, offset, spends, lr in plan:
            trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)})
            run_id = create_run(
                db, name=f"demo-{trial.number}", host="local", gpu_count=1, price_usd_per_gpu_hour=3600.0,
                launch={"trainer_args": ["--lr", str(lr), "--max-steps", "6", "--max-gpu-hours", "0.1"]},
                tags={"project": "search", "sweep": "demo"},
            )  # fmt: skip
            for seq, (dt, usd) in enumerate(spends):
                db.execute(
                    "INSERT INTO steps (run_id, seq, t, step, spend_usd) VALUES (?, ?, ?, ?, ?)",
                    [run_id, seq, t0 + offset + dt, 2 * (seq + 1), usd],
                )
            start, end = t0 + offset + spends[0][0], t0 + offset + spends[-1][0]
            update_run(db, run_id, first_t=start, last_t=end, status="finished")
            trial.set_user_attr("run_id", run_id)
            trial.set_user_attr("host", "local")
            trial.report(value if value is not None else 3.0, 2)
            if value is None:
                trial.set_user_attr("end", "pruned")
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                trial.set_user_attr("end", "complete")
                study.tell(trial, value)
    return {"t0": t0}


def test_searches_dialog_groups_a_search(qtbot: Any, pane: HistoryPane, services: Any, tmp_path: Path) -> None:
    make_search(services.db_path)
    dialog = pane.open_searches("demo")
    assert isinstance(dialog, SearchesDialog)
    qtbot.waitUntil(lambda: dialog.review is not None, timeout=15_000)
    review = dialog.review
    assert review.counts == {"finished": 2, "pruned": 1, "stopped": 0, "failed": 0, "running": 0, "trials": 3}
    assert review.spent_usd == pytest.approx(8.5)  # 3 + 1.5 + 4: each run's last spend record
    assert dialog.table.rowCount() == 3
    assert (
        "2 finished, 1 pruned" in dialog.summary.text() and "$8.50 of the $20.00 budget (42%)" in dialog.summary.text()
    )
    assert "Best: trial 2 (run #3), eval loss 1.5000 for $4.00" in dialog.summary.text()
    header = [dialog.table.horizontalHeaderItem(c).text() for c in range(dialog.table.columnCount())]
    assert header[:3] == ["Trial", "Outcome", "Run"] and "Spend" in header
    spends = {dialog.table.item(r, 0).text(): dialog.table.item(r, header.index("Spend")).text() for r in range(3)}
    assert spends == {"0": "$3.00", "1": "$1.50", "2": "$4.00"}
    # cumulative spend by hand: t0+60: 1; +90: 2.5 (trial 1); +120: 3.5; +180: 4.5; +260: 5.5; +320: 7; +380: 8.5
    assert [round(v, 6) for _, v in dialog.plots.shown["spend"]] == [1.0, 2.5, 3.5, 4.5, 5.5, 7.0, 8.5]
    # the best against spend: trial 0 ended at +180 (spent 4.5) with 2.0; trial 2 at +380 (8.5) with 1.5
    assert dialog.plots.shown["best"] == [(4.5, 2.0), (8.5, 1.5)]
    assert dialog.plots.cap_line.isVisible() and dialog.plots.cap_line.value() == 20.0
    assert "gpuplanner run --host local --name demo-best-trial-2 --tag project=search -- --lr 0.003 --max-steps 6" in (
        dialog.command.text()
    )
    pdf = tmp_path / "demo.pdf"
    dialog.export(pdf, "pdf")
    pages = read_words(pdf)
    assert len(pages.sizes) == 1  # one page
    text = " ".join(pages.texts())
    assert "Search demo" in text and "demo-best-trial-2" in text and "finished" in text and "$4.00" in text
    assert not overlaps(pages) and not outside(pages, 10.0)
    md = tmp_path / "demo.md"
    dialog.export(md, "markdown")
    assert md.read_text().startswith("# Search demo") and "| 2 | finished |" in md.read_text()
    dialog.close()


def test_cli_show_agrees_with_the_dialog(services: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplanner.cli import main

    make_search(services.db_path)
    assert main(["sweep", "show", "demo", "--db", str(services.db_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["spent_usd"] == 8.5 and document["best"]["number"] == 2
    assert document["counts"]["pruned"] == 1 and document["budget_usd"] == 20.0
