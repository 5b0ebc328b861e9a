"""One recalculation of the Plan pane, as its worker thread runs it: the engine (``planning.compute``), then
every cell of the ranked table, or the input the engine refused. Touches no widget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.planner import PlanRequest
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.planning import MeasuredCache, PlanResult, compute
from gpuplanner.ui.plan.compare_model import TableCells, table_cells


@dataclass(frozen=True)
class PlanAnswer:
    """What the worker hands back for one request: the engine's result and the table's cells."""

    result: PlanResult
    cells: TableCells


@dataclass(frozen=True)
class InputRefused:
    """The engine refused an input: the field it names and why."""

    field: str
    message: str


def compute_answer(
    generation: int,
    request: PlanRequest,
    values: dict[str, str],
    catalog: Catalog,
    db_path: Path | None,
    cache: MeasuredCache,
    pinned: tuple[str, ...],
    allow_qlora: bool,
) -> PlanAnswer | InputRefused:
    """One recalculation on the pane's worker thread: the engine, then every cell of the table (plain
    Python), so the GUI thread only shows them."""
    try:
        result = compute(generation, request, values, catalog, db_path, cache, pinned=pinned, allow_qlora=allow_qlora)
    except PlanInputError as exc:
        return InputRefused(exc.field, exc.message)
    return PlanAnswer(result, table_cells(result.rows))
