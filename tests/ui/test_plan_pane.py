"""The Plan pane with real widgets: numbers against the engine, invalid input, sorting, exports, plans."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QComboBox, QFileDialog, QInputDialog, QLineEdit, QMessageBox

from gpuplanner.history.db import open_db
from gpuplanner.history.plans import get_plan, list_plans
from gpuplanner.plan.compare import compare, recommendation
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import GIB, PlanRequest, PricingInputs, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup
from gpuplanner.planning import WINDOW_PINNED, comparison_request
from gpuplanner.ui.human import human_hours
from gpuplanner.ui.plan import plan_export
from gpuplanner.ui.plan.compare_model import COLUMNS, EXPORT_COLUMNS, SORT_ROLE, short_reason, table_cells
from gpuplanner.ui.plan.plan_form_fields import default_values
from gpuplanner.ui.plan.plan_inputs import inputs_with_form, request_from_values
from gpuplanner.ui.plan.plan_pane import PlanPane
from gpuplanner.ui.plan.plan_settings_text import settings_rows
from gpuplanner.ui.widgets.report_pdf import MARGIN_MM
from tests.ui.helpers import select_form_option, wait_for_result
from tests.ui.pdf_check import missing_words, outside, overlaps, read_words


@pytest.fixture
def pane(plan_pane: PlanPane) -> PlanPane:
    return plan_pane


def type_into(qtbot: Any, pane: PlanPane, key: str, text: str) -> None:
    editor = pane.form.editors[key]
    assert isinstance(editor, QLineEdit)
    editor.selectAll()
    qtbot.keyClick(editor, Qt.Key.Key_Delete)
    if text:
        qtbot.keyClicks(editor, text)


def choose(pane: PlanPane, key: str, text: str) -> None:
    combo = pane.form.editors[key]
    assert isinstance(combo, QComboBox)
    index = combo.findText(text)
    assert index >= 0, text
    combo.setCurrentIndex(index)


def column(name: str) -> int:
    return EXPORT_COLUMNS.index(name)


def shown_rows(pane: PlanPane) -> list[list[str]]:
    proxy = pane.proxy
    return [[proxy.index(r, c).data() for c in range(proxy.columnCount())] for r in range(proxy.rowCount())]


def test_first_state_is_the_example_and_matches_the_engine(pane: PlanPane, services: Any) -> None:
    request = request_from_values(default_values())
    rows = compare(comparison_request(request), services.catalog, fit_settings=True, pinned=WINDOW_PINNED)
    assert pane.recommendation_label.text() == recommendation(rows)
    assert pane.proxy.rowCount() == len(rows)
    assert pane.form.values()["model"] == "llama-3.1-8b"


def test_filled_form_shows_the_engines_numbers(qtbot: Any, pane: PlanPane, services: Any) -> None:
    choose(pane, "method", "full")
    choose(pane, "model", "llama-3.2-1b")
    type_into(qtbot, pane, "micro-batch", "2")
    type_into(qtbot, pane, "grad-accum", "8")
    type_into(qtbot, pane, "seq-len", "1024")
    type_into(qtbot, pane, "samples", "20k")
    type_into(qtbot, pane, "epochs", "2")
    choose(pane, "gpu", "A100 80GB")
    type_into(qtbot, pane, "gpus", "2")
    type_into(qtbot, pane, "budget-usd", "40")
    type_into(qtbot, pane, "deadline-hours", "6")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    # The same inputs straight into the engine, without the form's parsing.
    request = PlanRequest(
        model=from_preset("llama-3.2-1b"),
        setup=TrainSetup(
            method="full",
            micro_batch=2,
            grad_accum=8,
            seq_len=1024,
            grad_checkpointing="full",
            precision="bf16-mixed",
            gpus=2,
        ),
        workload=Workload(samples=20_000, epochs=2.0),
        gpu="A100 80GB",
        pricing=PricingInputs(),
        deadline_hours=6.0,
        budget_usd=40.0,
    )
    plan = make_plan(request, services.catalog)
    assert pane.result is not None
    assert pane.result.request.setup == request.setup
    # the details describe the form's option once its row is selected (the recommended one before)
    assert pane.select_option("A100 80GB", 2, "on-demand")
    assert pane.memory_bar.view is not None
    assert pane.memory_bar.view.total_gib == pytest.approx(plan.memory.total / GIB)
    assert pane.memory_bar.view.capacity_gib == pytest.approx(plan.capacity_gib)
    summary = pane.summary_label.text()
    assert f"{plan.memory.total / GIB:.1f} GiB per GPU" in summary
    assert f"{human_hours(plan.runtime.hours)}, " in summary
    assert f"${plan.on_demand_cost_usd:,.2f}" in summary
    rows = compare(
        PlanRequest(**{**request.__dict__, "gpu": None}), services.catalog, fit_settings=True, pinned=WINDOW_PINNED
    )
    pane.table.clearSelection()
    assert pane.recommendation_label.text() == recommendation(rows)
    table = shown_rows(pane)
    assert len(table) == len(rows)
    first = table[0]
    assert first[column("gpu")] == rows[0].gpu
    assert first[column("gpus")] == str(rows[0].gpus)
    assert first[column("cost_usd")] == f"{rows[0].cost_usd:,.2f}"
    assert not pane.table.isColumnHidden(column("meets_deadline"))
    # the chart shows every option that fits and has a price
    assert {(r.gpu, r.gpus, r.pricing) for r in pane.chart.rows_shown} <= {(r.gpu, r.gpus, r.pricing) for r in rows}
    assert pane.chart.rows_shown


def test_invalid_input_is_marked_and_the_last_result_stays(qtbot: Any, pane: PlanPane) -> None:
    before = pane.recommendation_label.text()
    result = pane.result
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        type_into(qtbot, pane, "micro-batch", "abc")
    assert blocker.args[0] == "micro-batch"
    assert "expected a number" in pane.form.error_text("micro-batch")
    assert pane.form.editors["micro-batch"].property("invalid") is True
    assert pane.recommendation_label.text() == before
    assert pane.result is result
    assert pane.status_label.isVisibleTo(pane) and "last valid result" in pane.status_label.text()
    # an error only the engine finds (QLoRA in fp32) is shown at its field too
    type_into(qtbot, pane, "micro-batch", "4")
    choose(pane, "method", "qlora")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        choose(pane, "precision", "fp32")
    assert blocker.args[0] == "precision"
    assert "QLoRA" in pane.form.error_text("precision")
    assert pane.form.error_text("micro-batch") == ""
    # fixing it clears the mark and shows a new result
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        choose(pane, "precision", "bf16-mixed")
    assert pane.form.error_text("precision") == ""
    assert not pane.status_label.isVisibleTo(pane)
    assert pane.result is not result


def test_an_answer_for_older_input_does_not_clear_a_new_error(qtbot: Any, pane: PlanPane) -> None:
    """A valid edit still computing when the next edit is invalid: its answer is dropped, the mark stays."""
    result = pane.result
    pane.form.set_values({"micro-batch": "2"})
    assert pane.recalculate()  # on the worker now
    pane.form.set_values({"micro-batch": "abc"})
    assert not pane.recalculate()
    wait_for_result(qtbot, pane)  # the valid edit's answer came back (and was dropped)
    qtbot.wait(50)
    assert "expected a number" in pane.form.error_text("micro-batch")
    assert pane.status_label.isVisibleTo(pane)
    assert pane.result is result


def test_samples_and_tokens_errors_land_at_the_data_field(qtbot: Any, pane: PlanPane) -> None:
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        type_into(qtbot, pane, "samples", "0")
    assert blocker.args[0] == "samples"
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        type_into(qtbot, pane, "headroom", "1.5")
    assert blocker.args[0] == "headroom"


def test_table_sorts_by_any_column(qtbot: Any, pane: PlanPane) -> None:
    cost = column("cost_usd")
    header = pane.table.horizontalHeader()
    qtbot.mouseClick(
        header.viewport(),
        Qt.MouseButton.LeftButton,
        pos=header.viewport().rect().topLeft()
        + type(header.viewport().rect().topLeft())(header.sectionViewportPosition(cost) + 5, 5),
    )
    values = [pane.proxy.index(r, cost).data(SORT_ROLE) for r in range(pane.proxy.rowCount())]
    order = header.sortIndicatorOrder()
    assert header.sortIndicatorSection() == cost
    assert values == sorted(values, reverse=order == Qt.SortOrder.DescendingOrder)
    pane.table.sortByColumn(column("gpu"), Qt.SortOrder.DescendingOrder)
    names = [pane.proxy.index(r, column("gpu")).data(SORT_ROLE) for r in range(pane.proxy.rowCount())]
    assert names == sorted(names, reverse=True)
    pane.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    ranks = [pane.proxy.index(r, 0).data() for r in range(pane.proxy.rowCount())]
    assert ranks[0] == "1"


def test_unusable_rows_are_greyed_with_their_reason(qtbot: Any, pane: PlanPane) -> None:
    choose(pane, "method", "full")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    rows = pane.model.rows()
    unusable = [i for i, r in enumerate(rows) if not r.usable]
    assert unusable, "a full fine-tune of 8B does not fit everywhere"
    index = pane.model.index(unusable[0], 0)
    assert pane.model.data(index, Qt.ItemDataRole.ForegroundRole) is not None
    # the cell says it in a short phrase, the tooltip in full (issue 29: one line per row)
    reason = pane.model.index(unusable[0], column("reason"))
    assert pane.model.data(reason) == short_reason(rows[unusable[0]]) and pane.model.data(reason).startswith("needs ")
    assert pane.model.data(reason, Qt.ItemDataRole.ToolTipRole) == rows[unusable[0]].reason
    pane.usable_only.setChecked(True)
    assert pane.proxy.rowCount() == len(rows) - len(unusable)


def test_advice_when_the_model_does_not_fit(qtbot: Any, pane: PlanPane) -> None:
    choose(pane, "method", "full")
    choose(pane, "gpu", "RTX 4090")
    choose(pane, "grad-checkpointing", "none")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    assert pane.result is not None and pane.result.plan.fits is False
    # the bar describes the option the details name (the recommended one while no row is selected)
    assert pane.memory_bar.view.gpu == pane.focus.plan.gpu.name
    assert pane.focus.why == "recommended" and pane.focus.plan.gpu.name != "RTX 4090"
    # what the form's own option needs is said once, at the top, labelled as the form's, not in the advice
    note = pane.form_note_label
    assert note.isVisible() and note.text().startswith("The form's option (1 x RTX 4090, on-demand) does not fit")
    assert "RTX 4090" not in pane.advice_label.text()
    details = pane.details_view.layout()
    assert details.indexOf(note) < details.indexOf(pane.focus_label) < details.indexOf(pane.summary_label)
    # selecting the form's option: the details are its own, the advice says what would make it fit
    select_form_option(pane)
    assert not note.isVisible() and pane.advice_label.text().startswith("To make it fit")


def test_exports_write_checked_files(pane: PlanPane, tmp_path: Path) -> None:
    assert pane.result is not None
    rows = pane.result.rows
    pane.export_csv(tmp_path / "plan.csv")
    table = list(csv.reader(io.StringIO((tmp_path / "plan.csv").read_text())))
    assert table[0] == list(EXPORT_COLUMNS)
    assert len(table) == len(rows) + 1
    assert table[1][column("gpu")] == rows[0].gpu
    assert float(table[1][column("cost_usd")]) == pytest.approx(rows[0].cost_usd, abs=0.01)

    pane.export_markdown(tmp_path / "plan.md")
    text = (tmp_path / "plan.md").read_text()
    assert pane.result.recommendation in text
    options = text[text.index("## Options") :]  # the inputs come first (their own table)
    lines = [line for line in options.splitlines() if line.startswith("|")]
    assert lines[0] == "| " + " | ".join(EXPORT_COLUMNS) + " |"
    assert len(lines) == len(rows) + 2

    pane.export_png(tmp_path / "charts.png")
    image = QImage(str(tmp_path / "charts.png"))
    assert not image.isNull() and image.width() > 100 and image.height() > 100

    pane.export_pdf(tmp_path / "report.pdf")
    pages = read_words(tmp_path / "report.pdf")
    assert overlaps(pages) == []
    assert outside(pages, MARGIN_MM / 25.4 * 72) == []
    # the best options' cells as the window writes them (less the deadline/budget/cap marks): one page
    best = pane.result.rows[: plan_export.REPORT_ROWS]
    marks = {EXPORT_COLUMNS.index(n) for n in ("meets_deadline", "within_budget", "within_gpu_hours")}
    shown = [[t for c, t in enumerate(row) if c not in marks] for row in table_cells(best).texts]
    assert not missing_words(pages, [text for row in shown for text in row])
    assert len(pages.sizes) == 1
    assert not missing_words(pages, [pane.result.recommendation])
    words = " ".join(pages.texts())
    # the settings in the form's words and people's units, never the JSON keys or raw numbers
    params = inputs_with_form(pane.result.request, pane.result.values)["params"]
    assert not missing_words(pages, ["Micro-batch", "4 sequences per GPU", "2,048 tokens", "bf16 mixed", "AdamW"])
    assert not missing_words(pages, [settings_value(pane, "Parameters")])
    for raw in ("micro batch", "micro_batch", "grad_accum", "tf32 False", "False", str(params), "None"):
        assert raw not in words, raw
    assert not any("…" in word for word in pages.texts())


def settings_value(pane: PlanPane, label: str) -> str:
    inputs = inputs_with_form(pane.result.request, pane.result.values)
    return dict(settings_rows(inputs))[label]


def test_export_through_the_file_dialog(pane: PlanPane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "chosen"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), "CSV (*.csv)"))
    written = pane.export_dialog("csv")
    assert written == str(target) + ".csv"
    assert Path(written).read_text().startswith("rank,gpu,")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: ("", ""))
    assert pane.export_dialog("pdf") is None


def test_save_and_reopen_a_plan(qtbot: Any, pane: PlanPane, services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    type_into(qtbot, pane, "micro-batch", "2")
    type_into(qtbot, pane, "budget-usd", "123")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("my plan", True))
    with qtbot.waitSignal(pane.planSaved) as saved:
        assert pane.save_dialog() is True
    (plan_id,) = saved.args
    assert pane.saved_plan_id == plan_id
    db = open_db(services.db_path)
    try:
        stored = get_plan(db, plan_id)
        assert [p.name for p in list_plans(db)] == ["my plan"]
    finally:
        db.close()
    assert stored.inputs["micro_batch"] == 2 and stored.inputs["budget_usd"] == 123.0
    assert stored.results["memory"]["total_gib"] == pytest.approx(pane.result.plan.memory.total / GIB, abs=1e-3)

    type_into(qtbot, pane, "micro-batch", "8")
    type_into(qtbot, pane, "budget-usd", "")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    label = f"#{plan_id}  my plan"
    monkeypatch.setattr(
        QInputDialog,
        "getItem",
        lambda _p, _t, _l, items, *a, **k: (next(i for i in items if i.startswith(label)), True),
    )
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.open_dialog()
    wait_for_result(qtbot, pane)
    assert pane.form.values()["micro-batch"] == "2"
    assert pane.form.values()["budget-usd"] == "123"
    assert pane.result.request.budget_usd == 123.0


def test_launch_carries_the_trainer_settings(qtbot: Any, pane: PlanPane, services: Any) -> None:
    choose(pane, "pricing", "spot")
    type_into(qtbot, pane, "budget-usd", "50")
    type_into(qtbot, pane, "epochs", "1.5")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    select_form_option(pane)  # Launch runs the option the details describe
    with qtbot.waitSignal(pane.launchRequested) as launched:
        pane.launch()
    settings = launched.args[0]
    assert settings["model"] == "llama-3.1-8b" and settings["model_config"] is None
    assert settings["method"] == "lora" and settings["lora_rank"] == 16
    assert settings["precision"] == "bf16-mixed"  # fp32 master weights, as planned
    assert (settings["micro_batch"], settings["grad_accum"], settings["seq_len"]) == (4, 4, 2048)
    assert settings["grad_checkpointing"] == "full"
    assert settings["epochs"] == 2 and settings["gpus"] == 1 and settings["gpu"] == "H100 SXM"
    assert settings["budget_usd"] == 50.0 and settings["spot"] is True
    assert settings["price_per_gpu_hour"] == pane.result.plan.spot.price.usd_per_gpu_hour
    db = open_db(services.db_path)
    try:
        assert get_plan(db, settings["plan_id"]).inputs["pricing"] == "spot"
    finally:
        db.close()


def test_stale_results_are_dropped(qtbot: Any, pane: PlanPane) -> None:
    pane.form.set_values({"micro-batch": "1"})
    pane.recalculate()
    pane.form.set_values({"micro-batch": "3"})
    pane.recalculate()
    wait_for_result(qtbot, pane)
    qtbot.wait(50)
    assert pane.result is not None and pane.result.request.setup.micro_batch == 3


def test_double_click_plans_with_that_option(qtbot: Any, pane: PlanPane) -> None:
    pane.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    index = pane.proxy.index(0, 1)
    row = pane.model.rows()[pane.proxy.mapToSource(index).row()]
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.table.doubleClicked.emit(index)
    wait_for_result(qtbot, pane)
    values = pane.form.values()
    assert (values["gpu"], values["gpus"], values["pricing"]) == (row.gpu, str(row.gpus), row.pricing)


def test_parameter_count_and_config_file(
    qtbot: Any, pane: PlanPane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    choose(pane, "model-source", "parameter count")
    type_into(qtbot, pane, "params", "350M")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    assert pane.result.request.model.n_params == 350_000_000
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}'
    )
    choose(pane, "model-source", "config.json")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(config), ""))
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.form.browse_button.click()
    wait_for_result(qtbot, pane)
    assert 120e6 < pane.result.request.model.n_params < 130e6
    (tmp_path / "bad.json").write_text("{not json")
    with qtbot.waitSignal(pane.inputError, timeout=5000) as blocker:
        type_into(qtbot, pane, "model-config", str(tmp_path / "bad.json"))
    assert blocker.args[0] == "model-config"


def test_compare_model_follows_the_model_view_rules(qtmodeltester: Any, pane: PlanPane) -> None:
    qtmodeltester.check(pane.model)
    qtmodeltester.check(pane.proxy)
    assert pane.model.columnCount() == len(COLUMNS)


def test_a_recalculation_updates_the_table_in_place(qtbot: Any, pane: PlanPane) -> None:
    """Same options, new numbers: the cells change in place (dataChanged, no reset, the selection kept), from
    the cells the worker worked out."""
    from gpuplanner.ui.plan.compare_model import table_cells

    pane.select_option(pane.result.rows[1].gpu, pane.result.rows[1].gpus, pane.result.rows[1].pricing)
    selected = pane.selected_key
    resets: list[int] = []
    changed: list[int] = []
    pane.model.modelReset.connect(lambda: resets.append(1))
    pane.model.dataChanged.connect(lambda *_: changed.append(1))
    type_into(qtbot, pane, "samples", "123456")
    qtbot.waitUntil(lambda: pane.result.request.workload.samples == 123456 and not pane.is_busy(), timeout=10_000)
    assert resets == [] and len(changed) == 1
    assert pane.selected_key == selected
    expected = table_cells(pane.result.rows)
    assert [[pane.model.index(r, c).data() for c in range(len(COLUMNS))] for r in range(len(expected.rows))] == (
        expected.texts
    )


def near(value: float) -> Any:
    """The CLI's JSON rounds to 2-4 decimals."""
    return pytest.approx(value, rel=1e-3, abs=0.006)


