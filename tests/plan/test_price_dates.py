"""Dated prices: every plan, comparison and export says how old its prices are and where they come from."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import open_db
from gpuplanner.history.plans import get_plan, save_plan
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import PRICE_COLUMNS, builtin_catalog
from gpuplanner.plan.price_dates import STALE_AFTER_DAYS, age_days, describe_age, oldest, stale_warning

HEADER = ",".join(PRICE_COLUMNS) + "\n"
SHIPPED_DATE = "2025-06-15"
# A small, fast workload: GPT-2 with a given speed, so only prices matter.
WORKLOAD = ("--model", "gpt2", "--samples", "1000", "--seq-len", "512")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def user_prices(rows: str) -> Path:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prices.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_age_words_and_the_stale_threshold() -> None:
    on = dt.date(2025, 9, 13)
    assert age_days("2025-06-15", on) == 90
    assert describe_age("2025-06-15", on) == "prices as of 2025-06-15 (90 days old)"
    assert describe_age("2025-09-12", on) == "prices as of 2025-09-12 (1 day old)"
    assert describe_age("2025-09-13", on) == "prices as of 2025-09-13 (today)"
    assert describe_age(None) == "prices given by you (no catalog date)"
    assert stale_warning("2025-06-15", on) is None  # 90 days: not yet stale
    # a provider `catalog update` does not fetch: the warning says so rather than send the user to an update
    only = stale_warning("2025-06-14", on, providers=["vultr"])
    assert only is not None and only.endswith(
        "check the pricing page of vultr (`gpuplanner catalog update` does not fetch it)"
    )
    assert "run `gpuplanner catalog update`" in str(stale_warning("2025-06-14", on, providers=["vultr", "aws"]))
    warning = stale_warning("2025-06-14", on)
    assert warning is not None and "91 days old" in warning and "gpuplanner catalog update" in warning
    assert STALE_AFTER_DAYS == 90
    assert oldest(["2025-07-01", None, "", "2024-12-31", "bad"]) == "2024-12-31"
    assert age_days("not a date") is None


def test_plan_json_carries_dates_sources_and_what_is_rented(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--json")
    assert code == 0
    doc = json.loads(out)
    days = (dt.date.today() - dt.date.fromisoformat(SHIPPED_DATE)).days
    assert doc["prices_as_of"] == SHIPPED_DATE and doc["prices_age_days"] == days
    assert doc["prices_stale"] is (days > STALE_AFTER_DAYS)
    on_demand, spot = doc["on_demand"], doc["spot"]
    # The cheapest 1-GPU T4 on-demand offer in the shipped catalog: AWS g4dn.xlarge and Azure at $0.526.
    assert on_demand["price_per_gpu_hour"] == 0.526 and on_demand["provider"] in ("aws", "azure")
    assert on_demand["as_of"] == SHIPPED_DATE and on_demand["source"]
    assert on_demand["gpus_per_instance"] == 1 and on_demand["idle_gpus"] == 0
    assert on_demand["price_per_instance_hour"] == pytest.approx(0.526)
    assert on_demand["rents"].startswith("1 x ") and "(1 GPU)" in on_demand["rents"]
    # Spot: GCP n1 + T4 at $0.15 with the shipped (assumed) interruption rate.
    assert spot["price_per_gpu_hour"] == 0.15 and spot["provider"] == "gcp"
    assert spot["interruptions_per_hour"] == 0.03 and spot["interruptions_source"] == "assumed"
    assert spot["as_of"] == SHIPPED_DATE
    if days > STALE_AFTER_DAYS:
        assert any(w.startswith(f"prices are {days} days old") for w in doc["warnings"])


def test_fresh_user_prices_win_and_do_not_warn(capsys: pytest.CaptureFixture[str]) -> None:
    today = dt.date.today().isoformat()
    user_prices(
        f"mycloud,eu-1,T4,1,t4-small,0.20,0.08,0.01,60,{today},my quote,provider status page\n"
        f"mycloud,any,T4,4,t4-quad,0.19,,,,{today},my quote,\n"
    )
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["prices_as_of"] == today and doc["prices_age_days"] == 0 and doc["prices_stale"] is False
    assert not any("days old" in w for w in doc["warnings"])
    assert doc["on_demand"]["source"] == "my quote" and doc["on_demand"]["region"] == "eu-1"
    assert doc["spot"]["interruptions_per_hour"] == 0.01
    assert doc["spot"]["interruptions_source"] == "provider status page"

    # Four GPUs: the 4-GPU instance with no region is "any" region.
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--gpus", "4", "--json")
    doc = json.loads(out)
    assert doc["on_demand"]["instance_type"] == "t4-quad" and doc["on_demand"]["region"] == "any"
    assert doc["on_demand"]["price_per_instance_hour"] == pytest.approx(0.76)


def test_a_whole_instance_is_billed_and_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    today = dt.date.today().isoformat()
    user_prices(f"mycloud,eu-1,L4,8,l4-eight,0.10,,,,{today},my quote,\n")
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "L4", "--gpus", "2", "--json")
    doc = json.loads(out)
    assert doc["on_demand"]["instance_type"] == "l4-eight"
    assert doc["on_demand"]["billed_gpus"] == 8 and doc["on_demand"]["idle_gpus"] == 6
    assert doc["on_demand"]["rents"] == "1 x l4-eight (8 GPUs), billed as a whole instance: 6 GPUs idle"
    assert doc["on_demand"]["cost_usd"] == pytest.approx(0.10 * 8 * doc["runtime"]["hours"], abs=0.01)

    code, out, _ = run(capsys, "compare", *WORKLOAD, "--gpu", "L4", "--gpus", "2", "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    ours = [r for r in rows if r["pricing"] == "on-demand"]
    assert ours and ours[0]["rents"].endswith("billed as a whole instance: 6 GPUs idle")


def test_plan_text_names_date_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4")
    assert code == 0
    days = (dt.date.today() - dt.date.fromisoformat(SHIPPED_DATE)).days
    assert f"Prices as of {SHIPPED_DATE} ({days} days old)" in out
    assert "source: " in out and f"as of {SHIPPED_DATE}" in out
    assert "interruptions 0.03/h (assumed)" in out

    code, out, _ = run(capsys, "plan", *WORKLOAD, "--price", "1.5", "--samples-per-min", "100")
    assert code == 0 and "Prices given by you (no catalog date)" in out and "source: given (--price)" in out


def test_plan_csv_and_markdown_carry_the_date(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--csv")
    fields = dict(csv.reader(io.StringIO(out)))
    assert fields["prices_as_of"] == SHIPPED_DATE
    assert fields["on_demand.as_of"] == SHIPPED_DATE and fields["on_demand.source"]
    assert fields["spot.interruptions_source"] == "assumed"
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--markdown")
    assert f"| prices_as_of | {SHIPPED_DATE} |" in out and "| on_demand.source |" in out


def test_compare_outputs_carry_dates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", *WORKLOAD, "--gpus", "1", "--json")
    assert code == 0
    rows = json.loads(out)
    priced = [r for r in rows if r["on_demand"]]
    assert priced and all(r["prices_as_of"] and r["on_demand"]["as_of"] and r["on_demand"]["source"] for r in priced)

    code, out, _ = run(capsys, "compare", *WORKLOAD, "--gpus", "1", "--csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert {"rents", "price_per_gpu_hour", "price_as_of", "price_source"} <= set(table[0])
    assert all(r["price_as_of"] for r in table if r["price_per_gpu_hour"])

    code, out, _ = run(capsys, "compare", *WORKLOAD, "--gpus", "1", "--markdown")
    assert f"to {SHIPPED_DATE}: " in out and " offers older than 90 days (" in out
    assert "| price_as_of |" in out.splitlines()[0] + " |"


def test_a_saved_plan_keeps_the_prices_it_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--json")
    document = json.loads(out)
    db = open_db(tmp_path / "history.sqlite")
    try:
        plan_id = save_plan(db, "t4 plan", document)
        # The catalog changes afterwards: a cheaper, newer offer.
        today = dt.date.today().isoformat()
        user_prices(f"mycloud,eu-1,T4,1,t4-small,0.10,,,,{today},my quote,\n")
        code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", "T4", "--json")
        assert json.loads(out)["on_demand"]["price_per_gpu_hour"] == 0.10
        saved = get_plan(db, plan_id).document
    finally:
        db.close()
    assert saved["prices_as_of"] == SHIPPED_DATE
    assert saved["on_demand"]["price_per_gpu_hour"] == 0.526
    assert saved["on_demand"]["as_of"] == SHIPPED_DATE and saved["on_demand"]["source"]
    assert saved["on_demand"]["cost_usd"] == document["on_demand"]["cost_usd"]


@pytest.mark.parametrize("gpu", ["V100", "T4"])
def test_a_gpu_without_bf16_plans_fp16_mixed_and_says_so(gpu: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", gpu, "--precision", "bf16-mixed", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["inputs"]["precision"] == "bf16-mixed"
    assert any(
        "has no bf16: planned with fp16-mixed (loss scaling) instead of bf16-mixed" in w for w in doc["warnings"]
    )
    # The speed is the card's fp16 tensor-core peak x MFU, not an error.
    peak = builtin_catalog().gpu(gpu).tflops["fp16"]
    assert doc["throughput"]["tokens_per_s"] > 0 and f"of {peak:,.0f} TFLOP/s" in doc["throughput"]["source"]
    code, out, _ = run(capsys, "plan", *WORKLOAD, "--gpu", gpu)
    assert code == 0 and ", fp16-mixed, " in out.splitlines()[0]


def test_prices_note_for_reports_and_the_window() -> None:
    from gpuplanner.plan.catalog import load_catalog
    from gpuplanner.plan.documents import prices_note
    from gpuplanner.plan.model_spec import from_preset
    from gpuplanner.plan.planner import PlanRequest, PricingInputs, make_plan
    from gpuplanner.plan.runtime import Workload
    from gpuplanner.plan.setup import TrainSetup

    model = from_preset("gpt2")
    plan = make_plan(PlanRequest(model, TrainSetup(), Workload(samples=1000), gpu="H100 SXM"), load_catalog())
    days = (dt.date.today() - dt.date.fromisoformat(SHIPPED_DATE)).days
    note = prices_note(plan)
    assert note.startswith(f"Prices as of {SHIPPED_DATE} ({days} days old). On-demand: ")
    assert f"; spot: runpod secure 1x H100 SXM (RunPod GPU Cloud pricing, {SHIPPED_DATE})" in note
    given = make_plan(
        PlanRequest(
            model, TrainSetup(), Workload(samples=1000), gpu=None, pricing=PricingInputs(price=2.0), tokens_per_s=1e4
        ),
        None,
    )
    assert prices_note(given) == "Prices given by you (no catalog date). On-demand: given (--price)"
