"""One comparison row as people see it: the cells of `gpuplanner compare`'s table (text, CSV, Markdown) and of
the Plan pane's comparison table, built once here, and the rows' JSON documents.

``p90_cost_usd`` is the top of the row's likely (P10-P90) ``cost_range``: the speed's error and, on spot,
the interruptions (:attr:`gpuplanner.plan.compare.CompareRow.p90_cost_usd`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplanner.export.human import round_for_people
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import CompareRow, compare
from gpuplanner.plan.documents import compare_document, rental_note
from gpuplanner.plan.inputs import PlanInputs, inputs_document
from gpuplanner.plan.planner import GIB

Cell = str | int | float | bool | None

# The columns of `gpuplanner compare` (CSV, Markdown, text), in order; the window's table shows the first
# :data:`TABLE_COLUMNS` of them (the price columns are in the window's details instead).
COMPARE_COLUMNS: tuple[str, ...] = (
    "rank",
    "gpu",
    "gpus",
    "pricing",
    "provider",
    "fits",
    "mem_gib",
    "hours",
    "cost_usd",
    "p90_cost_usd",
    "meets_deadline",
    "within_budget",
    "within_gpu_hours",
    "reason",
    "rents",
    "price_per_gpu_hour",
    "price_as_of",
    "price_source",
)
TABLE_COLUMNS = COMPARE_COLUMNS[: COMPARE_COLUMNS.index("reason") + 1]
# Added after the others when a dataset size is given (plan/storage_cost.py); the rows are then ranked by
# total_usd (compute + storage + transfer).
BILL_COLUMNS: tuple[str, ...] = ("storage_usd", "transfer_usd", "total_usd")


def has_bill(rows: Sequence[CompareRow]) -> bool:
    """Whether the comparison prices storage and transfer (a dataset size was given)."""
    return bool(rows) and rows[0].plan.request.storage is not None


def compare_columns(rows: Sequence[CompareRow]) -> tuple[str, ...]:
    """The columns of these rows: :data:`COMPARE_COLUMNS`, plus :data:`BILL_COLUMNS` with a dataset size."""
    return COMPARE_COLUMNS + (BILL_COLUMNS if has_bill(rows) else ())


def row_price(row: CompareRow) -> tuple[str | None, float | None, str | None, str | None]:
    """What a comparison row rents, its price per GPU-hour, and that price's date and source."""
    choice = row.plan.on_demand if row.pricing == "on-demand" else (row.plan.spot.price if row.plan.spot else None)
    if choice is None:
        return None, None, None, None
    return rental_note(choice, row.gpus), choice.usd_per_gpu_hour, choice.as_of or None, choice.source or None


def why_not(row: CompareRow) -> str:
    """The row's last text column: why it cannot be used, else the settings fitted to make it fit."""
    return row.reason or ("fitted: " + ", ".join(row.fitted) if row.fitted else "")


def compare_cells(row: CompareRow, with_bill: bool = False) -> tuple[Cell, ...]:
    """One row's values in :data:`COMPARE_COLUMNS` order (and :data:`BILL_COLUMNS` ``with_bill``); hours and
    costs rounded for people (a tiny run's keep 3 significant figures, not 0.0)."""
    r = round_for_people
    bill = row.bill if with_bill else None
    extra: tuple[Cell, ...] = (
        (r(bill.storage_usd, 2), r(bill.transfer_usd, 2), r(row.total_usd, 2)) if with_bill and bill else ()
    )
    if with_bill and bill is None:
        extra = (None, None, r(row.total_usd, 2))
    return (
        row.rank,
        row.gpu,
        row.gpus,
        row.pricing,
        row.provider,
        row.plan.fits,
        round(row.plan.memory.total / GIB, 2),
        r(row.hours, 2),
        r(row.cost_usd, 2),
        r(row.p90_cost_usd, 2),
        row.plan.deadline_ok,
        row.plan.budget_ok,
        row.plan.gpu_hours_ok,
        why_not(row),
        *row_price(row),
        *extra,
    )


def table_row_cells(row: CompareRow) -> tuple[Cell, ...]:
    """The window's table row: :func:`compare_cells` of :data:`TABLE_COLUMNS`."""
    return compare_cells(row)[: len(TABLE_COLUMNS)]


def compare_documents(rows: Sequence[CompareRow], inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of `compare --json` (names in docs/json.md)."""
    return [compare_document(row, inputs) for row in rows]


def example_comparison() -> list[dict[str, Any]]:
    """`gpuplanner compare --json` of the example workload with the catalog alone (no run history): the
    self-test's check that the planner works in this install."""
    request = PlanInputs().to_request(default_gpu=None)
    return compare_documents(compare(request, load_catalog()), inputs_document(request))