def cli_plan(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    import json

    from gpuplanner.cli import main

    capsys.readouterr()
    assert main(["plan", *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_plan_flag_has_a_field() -> None:
    """Each flag of `gpuplanner plan --help` is a form field (or named here with what stands for it)."""
    import argparse

    from gpuplanner.commands.plan import register
    from gpuplanner.ui.plan.plan_form_fields import FIELD_BY_KEY

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    plan = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["plan"]
    flags = {o[2:] for a in plan._actions for o in a.option_strings if o.startswith("--")}
    elsewhere = {
        "help": "-",
        "list-models": "the Preset list",
        "tokens": "Data size in: tokens",
        "no-calibration": "calibration",
        "db": "the app's history",
        "json": "-",
        "csv": "Export",
        "markdown": "Export",
    }
    assert sorted(flags - set(FIELD_BY_KEY) - set(elsewhere)) == []
    for spec in FIELD_BY_KEY.values():
        assert spec.tooltip and len(spec.tooltip) > 20, spec.key


def test_spot_and_speed_inputs_give_the_clis_numbers(
    qtbot: Any, pane: PlanPane, capsys: pytest.CaptureFixture[str]
) -> None:
    choose(pane, "calibration", "ignore the history")
    choose(pane, "pricing", "spot")
    type_into(qtbot, pane, "spot-price", "1.1")
    assert not pane.form.editors["spot-discount"].isEnabled(), "spot price and discount exclude each other"
    type_into(qtbot, pane, "mean-hours-between-interruptions", "8")
    assert not pane.form.editors["interruptions-per-hour"].isEnabled()
    assert not pane.form.editors["spot-overhead-pct"].isEnabled()
    type_into(qtbot, pane, "checkpoint-write-s", "45")
    type_into(qtbot, pane, "samples-per-min", "90")
    assert not pane.form.editors["tokens-per-s"].isEnabled()
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    cli = cli_plan(
        capsys,
        "--pricing",
        "spot",
        "--spot-price",
        "1.1",
        "--mean-hours-between-interruptions",
        "8",
        "--checkpoint-write-s",
        "45",
        "--samples-per-min",
        "90",
        "--no-calibration",
    )
    plan = pane.result.plan
    assert plan.throughput.samples_per_min == near(cli["throughput"]["samples_per_min"])
    assert plan.spot.cost_usd == near(cli["spot"]["cost_usd"])
    assert plan.spot.p90_cost_usd == near(cli["spot"]["p90_cost_usd"])
    assert plan.spot.estimate.expected_interruptions == near(cli["spot"]["expected_interruptions"])
    assert pane.select_option("H100 SXM", 1, "spot")
    assert f"${cli['spot']['cost_usd']:,.2f}" in pane.summary_label.text()
    # the flat overhead instead of the interruption model
    type_into(qtbot, pane, "mean-hours-between-interruptions", "")
    type_into(qtbot, pane, "spot-overhead-pct", "12")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    wait_for_result(qtbot, pane)
    cli = cli_plan(
        capsys,
        "--pricing",
        "spot",
        "--spot-price",
        "1.1",
        "--spot-overhead-pct",
        "12",
        "--checkpoint-write-s",
        "45",
        "--samples-per-min",
        "90",
        "--no-calibration",
    )
    assert pane.result.plan.spot.estimate.hours == near(cli["spot"]["hours"])
    assert pane.result.plan.spot.cost_usd == near(cli["spot"]["cost_usd"])


def test_exclusive_fields_filled_together_are_refused(qtbot: Any, pane: PlanPane) -> None:
    pane.form.set_values({"spot-discount": "0.5", "spot-price": "1.0"})
    assert pane.recalculate() is False
    assert "not both" in pane.form.error_text("spot-price")
    pane.form.set_values({"spot-price": ""})
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.recalculate()
    assert pane.result.request.pricing.spot_discount == 0.5


@pytest.mark.slow  # over the 5 s budget of an unmarked test on a quiet machine (issue 25)
def test_memory_source_says_which_answered(qtbot: Any, pane: PlanPane, tmp_path: Path) -> None:
    assert pane.result.memory_source == "formula"
    assert "Memory: formula" in pane.sources_label.text()
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 128, '
        '"n_head": 4, "n_positions": 512, "vocab_size": 2000}'
    )
    choose(pane, "model-source", "config.json")
    type_into(qtbot, pane, "model-config", str(config))
    choose(pane, "method", "full")
    type_into(qtbot, pane, "seq-len", "256")
    type_into(qtbot, pane, "micro-batch", "2")
    choose(pane, "memory", "trace")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=60_000):
        pass
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result.request.memory_source == "trace", timeout=60_000)
    torch_present = pane.result.memory_source == "trace"
    if torch_present:
        assert "Answered by trace" in pane.form.note_text("memory")
        assert "Memory: formula (trace answers for the form's option)" in pane.sources_label.text()
        select_form_option(pane)  # trace answers for the form's own option only
        assert "Memory: trace" in pane.sources_label.text()
    else:
        assert "trace mode unavailable" in pane.form.note_text("memory").lower()
    # LoRA cannot be traced: the formulas answer, and the form says so
    choose(pane, "method", "lora")
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result.request.setup.method == "lora", timeout=60_000)
    assert pane.result.memory_source == "formula"
    assert "trace mode unavailable" in pane.form.note_text("memory").lower()
    select_form_option(pane)
    assert "fell back" in pane.sources_label.text()


