"""The Plan pane's exports: the comparison as CSV and Markdown, the charts as one PNG, the PDF report.

The PDF describes the same one option as the details (:class:`~gpuplanner.ui.plan.plan_details.Details`):
the form's own option's note first when there is one, then that option's verdict, summary, speed, what
to rent, settings, memory bar and advice; then the chart and the best options of the ranked table, on one
page (the CSV has every option). The Markdown starts with the inputs the plan answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QImage, QPainter, QPalette
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from gpuplanner.export.tables import to_csv, to_markdown
from gpuplanner.plan.compare import CompareRow
from gpuplanner.planning import PlanResult
from gpuplanner.ui.plan.compare_model import COLUMNS, EXPORT_COLUMNS, export_rows, table_cells
from gpuplanner.ui.plan.memory_bar import MemoryView, paint_memory_bar
from gpuplanner.ui.plan.plan_details import Details, focus_request
from gpuplanner.ui.plan.plan_inputs import inputs_with_form
from gpuplanner.ui.plan.plan_settings_text import settings_rows
from gpuplanner.ui.widgets.report_pdf import Report


def export_table(result: PlanResult | None) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    return EXPORT_COLUMNS, export_rows(result.rows if result else [])


def write_csv(result: PlanResult | None, path: str | Path) -> None:
    columns, rows = export_table(result)
    Path(path).write_text(to_csv(columns, rows), encoding="utf-8")


def input_rows(result: PlanResult) -> list[tuple[str, str]]:
    """The form's inputs in people's words, the deadline and budget said even when not set."""
    inputs = inputs_with_form(result.request, result.values)
    inputs.pop("form", None)
    rows = settings_rows(inputs)
    labels = {label for label, _ in rows}
    rows += [(label, "none") for label in ("Deadline", "Budget") if label not in labels]
    if inputs.get("engine"):
        rows.append(("Engine", str(inputs["engine"])))
    return rows


def write_markdown(result: PlanResult | None, path: str | Path) -> None:
    """The recommendation, the inputs it answers (method, data, sequence length, deadline, budget...) and
    the comparison of every option."""
    columns, rows = export_table(result)
    text = ""
    if result is not None:
        text = f"# GPU plan: {result.request.model.name}\n\n**Recommendation:** {result.recommendation}\n\n"
        text += "## Inputs\n\n" + to_markdown(("setting", "value"), input_rows(result)) + "\n## Options\n\n"
    Path(path).write_text(text + to_markdown(columns, rows), encoding="utf-8")


def charts_image(view: MemoryView | None, chart: QImage, palette: QPalette, width: int = 1200) -> QImage:
    """The memory bar and the cost chart, one above the other, as one image."""
    bar_h = 110
    chart_h = int(chart.height() * width / max(1, chart.width()))
    image = QImage(QSize(width, bar_h + chart_h), QImage.Format.Format_ARGB32)
    image.fill(palette.color(QPalette.ColorRole.Base))
    painter = QPainter(image)
    try:
        paint_memory_bar(painter, QRectF(10, 8, width - 20, bar_h - 16), view, palette)
        painter.drawImage(QRectF(0, bar_h, width, chart_h), chart)
    finally:
        painter.end()
    return image


def option_settings_rows(result: PlanResult, details: Details) -> list[tuple[str, str]]:
    """The described option's settings in people's words (its GPU, count, pricing and fitted settings)."""
    inputs = inputs_with_form(focus_request(details.focus, result.request), result.values)
    inputs.pop("form", None)
    return settings_rows(inputs)


def plan_report(result: PlanResult | None, details: Details | None, view: MemoryView | None, chart: QImage) -> Report:
    """The PDF report of one plan: ``details`` (written without the window's hints) and ``view`` (its memory
    bar) describe one option."""
    report = Report("GPU plan", time.strftime("%Y-%m-%d %H:%M"))
    if result is None or details is None:
        report.text("No valid plan.")
        return report
    if details.form_note:
        report.text(details.form_note, bold=True)
    # as the window's headline: the recommendation, or (an option selected) that option's verdict alone
    selected = details.focus.why == "selected"
    report.text(details.headline if selected else "Recommendation: " + details.headline, bold=True)
    report.text(details.focus_line)
    report.text(details.summary + " " + details.sources)
    report.text(details.rent)
    report.key_values(option_settings_rows(result, details), columns=3)
    report.picture(lambda painter, rect, palette: paint_memory_bar(painter, rect, view, palette), 22)
    if details.advice:
        report.text(" ".join(details.advice))
    report.image(chart, 55)
    rows = report_rows(result.rows, details)
    dim = [not row.usable for row in rows]
    # as the window shows them, less the deadline, budget and GPU-hour marks: "Why not" names a limit an option
    # misses ("late, over budget"), and a portrait page holds the rest
    unset = {"meets_deadline", "within_budget", "within_gpu_hours"}
    shown = [i for i, c in enumerate(COLUMNS) if c[1] not in unset]
    texts = [[cells[i] for i in shown] for cells in table_cells(rows).texts]
    report.table([COLUMNS[i][0] for i in shown], texts, dim=dim)
    if len(rows) < len(result.rows):
        report.text(
            f"The {len(rows)} best of {len(result.rows)} options (and the one described); the comparison as CSV "
            "lists every option with its reason."
        )
    return report


def report_rows(rows: Sequence[CompareRow], details: Details) -> list[CompareRow]:
    """The report's table: the :data:`REPORT_ROWS` best options and the described one (the PDF is one page;
    the CSV has every option)."""
    shown = list(rows[:REPORT_ROWS])
    focus = details.focus.row
    if focus is not None and focus not in shown:
        shown.append(focus)
    return shown


REPORT_ROWS = 8  # the options the one-page PDF lists
WHAT = {"csv": "comparison (CSV)", "markdown": "plan (Markdown)", "png": "charts (PNG)", "pdf": "one-page PDF report"}
FILTERS = {"csv": "CSV (*.csv)", "markdown": "Markdown (*.md)", "png": "PNG image (*.png)", "pdf": "PDF (*.pdf)"}
SUFFIXES = {"csv": ".csv", "markdown": ".md", "png": ".png", "pdf": ".pdf"}


def saved_message(kind: str, path: str | Path) -> str:
    """The status bar's sentence for a written export: what and where."""
    return f"Saved the {WHAT[kind]} to {path}"


def ask_and_write(parent: QWidget, kind: str, writers: Mapping[str, Callable[[str], None]]) -> str | None:
    """Ask where to write the ``kind`` export (its suffix added when missing), then write it with
    ``writers[kind]``; the path, or None when the user cancelled or the file could not be written (said)."""
    suffix = SUFFIXES[kind]
    path, _ = QFileDialog.getSaveFileName(parent, "Export plan", f"gpu-plan{suffix}", FILTERS[kind])
    if not path:
        return None
    if not path.endswith(suffix):
        path += suffix
    try:
        writers[kind](path)
    except OSError as exc:
        QMessageBox.warning(parent, "Export", f"Cannot write {path}: {exc}")
        return None
    return path
