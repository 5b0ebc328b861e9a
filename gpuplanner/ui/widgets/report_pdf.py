"""PDF reports (QPdfWriter): a title, key-value inputs, pictures and tables, on as many A4 pages as needed.

The report is built as one HTML document (``QTextDocument``) laid out with the PDF writer as its paint
device, so text is measured in the metrics it is painted in: nothing is clipped or elided, cells wrap
at word boundaries, and long tables continue on the next page with their header row repeated. Pictures
(the memory bar) and charts are rendered to images first and placed in the flow at the page's width.
When a table's words cannot fit across a portrait page the report turns to landscape.

Qt's rich text has no keep-with-next, so the layout is checked after it is made: a heading (or a bold line)
is kept on one page with the start of what follows it (the next line, the picture, or a table's header
and first row); when they would part, space above the heading moves it to the next page, and a table
row that would straddle two pages starts the next one.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QMarginsF, QPointF, QRectF, QSizeF, Qt, QUrl
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QColor,
    QFont,
    QFontMetricsF,
    QImage,
    QPageLayout,
    QPageSize,
    QPainter,
    QPalette,
    QPdfWriter,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFrame,
    QTextOption,
    QTextTable,
)

from gpuplanner.ui.human import human_number
from gpuplanner.ui.palette import light_palette

RESOLUTION = 300  # dots per inch of the PDF's painter (layout happens in these units)
MARGIN_MM = 12.0
FOOTER_MM = 7.0
IMAGE_DPI = 192  # pictures painted for the report are rendered at this density
TEXT = "#1d1f23"
MUTED = "#555a63"
DIM = "#8a8f98"
STRIPE = "#f1f3f6"
RULE = "#c4c8cf"
KEEP_ANCHOR = "keep-with-next-"
HEADING_MARGIN_PX = 8.0  # space above a heading


@dataclass
class Report:
    title: str
    subtitle: str = ""
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def text(self, text: str, bold: bool = False) -> None:
        self.blocks.append(("text", (text, bold)))

    def heading(self, text: str) -> None:
        self.blocks.append(("heading", text))

    def key_values(self, pairs: Sequence[tuple[str, str]], columns: int = 3) -> None:
        self.blocks.append(("kv", (list(pairs), columns)))

    def picture(self, paint: Callable[[QPainter, QRectF, QPalette], None], height_mm: float) -> None:
        """Something painted into the given rectangle (the memory bar), as wide as the page."""
        self.blocks.append(("paint", (paint, height_mm)))

    def image(self, image: QImage, height_mm: float) -> None:
        """An image (a chart) scaled to the page width, at most ``height_mm`` high."""
        self.blocks.append(("image", (image, height_mm)))

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        max_rows: int | None = None,
        dim: Sequence[bool] | None = None,
    ) -> None:
        """A table; rows beyond ``max_rows`` are summarised in one line (None: every row, over pages)."""
        self.blocks.append(("table", (list(columns), [list(r) for r in rows], max_rows, list(dim or []))))


def cell_text(value: Any) -> str:
    """A value as the report prints it in a table cell."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return human_number(value)
    return str(value)


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