def _finished_run_in(db: Path, tokens_per_s: float, seq_len: int) -> None:
    from gpuplanner.cli import main
    from tests.plan.test_cli_plan import _write_finished_run

    db.parent.mkdir(parents=True, exist_ok=True)
    events = db.parent / "events.jsonl"
    _write_finished_run(events, tokens_per_s=tokens_per_s, seq_len=seq_len)
    assert (
        main(
            [
                "runs",
                "import",
                str(events),
                "--db",
                str(db),
                "--gpu-type",
                "NVIDIA A10G",
                "--model",
                "gpt2",
                "--gpus",
                "1",
                "--price",
                "1.0",
            ]
        )
        == 0
    )


def test_speeds_measured_in_the_history_calibrate_the_plan(
    qtbot: Any, pane: PlanPane, services: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _finished_run_in(services.db_path, tokens_per_s=12_345.0, seq_len=512)
    choose(pane, "model", "gpt2")
    choose(pane, "method", "full")
    choose(pane, "gpu", "A10G")
    type_into(qtbot, pane, "seq-len", "512")
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pass
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result.request.setup.seq_len == 512, timeout=10_000)
    assert pane.result.plan.throughput.tokens_per_s == pytest.approx(12_345.0)
    assert pane.result.throughput_source.startswith("calibrated: runs #1 on NVIDIA A10G")
    select_form_option(pane)  # the measured speed is the form's option's
    assert "Speed: measured in runs #1 on NVIDIA A10G" in pane.sources_label.text()
    assert "calibrated: runs #1" in pane.form.note_text("calibration")
    cli = cli_plan(
        capsys,
        "--model",
        "gpt2",
        "--method",
        "full",
        "--gpu",
        "A10G",
        "--seq-len",
        "512",
        "--db",
        str(services.db_path),
    )
    assert pane.result.plan.runtime.hours == near(cli["runtime"]["hours"])
    assert pane.result.throughput_source == cli["throughput"]["source"]
    # ignoring the history gives the estimate, as --no-calibration
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        choose(pane, "calibration", "ignore the history")
    wait_for_result(qtbot, pane)
    assert pane.result.throughput_source.startswith("estimate")
    assert pane.form.note_text("calibration") == ""
    # a measurement at another sequence length corrects the step model instead of being used as is
    choose(pane, "calibration", "use measured speeds")
    type_into(qtbot, pane, "seq-len", "1024")
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result.request.setup.seq_len == 1024, timeout=10_000)
    assert pane.result.throughput_source.startswith("calibrated from speeds measured on A10G (sequence 512)")
    assert pane.form.note_text("calibration").startswith("Speed calibrated from speeds measured on A10G")


