"""Export of one run (summary, steps, GPU samples) or of run tables, as CSV, JSON or Markdown."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from sqlite_utils import Database

from gpuplanner.export.tables import write_csv
from gpuplanner.history import jsonsafe
from gpuplanner.history.analytics import summarize
from gpuplanner.history.schema import V4_METRICS

FORMATS = ("csv", "json", "markdown")
STEP_COLUMNS = (
    "seq",
    "t",
    "step",
    "epoch",
    "loss",
    "lr",
    "tokens_total",
    "samples_total",
    "tokens_per_s",
    "samples_per_s",
    "step_time_s",
    "data_wait_s",
    "peak_mem_bytes",
    "mfu",
    "spend_usd",
)
SAMPLE_COLUMNS = (
    "seq",
    "t",
    "node",
    "gpu_index",
    "util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "simulated",
    "sm_clock_max_mhz",
    *(column for column, _ in V4_METRICS if column != "sm_clock_mhz"),
)
MINUTE_COLUMNS = (
    "minute_t",
    "node",
    "gpu_index",
    "n",
    "util_min",
    "util_mean",
    "util_max",
    "mem_used_min",
    "mem_used_mean",
    "mem_used_max",
    "mem_total_bytes",
    "power_min",
    "power_mean",
    "power_max",
    "temp_max",
    *(f"{name}_{part}" for _, name in V4_METRICS for part in ("mean", "n")),
    "sm_clock_max_mhz",
    "throttle_any",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.12g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _md_cell(value: Any) -> str:
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def write_table(out: TextIO, fmt: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """One table as CSV (header + rows) or a Markdown table."""
    if fmt == "csv":
        write_csv(out, columns, ([_cell(v) for v in row] for row in rows))
    elif fmt == "markdown":
        out.write("| " + " | ".join(columns) + " |\n")
        out.write("|" + "|".join("---" for _ in columns) + "|\n")
        for row in rows:
            out.write("| " + " | ".join(_md_cell(v) for v in row) + " |\n")
    else:
        raise ValueError(f"format must be csv or markdown, not {fmt!r}")


def _rows(db: Database, table: str, columns: Sequence[str], run_id: int, order: str) -> Iterable[tuple[Any, ...]]:
    return db.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = ? ORDER BY {order}", [run_id])


def export_run(db: Database, run_id: int, fmt: str, out: TextIO) -> None:
    """Write a run's summary, steps, GPU samples and downsampled minutes to ``out``."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    summary = summarize(db, run_id).as_dict()
    tables = (
        ("steps", STEP_COLUMNS, "steps", "seq"),
        ("gpu_samples", SAMPLE_COLUMNS, "gpu_samples", "seq"),
        ("gpu_samples_1m", MINUTE_COLUMNS, "gpu_samples_1m", "minute_t, node, gpu_index"),
    )
    if fmt == "json":
        document: dict[str, Any] = {"summary": summary}
        for name, columns, table, order in tables:
            document[name] = [dict(zip(columns, row)) for row in _rows(db, table, columns, run_id, order)]
        jsonsafe.dump(document, out, indent=1)
        out.write("\n")
        return
    heading = "# {}\n" if fmt == "csv" else "\n## {}\n\n"
    out.write(heading.format(f"run {run_id} summary"))
    write_table(out, fmt, ("metric", "value"), [(k, v) for k, v in summary.items()])
    for name, columns, table, order in tables:
        out.write("\n" if fmt == "csv" else "")
        out.write(heading.format(name))
        write_table(out, fmt, columns, _rows(db, table, columns, run_id, order))
