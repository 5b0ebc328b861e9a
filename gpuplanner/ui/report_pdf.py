"""One-page PDF reports (QPdfWriter): a title, key-value inputs, pictures and a table, fitted to A4.

Blocks are laid out top to bottom; a table takes the room that is left and says how many rows did
not fit (the CSV export has them all), so the report is always exactly one page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QMarginsF, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QImage,
    QPageLayout,
    QPageSize,
    QPainter,
    QPalette,
    QPdfWriter,
    QPen,
)

from gpuplanner.ui.palette import light_palette

RESOLUTION = 144  # dots per inch of the PDF's painter


@dataclass
class Report:
    title: str
    subtitle: str = ""
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def text(self, text: str, bold: bool = False) -> None:
        self.blocks.append(("text", (text, bold)))

    def key_values(self, pairs: Sequence[tuple[str, str]], columns: int = 3) -> None:
        self.blocks.append(("kv", (list(pairs), columns)))

    def picture(self, paint: Callable[[QPainter, QRectF, QPalette], None], height_mm: float) -> None:
        """Something painted into the given rectangle (the memory bar)."""
        self.blocks.append(("paint", (paint, height_mm)))

    def image(self, image: QImage, height_mm: float) -> None:
        self.blocks.append(("image", (image, height_mm)))

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        max_rows: int | None = None,
        dim: Sequence[bool] | None = None,
    ) -> None:
        self.blocks.append(("table", (list(columns), [list(r) for r in rows], max_rows, list(dim or []))))


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def write_pdf(report: Report, path: str) -> None:
    writer = QPdfWriter(path)
    writer.setResolution(RESOLUTION)
    writer.setTitle(report.title)
    writer.setCreator("GPU Planner")
    writer.setPageLayout(
        QPageLayout(
            QPageSize(QPageSize.PageSizeId.A4),
            QPageLayout.Orientation.Portrait,
            QMarginsF(12, 12, 12, 12),
            QPageLayout.Unit.Millimeter,
        )
    )
    painter = QPainter(writer)
    try:
        _paint(
            painter,
            report,
            QRectF(writer.pageLayout().paintRectPixels(RESOLUTION)).translated(
                -writer.pageLayout().paintRectPixels(RESOLUTION).topLeft()
            ),
        )
    finally:
        painter.end()


def _mm(value: float) -> float:
    return value / 25.4 * RESOLUTION


def _paint(painter: QPainter, report: Report, page: QRectF) -> None:
    palette = light_palette()
    base = QFont("Sans Serif")
    base.setPointSizeF(8.0)
    painter.setFont(base)
    painter.setPen(QColor("#1d1f23"))
    y = page.top()
    title = QFont(base)
    title.setPointSizeF(15)
    title.setBold(True)
    painter.setFont(title)
    h = QFontMetricsF(title).height()
    painter.drawText(QRectF(page.left(), y, page.width(), h), Qt.AlignmentFlag.AlignLeft, report.title)
    y += h
    painter.setFont(base)
    fm = QFontMetricsF(base)
    line = fm.height()
    if report.subtitle:
        painter.setPen(QColor("#555a63"))
        painter.drawText(QRectF(page.left(), y, page.width(), line), Qt.AlignmentFlag.AlignLeft, report.subtitle)
        painter.setPen(QColor("#1d1f23"))
        y += line
    y += line * 0.6
    for kind, payload in report.blocks:
        if kind == "text":
            text, bold = payload
            font = QFont(base)
            font.setBold(bold)
            painter.setFont(font)
            rect = QFontMetricsF(font).boundingRect(
                QRectF(page.left(), y, page.width(), page.height()), int(Qt.TextFlag.TextWordWrap), text
            )
            painter.drawText(QRectF(page.left(), y, page.width(), rect.height()), int(Qt.TextFlag.TextWordWrap), text)
            painter.setFont(base)
            y += rect.height() + line * 0.4
        elif kind == "kv":
            pairs, columns = payload
            col_w = page.width() / columns
            rows = (len(pairs) + columns - 1) // columns
            for i, (key, value) in enumerate(pairs):
                col, row = divmod(i, rows)
                x, yy = page.left() + col * col_w, y + row * line
                painter.setPen(QColor("#555a63"))
                painter.drawText(QRectF(x, yy, col_w * 0.48, line), Qt.AlignmentFlag.AlignLeft, key)
                painter.setPen(QColor("#1d1f23"))
                painter.drawText(
                    QRectF(x + col_w * 0.48, yy, col_w * 0.5, line),
                    Qt.AlignmentFlag.AlignLeft,
                    fm.elidedText(value, Qt.TextElideMode.ElideRight, col_w * 0.5),
                )
            y += rows * line + line * 0.6
        elif kind == "paint":
            paint, height_mm = payload
            rect = QRectF(page.left(), y, page.width(), _mm(height_mm))
            paint(painter, rect, palette)
            painter.setFont(base)
            y += rect.height() + line * 0.5
        elif kind == "image":
            image, height_mm = payload
            target_h = _mm(height_mm)
            scale = min(page.width() / max(1, image.width()), target_h / max(1, image.height()))
            w, hh = image.width() * scale, image.height() * scale
            painter.drawImage(QRectF(page.left(), y, w, hh), image)
            y += hh + line * 0.5
        elif kind == "table":
            y = _table(painter, page, y, base, *payload)
    painter.setPen(QPen(QColor("#8a8f98")))
    painter.drawText(
        QRectF(page.left(), page.bottom() - line, page.width(), line), Qt.AlignmentFlag.AlignRight, "GPU Planner"
    )


def _table(
    painter: QPainter,
    page: QRectF,
    y: float,
    base: QFont,
    columns: list[str],
    rows: list[list[Any]],
    max_rows: int | None,
    dim: list[bool],
) -> float:
    font = QFont(base)
    font.setPointSizeF(7.0)
    fm = QFontMetricsF(font)
    line = fm.height() * 1.25
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [
        max([fm.horizontalAdvance(c)] + [fm.horizontalAdvance(r[i]) for r in cells[:60]]) + 8
        for i, c in enumerate(columns)
    ]
    total = sum(widths)
    if total > page.width():  # shrink the widest columns (elided) to fit the page
        over = total - page.width()
        widest = sorted(range(len(widths)), key=lambda i: -widths[i])
        for i in widest:
            cut = min(over, widths[i] * 0.6)
            widths[i] -= cut
            over -= cut
            if over <= 0:
                break
    room = int((page.bottom() - fm.height() * 2 - y) // line) - 1
    limit = min(len(cells), room, max_rows if max_rows is not None else len(cells))
    painter.setFont(font)
    bold = QFont(font)
    bold.setBold(True)
    painter.setFont(bold)
    x = page.left()
    for name, w in zip(columns, widths):
        painter.drawText(QRectF(x + 2, y, w - 4, line), int(Qt.AlignmentFlag.AlignVCenter), name)
        x += w
    y += line
    painter.setPen(QPen(QColor("#8a8f98")))
    painter.drawLine(int(page.left()), int(y), int(page.left() + sum(widths)), int(y))
    painter.setFont(font)
    for index, row in enumerate(cells[:limit]):
        if index % 2:
            painter.fillRect(QRectF(page.left(), y, sum(widths), line), QColor("#f1f3f6"))
        painter.setPen(QColor("#9a9ea6") if index < len(dim) and dim[index] else QColor("#1d1f23"))
        x = page.left()
        for value, w in zip(row, widths):
            painter.drawText(
                QRectF(x + 2, y, w - 4, line),
                int(Qt.AlignmentFlag.AlignVCenter),
                fm.elidedText(value, Qt.TextElideMode.ElideRight, w - 4),
            )
            x += w
        y += line
    painter.setPen(QColor("#555a63"))
    if limit < len(cells):
        painter.drawText(
            QRectF(page.left(), y, page.width(), line),
            int(Qt.AlignmentFlag.AlignVCenter),
            f"… {len(cells) - limit} more rows in the CSV export",
        )
        y += line
    painter.setPen(QColor("#1d1f23"))
    return y + line * 0.5
