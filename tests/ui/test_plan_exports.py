"""The Plan pane's exports as people use them (issue 29, item 6): the PDF report is one page (the best options,
the described option's details, the chart; every option is in the CSV), the Markdown starts with the inputs
the plan answers, and every export says where it saved."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QFileDialog, QMainWindow

from gpuplanner.ui.plan.plan_export import REPORT_ROWS
from gpuplanner.ui.plan.plan_pane import PlanPane
from tests.ui.helpers import wait_for_result
from tests.ui.pdf_check import missing_words, read_words

PLAN_70B = {"model": "llama-3.1-70b", "method": "full", "gpu": "RTX 4090", "gpus": "1"}


def new_result(qtbot: Any, pane: PlanPane, values: dict[str, str]) -> None:
    pane.form.set_values(values)
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.recalculate()
    wait_for_result(qtbot, pane)


@pytest.mark.parametrize(
    "values",
    [{}, PLAN_70B, {"deadline-hours": "12", "budget-usd": "40", "max-gpu-hours": "30"}],
    ids=["first-plan", "70b", "deadline-budget-cap"],
)
def test_the_pdf_report_is_one_page_and_the_csv_has_every_option(
    qtbot: Any, plan_pane: PlanPane, tmp_path: Path, values: dict[str, str]
) -> None:
    if values:
        new_result(qtbot, plan_pane, values)
    rows = plan_pane.result.rows
    assert len(rows) > 3 * REPORT_ROWS  # the old report listed them all, over 6 to 10 pages
    plan_pane.export_pdf(tmp_path / "plan.pdf")
    pages = read_words(tmp_path / "plan.pdf")
    assert len(pages.sizes) == 1
    first = f"{rows[0].gpus} x {rows[0].gpu}" if rows[0].usable else rows[0].gpu
    assert not missing_words(pages, [first, f"best of {len(rows)} options", "Recommendation:"])
    plan_pane.export_csv(tmp_path / "plan.csv")
    with open(tmp_path / "plan.csv", newline="", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)


def test_the_described_option_is_in_the_pdfs_table_when_it_is_not_among_the_best(
    qtbot: Any, plan_pane: PlanPane, tmp_path: Path
) -> None:
    rows = plan_pane.result.rows
    far = rows[REPORT_ROWS + 5]
    assert plan_pane.select_option(far.gpu, far.gpus, far.pricing)
    report = plan_pane.report()
    (table,) = [payload for kind, payload in report.blocks if kind == "table"]
    shown = table[1]
    assert len(shown) == REPORT_ROWS + 1 and shown[-1][1] == far.gpu
    plan_pane.export_pdf(tmp_path / "plan.pdf")
    assert len(read_words(tmp_path / "plan.pdf").sizes) == 1


def test_the_markdown_starts_with_the_inputs(qtbot: Any, plan_pane: PlanPane, tmp_path: Path) -> None:
    new_result(qtbot, plan_pane, {"seq-len": "4096", "samples": "20000", "deadline-hours": "30", "budget-usd": ""})
    plan_pane.export_markdown(tmp_path / "plan.md")
    text = (tmp_path / "plan.md").read_text(encoding="utf-8")
    inputs = text[text.index("## Inputs") : text.index("## Options")]
    for line in (
        "| Method | LoRA, rank 16 on q_proj, k_proj, v_proj, o_proj |",
        "| Sequence length | 4,096 tokens |",
        "| Data per epoch | 20,000 samples |",
        "| Deadline | 1 d 6 h |",
        "| Budget | none |",
    ):
        assert line in inputs, inputs
    options = text[text.index("## Options") :]
    assert options.count("\n|") == len(plan_pane.result.rows) + 2  # the header, its rule and every option


@pytest.mark.parametrize("kind", ["csv", "markdown", "png", "pdf"])
def test_every_export_says_where_it_saved(
    qtbot: Any, plan_pane: PlanPane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    window = QMainWindow()
    qtbot.addWidget(window)
    window.setCentralWidget(plan_pane)
    window.resize(1280, 800)
    window.show()
    target = tmp_path / "out" / "gpu plan"
    target.parent.mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    with qtbot.waitSignal(plan_pane.exported, timeout=10_000) as said:
        path = plan_pane.export_dialog(kind)
    assert path is not None and Path(path).is_file() and Path(path).stat().st_size > 0
    assert said.args[0].startswith("Saved the ") and said.args[0].endswith(f" to {path}")
    assert window.statusBar().currentMessage() == said.args[0]
    window.takeCentralWidget()  # the fixture shuts the pane down
