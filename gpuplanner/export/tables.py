"""Render a table (column names + rows of plain values) as CSV, Markdown or aligned text."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import IO, Any

from gpuplanner.export.human import significant

Row = Sequence[Any]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if 0 < abs(value) < 1e-4:  # "0.0000385", never "3.85e-05"
            return significant(value, 3)
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    return str(value)


# A cell a spreadsheet would read as a formula (or as a command, through DDE) when it starts with one of these.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value: Any) -> Any:
    """A value made safe for a CSV cell: None is empty; text that a spreadsheet would run as a formula
    (``=HYPERLINK(...)``, ``+cmd|...``, ``@SUM(...)``; OWASP's "CSV injection") gets a leading ``'``, which
    spreadsheets show as text. Numbers, and text that is just a number ("-0.5"), stay as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        try:
            float(value)
        except ValueError:
            return "'" + value
    return value


def write_csv(out: IO[str], columns: Sequence[str], rows: Iterable[Row]) -> None:
    """The one CSV writer: a header line, then the rows, every cell through :func:`csv_cell`."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([csv_cell(c) for c in columns])
    writer.writerows([csv_cell(v) for v in row] for row in rows)


def to_csv(columns: Sequence[str], rows: Sequence[Row]) -> str:
    """CSV with a header line; numbers keep full precision, None is an empty cell."""
    out = io.StringIO()
    write_csv(out, columns, rows)
    return out.getvalue()


def to_markdown(columns: Sequence[str], rows: Sequence[Row]) -> str:
    """A GitHub-flavoured Markdown table; pipes inside cells are escaped."""

    def esc(value: Any) -> str:
        return _cell(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def to_text(columns: Sequence[str], rows: Sequence[Row]) -> str:
    """Columns aligned with spaces: numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) and rows != []
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(columns)), line(["-" * w for w in widths])] + [line(r) for r in cells]) + "\n"


def to_json(document: Any) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
