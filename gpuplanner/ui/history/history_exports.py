"""History > Export as CSV or Markdown: the runs' table and, with two runs or more selected, their comparison
(a Markdown section, or for CSV a second file: one table per CSV file, so pandas and spreadsheets read each)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuplanner.history.export import write_table


def write_runs_export(
    path: Path,
    fmt: str,
    runs: tuple[Sequence[str], Sequence[Sequence[Any]]],
    compared: tuple[Sequence[str], Sequence[Sequence[Any]], Sequence[Sequence[str]]] | None,
) -> list[Path]:
    """Write ``runs`` (columns, rows) to ``path``; ``compared``: the selected runs' headers, their raw values
    (CSV) and their texts as the Compare tab shows them (Markdown). Returns the files written."""
    columns, rows = runs
    written = [path]
    with open(path, "w", encoding="utf-8", newline="") as out:
        if fmt == "markdown":
            out.write(f"# GPU Planner runs ({time.strftime('%Y-%m-%d %H:%M')})\n\n")
        write_table(out, fmt, columns, rows)
        if fmt == "markdown" and compared is not None:
            out.write("\n## Compared side by side\n\n")
            write_table(out, fmt, ["metric", *compared[0]], compared[2])
    if fmt == "csv" and compared is not None:
        second = path.with_name(f"{path.stem}-compared{path.suffix}")
        with open(second, "w", encoding="utf-8", newline="") as out:
            write_table(out, fmt, ["metric", *compared[0]], compared[1])
        written.append(second)
    return written
