"""The option you see is the option you launch: the Plan details, the PDF and "Launch this plan" describe one
option (the table's selected row, else the recommended one), never the form's option mixed in; and the
Plan pane never opens the history on the GUI thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QInputDialog

from gpuplanner.launch.hosts import Host, add_host, update_host
from gpuplanner.launch.preflight import hf_id_for
from gpuplanner.plan.compare import CompareRow
from gpuplanner.ui.plan.plan_pane import PlanPane
from gpuplanner.ui.runs.launch_memory import remember_values
from gpuplanner.ui.runs.launch_request import demo_dir
from tests.ui.helpers import wait_for_result
from tests.ui.pdf_check import missing_words, read_words

FORM_GPU = "H100 SXM"


@pytest.fixture
def pane(qtbot: Any, plan_pane: PlanPane) -> PlanPane:
    """The form on one H100 SXM (the example's LoRA of an 8B model fits it): another GPU is recommended."""
    plan_pane.form.set_values({"gpu": FORM_GPU})
    plan_pane.recalculate()
    qtbot.waitUntil(lambda: not plan_pane.is_busy() and plan_pane.result.plan.gpu.name == FORM_GPU, timeout=10_000)
    return plan_pane


def recommended(pane: PlanPane) -> CompareRow:
    return next(r for r in pane.result.rows if r.rank == 1)


def other_option(pane: PlanPane) -> CompareRow:
    """A usable option on neither the form's GPU nor the recommended one's, on several GPUs when there is one."""
    best = recommended(pane)
    usable = [r for r in pane.result.rows if r.usable and r.gpu not in (FORM_GPU, best.gpu)]
    return max(usable, key=lambda r: (r.gpus > 1, r.pricing == "spot", -(r.rank or 0)))


def details_texts(pane: PlanPane) -> list[str]:
    labels = (
        pane.recommendation_label,
        pane.form_note_label,
        pane.focus_label,
        pane.summary_label,
        pane.rent_label,
        pane.sources_label,
        pane.advice_label,
    )
    return [label.text() for label in labels if label.isVisibleTo(pane)]


def report_texts(pane: PlanPane) -> list[str]:
    """The PDF report's sentences and settings (everything but the ranked table of every option)."""
    texts = []
    for kind, payload in pane.report().blocks:
        if kind == "text":
            texts.append(payload[0])
        elif kind == "kv":
            texts += [f"{key}: {value}" for key, value in payload[0]]
    return texts


def test_a_selected_option_is_described_alone_in_the_details_and_the_pdf(pane: PlanPane, tmp_path: Path) -> None:
    assert pane.result.plan.fits  # the form's option fits: nothing about it needs saying
    other = other_option(pane)
    assert pane.select_option(other.gpu, other.gpus, other.pricing)
    assert pane.focus.row == other and pane.focus.why == "selected"
    speed = f"Speed: step model for {other.gpu} ("
    assert pane.sources_label.text().startswith(speed)
    assert f"over {other.gpus} GPUs" in pane.sources_label.text() or other.gpus == 1
    texts = details_texts(pane)
    assert not any(FORM_GPU in text for text in texts), texts
    assert not pane.form_note_label.isVisible()
    assert pane.memory_bar.view.gpu == other.gpu
    # the PDF: the same option in every sentence and in the settings, the form's GPU nowhere above the table
    report = report_texts(pane)
    assert any(text.startswith(f"Selected: #{other.rank} {other.gpus} x {other.gpu}") for text in report)
    assert any(speed in text for text in report)
    assert f"GPUs: {other.gpus} x {other.gpu}" in report and f"Pricing: {other.pricing}" in report, report
    assert not any(FORM_GPU in text for text in report), report
    pane.export_pdf(tmp_path / "plan.pdf")
    pages = read_words(tmp_path / "plan.pdf")
    assert not missing_words(pages, [f"step model for {other.gpu}", f"Selected: #{other.rank}"])


def test_the_recommended_option_when_nothing_is_selected(qtbot: Any, pane: PlanPane) -> None:
    best = recommended(pane)
    assert best.gpu != FORM_GPU and pane.focus.why == "recommended" and pane.focus.row == best
    assert pane.sources_label.text().startswith(f"Speed: step model for {best.gpu} (")
    assert not any(FORM_GPU in text for text in details_texts(pane))
    assert any(f"step model for {best.gpu}" in text for text in report_texts(pane))
    with qtbot.waitSignal(pane.launchRequested, timeout=10_000) as launched:
        pane.launch()
    settings = launched.args[0]
    setup = best.plan.setup
    assert (settings["gpu"], settings["gpus"], settings["spot"]) == (best.gpu, best.gpus, best.pricing == "spot")
    assert (settings["micro_batch"], settings["grad_accum"], settings["seq_len"]) == (
        setup.micro_batch,
        setup.grad_accum,
        setup.seq_len,
    )
    choice = best.plan.spot.price if best.pricing == "spot" else best.plan.on_demand
    assert settings["price_per_gpu_hour"] == choice.usd_per_gpu_hour


def test_the_forms_option_that_does_not_fit_is_said_once_at_the_top(qtbot: Any, pane: PlanPane) -> None:
    pane.form.set_values({"method": "full", "grad-checkpointing": "none"})
    pane.recalculate()
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result.request.setup.method == "full", timeout=10_000)
    assert pane.result.plan.fits is False and pane.focus.why == "recommended"
    note = pane.form_note_label.text()
    assert note.startswith(f"The form's option (1 x {FORM_GPU}, on-demand) does not fit: to make it fit, ")
    texts = details_texts(pane)
    assert [t for t in texts if FORM_GPU in t] == [note]  # said once, labelled as the form's
    layout = pane.details_view.layout()
    # the first of the scrolled sentences, under the headline, the input line and the memory bar (kept in view)
    assert layout.indexOf(pane.form_note_label) == 0
    header = pane.details_view.header.layout()
    assert [header.itemAt(i).widget() for i in range(header.count())] == [
        pane.recommendation_label,
        pane.status_label,
        pane.memory_bar,
        pane.details_view.parts,
    ]
    report = report_texts(pane)
    assert report[0] == note and [t for t in report if FORM_GPU in t] == [note]


