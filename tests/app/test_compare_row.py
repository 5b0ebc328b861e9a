"""The comparison row is built once (gpuplanner.app.compare_row): `gpuplanner compare` (JSON and CSV) and the
Plan pane's table agree, and every P90 beside a P10-P90 range is that range's top."""

from __future__ import annotations

import csv
import io
import json

import pytest

from gpuplanner.cli import main
from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.compare import compare
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.ui.plan.compare_model import EXPORT_COLUMNS, export_rows, table_cells

FLAGS = ["--model", "gpt2", "--samples", "20k", "--pricing", "spot", "--no-calibration"]


@pytest.fixture(scope="module")
def window_rows() -> list:
    request = PlanInputs(model="gpt2", samples=20_000, pricing="spot").to_request(default_gpu=None)
    return compare(request, load_catalog())


def _cli(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["compare", *FLAGS, *extra]) == 0
    return capsys.readouterr().out


def test_cli_json_and_the_window_table_agree(capsys: pytest.CaptureFixture[str], window_rows: list) -> None:
    documents = json.loads(_cli(capsys, "--json"))
    cells = export_rows(window_rows)
    assert len(documents) == len(cells) > 10
    spot_rows = 0
    for document, row, values in zip(documents, window_rows, cells):
        table = dict(zip(EXPORT_COLUMNS, values))
        for key in ("rank", "gpu", "gpus", "pricing", "provider", "reason"):
            assert document[key] == table[key], key
        assert document["meets_deadline"] == table["meets_deadline"]
        for key in ("hours", "cost_usd", "p90_cost_usd"):
            if document[key] is None:
                assert table[key] is None, key
            else:
                assert table[key] == pytest.approx(document[key], rel=1e-3, abs=0.006), (key, row.gpu, row.pricing)
        if document["cost_range"] is not None:
            # the P90 cost is the top of the P10-P90 range it stands beside: in the JSON and in the window
            assert document["p90_cost_usd"] == pytest.approx(document["cost_range"][1], abs=0.006)
            assert table["p90_cost_usd"] == pytest.approx(document["cost_range"][1], abs=0.006)
            assert document["cost_range"][0] <= document["cost_usd"] <= document["p90_cost_usd"] + 0.006
            spot_rows += document["pricing"] == "spot"
    assert spot_rows > 0


def test_cli_csv_has_the_window_tables_cells(capsys: pytest.CaptureFixture[str], window_rows: list) -> None:
    rows = list(csv.reader(io.StringIO(_cli(capsys, "--csv"))))
    assert tuple(rows[0][: len(EXPORT_COLUMNS)]) == EXPORT_COLUMNS
    window = table_cells(window_rows)
    assert len(rows) - 1 == len(window.cells)
    for line, values in zip(rows[1:], window.cells):
        shown = ["" if v is None else str(v) for v in values]
        assert line[: len(EXPORT_COLUMNS)] == shown