class _Builder:
    """Turns a :class:`Report` into HTML plus the image resources it refers to."""

    def __init__(
        self,
        content_width_css: float,
        breaks: set[tuple[int, int]] | None = None,
        kept: dict[int, float] | None = None,
    ) -> None:
        self.width = content_width_css  # the page's content width in CSS pixels (1/96 inch)
        self.breaks = breaks or set()  # (table number, row): start a new page (and header) before the row
        # headings (and bold lines) moved to the next page, by number: the space added above them (CSS px)
        self.kept = kept or {}
        self.headings = 0  # headings and bold lines so far, each kept with what follows it
        self.images: list[tuple[str, QImage]] = []
        self.parts: list[str] = []
        # one entry per table in the document, in order: (report table number, first row) or None (key-values)
        self.tables: list[tuple[int, int] | None] = []
        self._table_number = 0

    def add_image(self, image: QImage, width: float, height: float) -> None:
        name = f"report-image:{len(self.images)}"
        self.images.append((name, image))
        self.parts.append(f'<p class="pic"><img src="{name}" width="{int(width)}" height="{int(height)}"></p>')

    def build(self, report: Report) -> str:
        self.parts.append(f'<p class="title">{_esc(report.title)}</p>')
        if report.subtitle:
            self.parts.append(f'<p class="subtitle">{_esc(report.subtitle)}</p>')
        for kind, payload in report.blocks:
            getattr(self, f"_{kind}")(payload)
        return "".join(self.parts)

    def _text(self, payload: tuple[str, bool]) -> None:
        text, bold = payload
        if bold:
            self._kept_with_next("strong", text)
        else:
            self.parts.append(f'<p class="body">{_esc(text)}</p>')

    def _heading(self, text: str) -> None:
        self._kept_with_next("heading", text)

    def _kept_with_next(self, css_class: str, text: str) -> None:
        """A paragraph kept on one page with what follows it; its anchor names it in the laid-out document."""
        number = self.headings
        self.headings += 1
        # moved down by space above it, not by page-break-before: after a table that ends near a page's foot
        # Qt counts itself a page ahead, and a page break there leaves a blank page
        margin = (HEADING_MARGIN_PX if css_class == "heading" else 0.0) + self.kept.get(number, 0.0)
        style = f' style="margin-top: {margin:.2f}px"' if number in self.kept else ""
        anchor = f'<a name="{KEEP_ANCHOR}{number}">{_esc(text)}</a>'
        self.parts.append(f'<p class="{css_class}"{style}>{anchor}</p>')

    def _kv(self, payload: tuple[list[tuple[str, str]], int]) -> None:
        pairs, columns = payload
        rows = (len(pairs) + columns - 1) // columns
        self.tables.append(None)
        out = ['<table class="kv" width="100%" cellspacing="0" cellpadding="1">']
        for r in range(rows):
            out.append("<tr>")
            for c in range(columns):
                i = c * rows + r
                if i < len(pairs):
                    key, value = pairs[i]
                    out.append(f'<td class="key">{_esc(key)}</td><td class="value">{_esc(value)}</td>')
                else:
                    out.append("<td></td><td></td>")
            out.append("</tr>")
        out.append("</table>")
        self.parts.append("".join(out))

    def _paint(self, payload: tuple[Callable[[QPainter, QRectF, QPalette], None], float]) -> None:
        paint, height_mm = payload
        scale = IMAGE_DPI / 96.0
        width_css, height_css = self.width, height_mm / 25.4 * 96.0
        image = QImage(int(width_css * scale), int(height_css * scale), QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
        dpm = round(96 / 0.0254)  # fonts in points measure as on a 96-dpi screen; the painter scales up
        image.setDotsPerMeterX(dpm)
        image.setDotsPerMeterY(dpm)
        painter = QPainter(image)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.scale(scale, scale)
            paint(painter, QRectF(0, 0, width_css, height_css), light_palette())
        finally:
            painter.end()
        self.add_image(image, width_css, height_css)

    def _image(self, payload: tuple[QImage, float]) -> None:
        image, height_mm = payload
        if image.isNull() or image.width() < 2 or image.height() < 2:
            return
        max_h = height_mm / 25.4 * 96.0
        scale = min(self.width / image.width(), max_h / image.height())
        self.add_image(image, image.width() * scale, image.height() * scale)

    def _table(self, payload: tuple[list[str], list[list[Any]], int | None, list[bool]]) -> None:
        columns, rows, max_rows, dim = payload
        number = self._table_number
        self._table_number += 1
        shown = rows if max_rows is None else rows[:max_rows]
        starts = [0] + sorted(row for table, row in self.breaks if table == number and 0 < row < len(shown))
        header = "<thead><tr>" + "".join(f"<th>{_esc(name)}</th>" for name in columns) + "</tr></thead>"
        out = []
        for part, start in enumerate(starts):
            end = starts[part + 1] if part + 1 < len(starts) else len(shown)
            self.tables.append((number, start))
            style = ' style="page-break-before: always"' if part else ""
            out.append(f'<table class="grid" width="100%" cellspacing="0" cellpadding="2"{style}>{header}')
            for index in range(start, end):
                styles = []
                if index % 2:
                    styles.append(f"background-color:{STRIPE}")
                if index < len(dim) and dim[index]:
                    styles.append(f"color:{DIM}")
                row_style = f' style="{";".join(styles)}"' if styles else ""
                cells = "".join(f"<td>{_esc(cell_text(v))}</td>" for v in shown[index])
                out.append(f"<tr{row_style}>{cells}</tr>")
            out.append("</table>")
        self.parts.append("".join(out))
        if len(shown) < len(rows):
            self.parts.append(f'<p class="note">{len(rows) - len(shown)} more rows in the CSV export.</p>')


_STYLE = """
p { margin-top: 0px; margin-bottom: 4px; color: {TEXT}; }
p.title { font-size: 16pt; font-weight: bold; margin-bottom: 2px; }
p.subtitle { color: {MUTED}; margin-bottom: 8px; }
p.heading { font-size: 11pt; font-weight: bold; margin-top: {HEADING_MARGIN_PX}px; }
p.strong { font-weight: bold; }
p.note { color: {MUTED}; font-size: 7.5pt; }
p.pic { margin-top: 2px; margin-bottom: 6px; }
table.kv { margin-bottom: 6px; }
td.key { color: {MUTED}; padding-right: 4px; }
td.value { color: {TEXT}; padding-right: 10px; }
table.grid { font-size: {table_pt}pt; margin-bottom: 8px; border-collapse: collapse; }
table.grid th { text-align: left; padding-right: 6px; font-weight: bold; border-bottom: 1px solid {RULE}; background-color: #e6e9ee; }
table.grid td { vertical-align: top; padding-right: 6px; }
"""
TABLE_POINT_SIZES = (7.5, 6.5, 5.5)  # a table too wide for the page is set smaller, down to 5.5 pt


def _style(table_pt: float) -> str:
    colors = {
        "{HEADING_MARGIN_PX}": f"{HEADING_MARGIN_PX:g}",
        "{TEXT}": TEXT,
        "{MUTED}": MUTED,
        "{RULE}": RULE,
        "{table_pt}": f"{table_pt:g}",
    }
    style = _STYLE
    for key, value in colors.items():
        style = style.replace(key, value)
    return style


def _page_layout(landscape: bool) -> QPageLayout:
    orientation = QPageLayout.Orientation.Landscape if landscape else QPageLayout.Orientation.Portrait
    margins = QMarginsF(MARGIN_MM, MARGIN_MM, MARGIN_MM, MARGIN_MM)
    return QPageLayout(QPageSize(QPageSize.PageSizeId.A4), orientation, margins, QPageLayout.Unit.Millimeter)


def _document(
    report: Report,
    writer: QPdfWriter,
    table_pt: float,
    breaks: set[tuple[int, int]] | None = None,
    kept: dict[int, float] | None = None,
) -> tuple[QTextDocument, _Builder]:
    paint_rect = QRectF(writer.pageLayout().paintRectPixels(RESOLUTION))
    footer = FOOTER_MM / 25.4 * RESOLUTION
    builder = _Builder(paint_rect.width() * 96.0 / RESOLUTION, breaks, kept)
    body = builder.build(report)
    doc = QTextDocument()
    doc.documentLayout().setPaintDevice(writer)
    font = QFont("DejaVu Sans")
    font.setStyleHint(QFont.StyleHint.SansSerif)
    font.setPointSizeF(9.0)
    doc.setDefaultFont(font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)  # never break inside a word
    doc.setDefaultTextOption(option)
    doc.setDocumentMargin(0)
    doc.setDefaultStyleSheet(_style(table_pt))
    for name, image in builder.images:
        doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(name), image)
    doc.setPageSize(QSizeF(paint_rect.width(), paint_rect.height() - footer))
    doc.setHtml(f"<html><body>{body}</body></html>")
    return doc, builder


