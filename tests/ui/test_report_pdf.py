"""PDF reports are laid out in the PDF's own metrics: read back with poppler, no text overlaps, nothing is
clipped or elided, and long tables continue on further pages under a repeated header."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QPalette

from gpuplanner.ui.widgets.report_pdf import MARGIN_MM, Report, cell_text, write_pdf
from tests.ui.pdf_check import image_pages, missing_words, outside, overlaps, page_lines, read_words, render_pngs

MARGIN_PT = MARGIN_MM / 25.4 * 72

COLUMNS = ["#", "GPU", "n", "Pricing", "Provider", "Fits", "GiB", "Hours", "Cost $", "P90 $", "On time", "Why not"]


def _rows(count: int) -> list[list[object]]:
    providers = ["on-demand-cloud", "runpod", "lambda", "coreweave-us-east", "gcp"]
    rows = []
    for i in range(count):
        rows.append(
            [
                i + 1,
                ["H100 SXM", "A100 80GB", "RTX 4090", "L4"][i % 4],
                [1, 2, 4, 8][i % 4],
                "on_demand" if i % 3 else "spot",
                providers[i % 5],
                i % 7 != 0,
                40.123 + i,
                1.5 * (i + 1),
                1234.567 * (i + 1),
                0.00001115 * (i + 1),
                None,
                "does not fit: needs 93.4 GiB per GPU, has 80 GiB" if i % 7 == 0 else "",
            ]
        )
    return rows


def _paint_bar(painter: QPainter, rect: QRectF, palette: QPalette) -> None:
    painter.fillRect(rect.adjusted(0, 4, -rect.width() / 3, -4), QColor("#2f6fde"))
    painter.setPen(palette.color(QPalette.ColorRole.Text))


def test_long_report_paginates_without_overlaps_or_elision(qtbot, tmp_path: Path) -> None:
    title = "GPU plan for a long-named fine-tune of llama-3.1-8b with LoRA on rented GPUs"
    report = Report(title, "2026-11-23 14:00")
    report.text("Recommendation: rent 1 x H100 SXM on-demand at lambda for 3 h 40 min, $9.13 in total.", bold=True)
    pairs = [(f"input {i}", f"value-{i} with words") for i in range(14)]
    report.key_values(pairs, columns=3)
    report.picture(_paint_bar, 16)
    chart = QImage(900, 400, QImage.Format.Format_RGB32)
    chart.fill(QColor("#dde3ec"))
    report.image(chart, 55)
    rows = _rows(140)
    report.table(COLUMNS, rows)
    path = tmp_path / "long.pdf"

    pages_written = write_pdf(report, str(path))

    pages = read_words(path)
    assert pages_written == len(pages.sizes) >= 3  # 140 rows do not fit on one page
    assert overlaps(pages) == []
    assert outside(pages, MARGIN_PT) == []
    cells = [cell_text(v) for row in rows for v in row]
    assert not missing_words(pages, [title, "2026-11-23 14:00", *[k for k, _ in pairs], *[v for _, v in pairs]])
    assert not missing_words(pages, cells)
    assert not any("…" in w for w in pages.texts())
    for page in range(1, len(pages.sizes)):  # the header row repeats on every page the table runs on
        assert {"Provider", "Pricing", "Why"} <= set(pages.texts(page)), page
    # tiny money is shown to 3 significant figures, never in exponent notation
    assert "0.0000112" in pages.texts() and "0.0000223" in pages.texts()
    assert not any(re.search(r"\de[-+]\d", w) for w in pages.texts())
    # the table spans the page: its rightmost words reach into the right third of the page
    width = pages.sizes[0][0]
    assert max(w.x1 for w in pages.words if w.page == 1) > width * 0.7
    pngs = render_pngs(path, tmp_path)
    assert len(pngs) == pages_written
    image = QImage(str(pngs[0]))
    assert not image.isNull() and image.width() > 400


def test_title_and_date_do_not_overlap_on_a_short_report(qtbot, tmp_path: Path) -> None:
    report = Report("GPU Planner: run history", "2026-11-23 14:00")
    report.text("3 run(s), 12.5 GPU-hours, $31.20 in total.", bold=True)
    report.table(["ID", "Name", "Host"], [[1, "a-very-long-run-name-without-spaces-at-all", "runpod-spot"]])
    path = tmp_path / "short.pdf"
    assert write_pdf(report, str(path)) == 1
    pages = read_words(path)
    assert overlaps(pages) == []
    title = [w for w in pages.words if w.text == "Planner:"][0]
    date = [w for w in pages.words if w.text == "2026-11-23"][0]
    assert date.y0 >= title.y1 - 0.5
    assert "a-very-long-run-name-without-spaces-at-all" in pages.texts()


def test_a_table_too_wide_for_portrait_turns_the_page(qtbot, tmp_path: Path) -> None:
    columns = [f"column-{i}" for i in range(11)]
    rows = [[f"wideunbreakable{i}{j:02d}" for j in range(11)] for i in range(5)]
    report = Report("Wide")
    report.table(columns, rows)
    path = tmp_path / "wide.pdf"
    write_pdf(report, str(path))
    pages = read_words(path)
    width, height = pages.sizes[0]
    assert width > height  # landscape
    assert overlaps(pages) == []
    assert not missing_words(pages, [c for r in rows for c in r])


def test_a_long_title_leaves_the_footer_readable(qtbot, tmp_path: Path) -> None:
    title = "A very long report title " * 8
    report = Report(title.strip())
    report.text("Body.")
    path = tmp_path / "footer.pdf"
    write_pdf(report, str(path))
    pages = read_words(path)
    assert overlaps(pages) == []
    assert "page" in pages.texts() and not missing_words(pages, [title])


def test_a_heading_never_ends_a_page(qtbot, tmp_path: Path) -> None:
    """Qt's rich text has no keep-with-next: filler lines push a heading and its table down the first page,
    one line at a time, past the page's foot; the heading always shares its page with the table's header
    and first row, and a bold line with the picture that follows it."""
    endings = []
    for filler in range(44, 53):  # 50-52 put the heading on the last lines of page 1 without the rule
        report = Report("Keep with next", "2026-11-28")
        for i in range(filler):
            report.text(f"Filler line {i} of the report's first section.")
        report.heading("Costs by provider")
        report.table(["provider", "cost"], [[f"provider-{i}", f"${i}.00"] for i in range(3)])
        report.text("Cost over time", bold=True)
        chart = QImage(900, 400, QImage.Format.Format_RGB32)
        chart.fill(QColor("#dde3ec"))
        report.image(chart, 120)
        path = tmp_path / f"keep-{filler}.pdf"
        write_pdf(report, str(path))
        pages = page_lines(path)
        endings.append([lines[-1] for lines in pages])
        for number, lines in enumerate(pages):
            if "Costs by provider" in lines:  # the heading, then the header row and the first row below it
                at = lines.index("Costs by provider")
                below = [line.split() for line in lines[at + 1 : at + 3]]
                assert below == [["provider", "cost"], ["provider-0", "$0.00"]], (filler, number, lines[at:])
            if "Cost over time" in lines:  # the chart is on the same page
                assert number in image_pages(path), (filler, number)
    # the sweep did reach the foot: in some cases the heading starts page 2 and page 1 ends with filler
    assert any(ending[0].startswith("Filler line") and len(ending) > 1 for ending in endings), endings