def test_the_details_give_the_likely_range_and_the_prices_date(pane: Any) -> None:
    plan = pane.focus.plan
    text = pane.summary_label.text() + " " + pane.rent_label.text()
    low, high = plan.hours_range
    assert low < plan.runtime.hours < high  # the estimate sits inside its own range
    assert f"Likely {human_hours(low)} to {human_hours(high)}" in text and "P10-P90" in text
    assert "prices as of 2025-06-15" in text and "days old" in text
    choice = plan.on_demand if pane.focus.row.pricing == "on-demand" else plan.spot.price
    assert choice.source in text  # where the price comes from


def test_launch_uses_the_settings_fitted_to_the_plans_gpu(qtbot: Any, pane: PlanPane) -> None:
    """The table fits each option the given settings do not fit; Launch runs the plan's option with them."""
    pane.form.set_values({"gpu": "RTX A6000", "micro-batch": "8", "grad-accum": "4", "seq-len": "4096"})
    pane.recalculate()
    wait_for_result(qtbot, pane)
    assert pane.result.plan.fits is False
    row = next(r for r in pane.result.rows if r.gpu == "RTX A6000" and r.gpus == 1 and r.pricing == "on-demand")
    assert row.fitted and row.plan.fits
    assert any(cells[column("reason")] == "fitted settings" for cells in shown_rows(pane))
    tips = [
        pane.proxy.index(r, column("reason")).data(Qt.ItemDataRole.ToolTipRole) for r in range(pane.proxy.rowCount())
    ]
    assert any(f"with fitted settings ({', '.join(row.fitted)})" in tip for tip in tips)
    select_form_option(pane)
    assert pane.focus.row == row
    with qtbot.waitSignal(pane.launchRequested) as launched:
        pane.launch()
    settings = launched.args[0]
    assert settings["fitted"] == list(row.fitted)
    assert (settings["micro_batch"], settings["grad_accum"]) == (row.plan.setup.micro_batch, row.plan.setup.grad_accum)
    assert settings["micro_batch"] * settings["grad_accum"] == 32


def test_saving_a_plan_writes_off_the_gui_thread_and_reports_a_failure(
    qtbot: Any, pane: PlanPane, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import gpuplanner.ui.plan.plan_store as plan_pane_module

    wait_for_result(qtbot, pane)
    writers: list[threading.Thread] = []
    real_save = plan_pane_module.save_plan

    def recording_save(db: Any, name: str, document: Any) -> int:
        writers.append(threading.current_thread())
        return real_save(db, name, document)

    monkeypatch.setattr(plan_pane_module, "save_plan", recording_save)
    with qtbot.waitSignal(pane.planSaved, timeout=10_000) as saved:
        pane.save_plan("off the GUI thread")
    assert writers and writers[0] is not threading.main_thread()
    assert pane.saved_plan_id == saved.args[0]

    def failing_save(db: Any, name: str, document: Any) -> int:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(plan_pane_module, "save_plan", failing_save)
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: None)
    with qtbot.waitSignal(pane.planSaveFailed, timeout=10_000) as failed:
        pane.save_plan("fails")
    assert "database is locked" in failed.args[0]
    assert pane.saved_plan_id == saved.args[0]  # the earlier saved plan is still the one linked