def _selected_settings(qtbot: Any, pane: PlanPane, option: CompareRow) -> dict[str, Any]:
    assert pane.select_option(option.gpu, option.gpus, option.pricing)
    with qtbot.waitSignal(pane.launchRequested, timeout=10_000) as launched:
        pane.launch()
    return launched.args[0]


def test_launch_opens_with_the_selected_option_and_a_host_that_has_its_gpus(
    qtbot: Any, pane: PlanPane, runs_pane: Any, services: Any
) -> None:
    other = other_option(pane)
    settings = _selected_settings(qtbot, pane, other)
    setup = other.plan.setup
    # the plan saved for the run is the launched option
    saved = pane.store.db_path
    assert saved == services.db_path and settings["plan_id"] == pane.saved_plan_id

    db_path = runs_pane.services.db_path
    add_host(db_path, Host(name="small-box", kind="ssh", hostname="small.example.org", gpu_type=other.gpu, gpu_count=1))
    update_host(db_path, Host(name="local", kind="local", gpu_type=FORM_GPU, gpu_count=1))
    nvml_name = "NVIDIA " + other.gpu if not other.gpu.startswith(("AMD", "MI")) else other.gpu
    add_host(
        db_path, Host(name="big-box", kind="ssh", hostname="big.example.org", gpu_type=nvml_name, gpu_count=other.gpus)
    )
    # the last launch was the demo on this machine: a plan's launch takes neither its corpus nor its host
    remember_values({"host": "local", "data": [str(demo_dir() / "corpus")], "model_config": "", "gpus": 1})
    dialog = runs_pane.make_launch_dialog(settings)
    try:
        assert dialog.host_combo.currentData() == "big-box"
        assert not dialog.host_note_label.isVisibleTo(dialog)
        assert dialog.gpus_spin.value() == other.gpus
        assert dialog.method_combo.currentText() == setup.method
        assert (dialog.micro_spin.value(), dialog.accum_spin.value(), dialog.seq_spin.value()) == (
            setup.micro_batch,
            setup.grad_accum,
            setup.seq_len,
        )
        assert dialog.precision_combo.currentText() == settings["precision"]
        assert dialog.model_edit.text() == hf_id_for(pane.result.request.model.name)
        assert dialog.data_edit.text() == ""  # the plan did not use the demo corpus
        assert dialog.auto_resume_check.isChecked() == (other.pricing == "spot")
    finally:
        dialog.deleteLater()

    # no host has that many of them: the dialog says so and leaves the choice to the user
    update_host(db_path, Host(name="big-box", kind="ssh", hostname="big.example.org", gpu_type=nvml_name, gpu_count=1))
    if other.gpus > 1:
        dialog = runs_pane.make_launch_dialog(settings)
        try:
            note = dialog.host_note_label
            assert note.isVisibleTo(dialog)
            assert note.text().startswith(f"None of your hosts has {other.gpus} x {other.gpu}")
            assert f"big-box: 1 x {other.gpu}" in note.text()
        finally:
            dialog.deleteLater()