def _tables(doc: QTextDocument) -> list[QTextTable]:
    """The document's tables in document order."""
    found: list[QTextTable] = []

    def walk(frame: QTextFrame) -> None:
        for child in frame.childFrames():
            if isinstance(child, QTextTable):
                found.append(child)
            walk(child)

    walk(doc.rootFrame())
    found.sort(key=lambda table: table.firstPosition())
    return found


def _line_spans(doc: QTextDocument, first: QTextBlock, last_position: int) -> list[tuple[float, float]]:
    """(top, bottom) of each laid-out line of the blocks from ``first`` up to ``last_position``."""
    layout = doc.documentLayout()
    spans = []
    block = first
    while block.isValid() and block.position() <= last_position:
        rect = layout.blockBoundingRect(block)
        text_layout = block.layout()
        for i in range(text_layout.lineCount()):
            line = text_layout.lineAt(i)
            spans.append((rect.top() + line.y(), rect.top() + line.y() + line.height()))
        block = block.next()
    return spans


def _row_spans(table: QTextTable, row: int) -> list[tuple[float, float]]:
    doc = table.document()
    spans = []
    for column in range(table.columns()):
        cell = table.cellAt(row, column)
        spans += _line_spans(doc, cell.firstCursorPosition().block(), cell.lastPosition())
    return spans


