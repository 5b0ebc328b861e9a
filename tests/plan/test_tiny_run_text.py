"""A tiny run (GPT-2, 200 samples) reads as what it costs and takes: "$0.0000385 in 1 s", never "$0.00 in
0.0 h" or "3.85e-05", in the engine's recommendation, the CLI's text and its JSON."""

from __future__ import annotations

import json
import re

import pytest

from gpuplanner.cli import main
from gpuplanner.export.human import human_hours, human_money, round_for_people
from gpuplanner.export.tables import to_text
from gpuplanner.plan.catalog import builtin_catalog
from gpuplanner.plan.compare import compare, recommendation
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, PricingInputs
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

TINY = ("--model", "gpt2", "--samples", "200", "--epochs", "1", "--seq-len", "128")


def tiny_rows() -> list:
    request = PlanRequest(
        model=from_preset("gpt2"),
        setup=TrainSetup(method="full", micro_batch=4, grad_accum=4, seq_len=128, precision="bf16-mixed"),
        workload=Workload(samples=200, epochs=1.0),
        gpu=None,
        pricing=PricingInputs(),
    )
    return compare(request, builtin_catalog())


def test_round_for_people_keeps_tiny_values() -> None:
    assert round_for_people(12.3456, 2) == 12.35
    assert round_for_people(0.0000385123, 2) == 0.0000385
    assert round_for_people(-0.00123456, 2) == -0.00123
    assert round_for_people(0.0, 2) == 0.0
    assert round_for_people(None) is None and round_for_people(float("inf")) is None


def test_recommendation_of_a_tiny_run_is_in_words() -> None:
    rows = tiny_rows()
    best = next(r for r in rows if r.usable)
    assert best.cost_usd < 0.01 and best.hours < 1 / 60  # seconds, a fraction of a cent
    text = recommendation(rows)
    assert f": {human_money(best.cost_usd)} in {human_hours(best.hours)}" in text
    assert "$0.00 " not in text and " 0.0 h" not in text and "e-0" not in text


def test_recommendation_of_a_long_run_keeps_cents_and_hours() -> None:
    request = PlanRequest(
        model=from_preset("llama-3.1-8b"),
        setup=TrainSetup(method="lora", micro_batch=4, grad_accum=4, seq_len=2048, precision="bf16-mixed"),
        workload=Workload(samples=500_000, epochs=2.0),
        gpu=None,
        pricing=PricingInputs(),
    )
    rows = compare(request, builtin_catalog())
    best = next(r for r in rows if r.usable)
    assert best.hours > 1 and best.cost_usd > 1
    text = recommendation(rows)
    assert f": ${best.cost_usd:,.2f} in {human_hours(best.hours)}" in text
    assert re.search(r"\d+ h( \d+ min)?", text)


def test_compare_text_of_a_tiny_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *TINY]) == 0
    out = capsys.readouterr().out
    assert "e-0" not in out  # no exponents in the table or the sentences
    recommendation_line = next(line for line in out.splitlines() if " at " in line and " in " in line)
    assert "$0.00 " not in recommendation_line and " 0.0 h" not in recommendation_line
    likely = next(line for line in out.splitlines() if line.startswith("Likely for the best option"))
    assert not re.search(r"\$0\.00(?!\d)", likely)  # "$0.0000275", never a bare "$0.00"


def test_plan_text_and_json_of_a_tiny_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *TINY, "--gpu", "H100 SXM", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    cost = document["on_demand"]["cost_usd"]
    assert 0 < cost < 0.01  # kept to 3 significant figures, not rounded to 0.0
    assert document["runtime"]["hours"] > 0
    assert main(["plan", *TINY, "--gpu", "H100 SXM"]) == 0
    out = capsys.readouterr().out
    assert f"On-demand {human_money(cost)} at" in out
    runtime = next(line for line in out.splitlines() if line.startswith("Runtime"))
    assert runtime.startswith(f"Runtime  {human_hours(document['runtime']['hours'])},")
    assert "0.00 h" not in out and not re.search(r"\$0\.00(?!\d)", out)


def test_text_tables_write_tiny_numbers_without_exponents() -> None:
    text = to_text(("cost_usd", "hours"), [(0.0000385, 0.000123), (12.5, 3.25)])
    assert "0.0000385" in text and "0.000123" in text and "e-" not in text
