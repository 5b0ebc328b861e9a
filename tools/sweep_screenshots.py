"""Screenshots of the search and spend views for the user guide, from a throwaway history.

    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python tools/sweep_screenshots.py [--out docs/screenshots]

Writes sweep.png (the Sweep pane with an estimate and a finished search), searches.png (History >
Searches), spend.png (History > Spend) at 1280x800, sweep-1920.png at 1920x1080, sweep-dark.png and
sweep-1920-dark.png on the dark palette, and search-report.png
(page 1 of the search's PDF export). The search is a made-up one of six trials (its figures are
invented for the picture; the tests check the real arithmetic).
"""

from __future__ import annotations

import argparse
import calendar
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def utc(month: int, day: int, hour: int = 12) -> float:
    return float(calendar.timegm((2026, month, day, hour, 0, 0)))


def make_history(db_path: Path) -> None:
    import optuna

    from gpuplanner.history.db import open_db
    from gpuplanner.history.runs import create_run, update_run
    from gpuplanner.sweep.study import storage_url

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with open_db(db_path) as db:
        for start, hours, gpus, price, tags in (
            (utc(11, 2), 6.0, 8, 2.9, {"project": "pretrain", "owner": "ana"}),
            (utc(11, 9), 3.0, 1, 1.1, {"project": "finetune", "owner": "bob"}),
            (utc(11, 14), 1.5, 2, 2.9, {"project": "finetune", "owner": "ana"}),
            (utc(10, 28), 4.0, 4, 2.9, {"project": "pretrain", "owner": "ana"}),
            (utc(11, 18), 0.5, 1, 0.8, {}),
        ):
            run_id = create_run(db, gpu_count=gpus, price_usd_per_gpu_hour=price, started_at=start, tags=tags)
            update_run(db, run_id, first_t=start, last_t=start + hours * 3600, status="finished")
    study = optuna.create_study(study_name="lr-search", storage=storage_url(db_path), direction="minimize")
    study.set_user_attr("caps", {"budget_usd": 60.0, "max_gpu_hours": None})
    study.set_user_attr("tags", {"project": "search"})
    study.set_user_attr("stop_reason", "cap reached: budget_usd: a trial's first milestone costs $6.10, $3.20 left")
    t0 = utc(11, 20, 9)
    trials = [  # value (None: pruned / stopped), start (min), minutes run, $ per minute, lr, end
        (2.41, 0, 60, 0.18, 3e-4, "complete"),
        (None, 0, 20, 0.18, 2e-2, "pruned"),
        (2.18, 22, 60, 0.18, 8e-4, "complete"),
        (None, 62, 20, 0.18, 5e-5, "pruned"),
        (2.05, 84, 60, 0.18, 1.2e-3, "complete"),
        (None, 146, 14, 0.18, 1.0e-3, "budget"),
    ]
    with open_db(db_path) as db:
        for value, start, minutes, rate, lr, end in trials:
            study.enqueue_trial({"lr": lr})
            trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-5, 1e-1, log=True)})
            run_id = create_run(
                db, name=f"lr-search-trial-{trial.number}", host="gpu-box", gpu_count=1, price_usd_per_gpu_hour=10.8,
                config={"trainer_args": ["--model-config", "cfg.json", "--data", "corpus/", "--lr", f"{lr:g}",
                                         "--max-steps", "900", "--eval-every-steps", "300"]},
                tags={"project": "search", "sweep": "lr-search"},
            )  # fmt: skip
            for seq, minute in enumerate(range(2, minutes + 1, 2)):
                db.execute(
                    "INSERT INTO steps (run_id, seq, t, step, spend_usd) VALUES (?, ?, ?, ?, ?)",
                    [run_id, seq, t0 + (start + minute) * 60, minute * 15, round(minute * rate, 4)],
                )
            update_run(db, run_id, first_t=t0 + start * 60, last_t=t0 + (start + minutes) * 60, status="finished")
            trial.set_user_attr("run_id", run_id)
            trial.set_user_attr("host", "gpu-box")
            trial.set_user_attr("end", end)
            trial.report(value if value is not None else 2.9, 300)
            if end == "complete":
                study.tell(trial, value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="gpuplanner-sweep-shots-"))
    os.environ["GPUPLANNER_DATA_DIR"] = str(home / "data")
    os.environ["GPUPLANNER_CONFIG_DIR"] = str(home / "config")
    (home / "data").mkdir()
    db_path = home / "data" / "history.sqlite"
    make_history(db_path)

    from PySide6.QtWidgets import QApplication
    from screenshots import grab, render_pdf_page, wait

    from gpuplanner.ui.history.search_view import SearchesDialog, summary_text
    from gpuplanner.ui.history.spend_view import SpendDialog
    from gpuplanner.ui.palette import apply_scheme
    from gpuplanner.ui.services import AppServices
    from gpuplanner.ui.sweep.sweep_pane import SweepPane

    app = QApplication.instance() or QApplication([])
    services = AppServices(db_path=db_path, config_dir=home / "config")

    shots = [
        (dark, suffix, size) for dark in (False, True) for suffix, size in (("", (1280, 800)), ("-1920", (1920, 1080)))
    ]
    for dark, suffix, size in shots:
        apply_scheme(app, dark=dark)
        suffix += "-dark" if dark else ""
        pane = SweepPane(services)
        pane.resize(*size)
        pane.show()
        pane.model_combo.setCurrentText("llama-3.2-1b")
        pane.gpu_combo.setCurrentText("A100 80GB")
        pane.plan_budget_edit.setText("100")
        pane.plan_hours_edit.setText("20")
        pane.plan_search()
        wait(30, lambda pane=pane: pane.estimate is not None)
        pane.study = "lr-search"
        pane._watch()
        wait(30, lambda pane=pane: pane.review is not None)
        pane.status_label.setText(summary_text(pane.review))
        pane.space_edit.setText("lr-space.toml")
        pane.run_budget_edit.setText("60")
        pane.tags_edit.setText("project=search")
        pane.flags_edit.setText("--model-config cfg.json --data corpus/")
        pane.log_view.setPlainText(
            "trial 0: run 6 on gpu-box: lr=0.0003\ntrial 1: run 7 on gpu-box: lr=0.02\n"
            "trial 1: pruned at step 300 (eval_loss 2.90)\nsearch stopped: cap reached"
        )
        grab(pane, out / f"sweep{suffix}.png")
        if not suffix:
            pane.forms.setCurrentIndex(1)
            grab(pane, out / "sweep-run.png")
        pane.shutdown()
        pane.close()
    apply_scheme(app, dark=False)

    searches = SearchesDialog(db_path)
    searches.resize(1280, 800)
    searches.show()
    wait(10, lambda: searches.list.count() > 0)
    searches.select("lr-search")
    wait(30, lambda: searches.review is not None)
    grab(searches, out / "searches.png")
    pdf = home / "search.pdf"
    searches.export(pdf, "pdf")
    render_pdf_page(pdf, out / "search-report.png")
    searches.shutdown()

    spend = SpendDialog(db_path)
    spend.resize(1280, 800)
    spend.show()
    wait(10, lambda: spend.report is not None)
    spend.by_combo.setCurrentText("project")
    spend.month_edit.setText("2026-11")
    spend.recompute()
    wait(10, lambda: spend.report is not None and spend.report.by == "project")
    wait(1)
    grab(spend, out / "spend.png")
    spend.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
