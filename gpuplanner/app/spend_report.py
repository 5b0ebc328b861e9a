"""The spend report (:class:`gpuplanner.history.spend.SpendReport`) as text, CSV, Markdown or JSON: one format
for `gpuplanner runs report` and the window's History > Spend export."""

from __future__ import annotations

from gpuplanner.export.human import usd_cell
from gpuplanner.export.tables import to_csv, to_json, to_markdown, to_text
from gpuplanner.history.spend import SpendReport

REPORT_FORMATS = ("text", "csv", "markdown", "json")


def render_report(report: SpendReport, fmt: str) -> str:
    """``report`` in one of :data:`REPORT_FORMATS`."""
    if fmt == "json":
        return to_json(report.document())
    if fmt == "csv":
        return to_csv(report.columns(), report.table())
    if fmt == "markdown":
        title = f"Spend by {report.by or 'month'}" + (f", {report.month}" if report.month else "")
        return f"# {title}\n\n" + to_markdown(report.columns(), report.table())
    # text: dollars with their cents, GPU-hours to 1/100 (to_text keeps 4 significant digits)
    rows = [[*row[:3], f"{row[3]:,.2f}", usd_cell(row[4]), row[5]] for row in report.table()]
    for column in (3, 4):  # right-aligned like the numbers
        width = max([len(report.columns()[column])] + [len(str(row[column])) for row in rows])
        for row in rows:
            row[column] = str(row[column]).rjust(width)
    text = to_text(report.columns(), rows)
    if report.total.unpriced_runs:
        text += f"note: {report.total.unpriced_runs} run(s) have no price; their spend is not in cost_usd\n"
    return text
