"""History > Export > PDF report: the runs exported (totals, the table as it shows them, where the billed
time went), then the runs compared side by side with their overlay, or the one selected run and its plots."""

from __future__ import annotations

import time

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QImage

from gpuplanner.history.analytics import RunSummary
from gpuplanner.history.run_cost import add_costs
from gpuplanner.history.time_breakdown import sum_breakdowns
from gpuplanner.ui.history.history_model import COLUMNS, display_text, row_values
from gpuplanner.ui.history.history_summary import cost_text, run_breakdown
from gpuplanner.ui.human import human_cost, human_duration, human_hours, human_money
from gpuplanner.ui.widgets.report_pdf import Report


def runs_report(
    runs: list[RunSummary],
    compare: tuple[list[str], list[list[str]]] | None = None,
    overlay: tuple[str, QImage] | None = None,
    one_run: tuple[RunSummary, QImage] | None = None,
) -> Report:
    """The report of ``runs``; ``compare``: the headers and texts of the runs selected side by side, with
    ``overlay`` (its x axis' name and image) when it shows them; else ``one_run``: the selected run and
    an image of its plots."""
    report = Report("GPU Planner: run history", time.strftime("%Y-%m-%d %H:%M"))
    costs = add_costs(s.cost_usd for s in runs)
    hours = sum(s.gpu_hours or 0.0 for s in runs)
    runs_text = f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
    unpriced = f" ({costs.unpriced_runs} without a price, not in it)" if costs.unpriced_runs else ""
    report.text(f"{runs_text}, {hours:,.1f} GPU-hours, {human_cost(costs.cost_usd)} in total{unpriced}.", bold=True)
    shown = [  # as the table shows them
        [display_text(c, v, s.price_usd_per_gpu_hour) for c, v in enumerate(row_values(s))] for s in runs
    ]
    report.table([c[0] for c in COLUMNS], shown)
    spent = sum_breakdowns(run_breakdown(s) for s in runs)
    if spent.recorded:
        note = f" ({spent.note})" if spent.note else ""
        report.text(f"Where the billed time went{note}", bold=True)
        report.table(
            ["phase", "share", "cost", "time"],
            [
                [p.label, f"{p.share:.0%}", human_money(p.cost_usd), human_duration(p.seconds)]
                for p in spent.phases
                if p.shown
            ],
        )
    if compare is not None:
        headers, texts = compare
        report.text("Compared side by side", bold=True)
        report.table(["metric", *headers], texts)
        if overlay is not None:
            x_name, image = overlay
            report.text("The runs overlaid (" + x_name + ")", bold=True)
            report.image(image, 110)
    elif one_run is not None:
        summary, image = one_run
        parts = [summary.status, human_hours(summary.hours), cost_text(summary, summary.cost_usd)]
        if summary.avg_util_pct is not None:
            parts.append(f"{summary.avg_util_pct:.0f}% average utilisation")
        report.text(f"Run {summary.run_id}: " + ", ".join(parts), bold=True)
        if not image.isNull() and image.width() > 10:
            report.image(
                image.scaled(
                    QSize(1400, 800), Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
                ),
                110,
            )
    return report