def test_the_plan_pane_never_opens_the_history_on_the_gui_thread(
    qtbot: Any, pane: PlanPane, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuplanner.planning as planning
    import gpuplanner.ui.plan.plan_store as plan_store

    opened: list[bool] = []  # per open_db: on the GUI thread?
    for module in (plan_store, planning):
        real = module.open_db

        def recording(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            opened.append(threading.current_thread() is threading.main_thread())
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "open_db", recording)
    with qtbot.waitSignal(pane.planSaved, timeout=10_000) as saved:
        pane.save_plan("kept")
    plan_id = saved.args[0]
    pane.form.set_values({"micro-batch": "1"})
    chosen: list[list[str]] = []

    def choose(_parent: Any, _title: str, _label: str, items: list[str], *_: Any, **__: Any) -> tuple[str, bool]:
        chosen.append(items)
        return items[0], True

    monkeypatch.setattr(QInputDialog, "getItem", choose)
    with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
        pane.open_dialog()  # lists on the worker, asks, then reads the plan on the worker
    wait_for_result(qtbot, pane)
    assert chosen and chosen[0][0].startswith(f"#{plan_id}  kept")
    assert pane.form.values()["micro-batch"] == "4" and pane.saved_plan_id == plan_id
    # the calculation read the history's measured speeds too (the file exists now)
    assert len(opened) >= 4 and not any(opened), opened


def test_speed_sources_in_the_details_words() -> None:
    from gpuplanner.ui.plan.plan_details import speed_words

    assert speed_words("estimate: MI300X step model, matmuls at 53% of 1307 TFLOP/s, MFU 0.30") == (
        "step model for MI300X (matmuls at 53% of 1307 TFLOP/s, MFU 0.30)"
    )
    assert speed_words("calibrated: runs #3 on NVIDIA A10G") == "measured in runs #3 on NVIDIA A10G"
    assert speed_words(
        "calibrated from speeds measured on A10G (sequence 512) (efficiency x1.20); L4 step model, matmuls at 48%"
    ) == ("step model for L4 corrected by speeds measured on A10G (sequence 512), efficiency x1.20; matmuls at 48%")
    assert speed_words("estimate: T4 peak 65 TFLOP/s x MFU 0.40 (given)") == "T4 peak 65 TFLOP/s x MFU 0.40 (given)"


def test_a_history_another_process_holds_locked_does_not_freeze_the_pane(qtbot: Any, pane: PlanPane) -> None:
    """A writer elsewhere holds the history: saving waits on the store's worker while the pane still
    recalculates and lists the saved plans; the save lands once the lock is gone."""
    import sqlite3

    with qtbot.waitSignal(pane.planSaved, timeout=10_000):
        pane.save_plan("first")  # the file exists, in WAL mode
    other = sqlite3.connect(pane.store.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the write lock, as another process's import would hold it
        pane.save_plan("second")  # returns at once: the worker waits for the lock
        assert pane.store.is_busy()
        pane.form.set_values({"epochs": "2"})
        with qtbot.waitSignal(pane.resultsUpdated, timeout=10_000):
            pane.recalculate()  # the calculation (and its read of the history) still answers
        assert pane.result.request.workload.epochs == 2.0
        assert pane.store.is_busy()  # the save is still waiting
    finally:
        other.execute("ROLLBACK")
        other.close()
    with qtbot.waitSignal(pane.planSaved, timeout=10_000) as saved:
        pass
    listed: list[Any] = []
    pane.store.list_saved(listed.append)
    qtbot.waitUntil(lambda: bool(listed), timeout=10_000)
    assert sorted(name for _, name, _ in listed[0]) == ["first", "second"]
    assert saved.args[0] == max(pid for pid, _, _ in listed[0])