def _page(top: float, bottom: float, page_height: float) -> tuple[int, int]:
    """The pages a line (or a run of lines) from ``top`` to ``bottom`` starts and ends on; Qt places a line
    moved to a new page a fraction of a pixel above the page's computed top."""
    return int((top + 1.0) // page_height), int((bottom - 1.0) // page_height)


def _split_rows(doc: QTextDocument, builder: _Builder) -> dict[tuple[int, int], float]:
    """Rows of report tables whose lines Qt spread over two pages, as (table number, row): where they start."""
    page_height = doc.pageSize().height()
    split: dict[tuple[int, int], float] = {}
    for table, origin in zip(_tables(doc), builder.tables):
        if origin is None:
            continue
        header_rows = table.format().headerRowCount()
        for row in range(header_rows, table.rows()):
            spans = _row_spans(table, row)
            top, bottom = min((t for t, _ in spans), default=0.0), max((b for _, b in spans), default=0.0)
            if spans and len(set(_page(top, bottom, page_height))) > 1:
                split[(origin[0], origin[1] + row - header_rows)] = top
        # a table whose frame runs past the page its last row ends on repeats its header alone on the next
        # page: its last row goes there too
        last = table.rows() - 1
        spans = _row_spans(table, last) if last > header_rows else []
        if spans:
            frame_bottom = doc.documentLayout().frameBoundingRect(table).bottom()
            top, bottom = min(t for t, _ in spans), max(b for _, b in spans)
            if _page(top, frame_bottom, page_height)[1] > _page(top, bottom, page_height)[1]:
                split.setdefault((origin[0], origin[1] + last - header_rows), top)
    return split


def _kept_number(block: QTextBlock) -> int | None:
    """The number of the heading (or bold line) ``block`` is, from its anchor; None for other blocks."""
    fragments = block.begin()
    while not fragments.atEnd():
        for name in fragments.fragment().charFormat().anchorNames():
            if name.startswith(KEEP_ANCHOR):
                return int(name[len(KEEP_ANCHOR) :])
        fragments += 1
    return None


def _orphans(doc: QTextDocument) -> dict[int, float]:
    """Headings (and bold lines) that Qt left on another page than the start of what follows them, as
    heading number: where the run of headings they end starts (a heading over a heading moves with it).

    What follows is the next line, or for a table its header and first row."""
    page_height = doc.pageSize().height()
    orphans: dict[int, float] = {}
    chain: list[tuple[int, float]] = []  # the headings in a row just passed: (number, top)
    block = doc.begin()
    while block.isValid():
        if not block.text() and QTextCursor(block).currentTable() is None:
            block = block.next()  # the empty blocks Qt keeps between frames
            continue
        number = _kept_number(block)
        spans = _line_spans(doc, block, block.position())
        table = QTextCursor(block).currentTable()
        if table is not None:  # the header row and the first row below it
            first_row = min(table.format().headerRowCount(), table.rows() - 1)
            spans = [span for row in range(first_row + 1) for span in _row_spans(table, row)]
        if chain and spans:
            first, top = chain[0]
            if (
                len(set(_page(chain[-1][1], max(b for _, b in spans), page_height))) > 1
                and (top + 1.0) % page_height > 2.0
            ):
                orphans[first] = top  # a heading at a page's very top has nowhere better to go
        if number is not None and spans:
            chain.append((number, spans[0][0]))
        else:
            chain = []
        if table is not None:
            block = QTextCursor(table.lastCursorPosition()).block()
        block = block.next()
    return orphans


def layout_document(report: Report, path: str) -> tuple[QPdfWriter, QTextDocument]:
    """The writer and the laid-out document: portrait, else landscape, else landscape with smaller tables.

    ``idealWidth`` is the width the content needs with every line wrapped as far as words allow; the
    first set-up in which it fits the page is used (the last one otherwise).
    """
    attempts = [(False, pt) for pt in TABLE_POINT_SIZES[:2]] + [(True, pt) for pt in TABLE_POINT_SIZES]
    for number, (landscape, table_pt) in enumerate(attempts):
        writer = QPdfWriter(path)
        writer.setResolution(RESOLUTION)
        writer.setTitle(report.title)
        writer.setCreator("GPU Planner")
        writer.setPageLayout(_page_layout(landscape))
        doc, builder = _document(report, writer, table_pt)
        # a full-width table's ideal width can round a pixel or two past the page (1/300 inch): still fits
        if doc.idealWidth() <= doc.pageSize().width() + 2.0 or number == len(attempts) - 1:
            break
    # a table row never straddles two pages and a heading stays with what follows it: start a new page
    # before each such row (with the table's header) or heading, the first one each time (later ones move)
    breaks: set[tuple[int, int]] = set()
    kept: dict[int, float] = {}
    for _ in range(2 * doc.pageCount() + 4):
        split = {row: top for row, top in _split_rows(doc, builder).items() if row not in breaks}
        orphans = _orphans(doc)
        if not split and not orphans:
            break
        first_row = min(split, key=lambda row: (split[row], row), default=None)
        first_heading = min(orphans, key=lambda n: (orphans[n], n), default=None)
        if first_heading is not None and (first_row is None or orphans[first_heading] <= split[first_row]):
            # space enough above it to reach past the foot of its page (a pixel to spare)
            page_height = doc.pageSize().height()
            top = orphans[first_heading]
            below = (int((top + 1.0) // page_height) + 1) * page_height - top
            kept[first_heading] = kept.get(first_heading, 0.0) + below * 96.0 / RESOLUTION + 1.0
        elif first_row is not None:
            breaks.add(first_row)
        doc, builder = _document(report, writer, table_pt, breaks, kept)
    return writer, doc


def write_pdf(report: Report, path: str) -> int:
    """Write the report to ``path``; returns the number of pages."""
    writer, doc = layout_document(report, path)
    page = doc.pageSize()
    pages = doc.pageCount()
    painter = QPainter(writer)
    try:
        footer_font = QFont(doc.defaultFont())
        footer_font.setPointSizeF(7.5)
        for number in range(pages):
            if number:
                writer.newPage()
            painter.save()
            painter.setClipRect(QRectF(0, 0, page.width(), page.height()))
            painter.translate(QPointF(0, -number * page.height()))
            context = QAbstractTextDocumentLayout.PaintContext()
            # a pixel inside the page: a line that starts the next page (or ends the last) touches this
            # page's edge, and would be drawn, invisible past the painter's clip but in the PDF's text
            context.clip = QRectF(0, number * page.height() + 1, page.width(), page.height() - 2)
            context.palette.setColor(QPalette.ColorRole.Text, QColor(TEXT))
            doc.documentLayout().draw(painter, context)
            painter.restore()
            painter.setFont(footer_font)
            painter.setPen(QColor(DIM))
            bottom = QRectF(writer.pageLayout().paintRectPixels(RESOLUTION)).height()
            band = QRectF(0, page.height(), page.width(), bottom - page.height())
            folio = f"GPU Planner · page {number + 1} of {pages}"
            metrics = QFontMetricsF(footer_font, writer)
            if metrics.horizontalAdvance(report.title) + metrics.horizontalAdvance(folio) + 40 < band.width():
                painter.drawText(band, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom), report.title)
            painter.drawText(band, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom), folio)
    finally:
        painter.end()
    return pages
