"""Storage and transfer in the bill (issue 31 item 3): the checkpoint size from the plan, the dataset's egress
by where it lives, the three parts in `plan` and `compare` (text and JSON), ranking by the total, bad input."""

from __future__ import annotations

import csv
import datetime as dt
import json

import pytest

from gpuplanner.cli import main
from gpuplanner.plan.memory import trainable_params
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.setup import TrainSetup
from gpuplanner.plan.storage_cost import (
    DATA_PROVIDERS,
    DAYS_PER_MONTH,
    _path,
    checkpoint_bytes,
    load_storage_prices,
)

# A 300M-parameter model trained in full with AdamW at bf16 mixed precision on an A10G (AWS only in the
# shipped catalog), at a given speed so the hours are exact: 100k samples at 500/min = 3 h 20 min.
PLAN = (
    "plan",
    "--gpu",
    "A10G",
    "--params",
    "300M",
    "--method",
    "full",
    "--optimizer",
    "adamw",
    "--precision",
    "bf16-mixed",
    "--samples",
    "100k",
    "--samples-per-min",
    "500",
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_2tb_dataset_in_another_region_shows_the_egress_a_hand_calculation_gives(
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = ("--dataset-gb", "2000", "--data-location", "other-region", "--checkpoints-kept", "3")
    code, out, err = run(capsys, *PLAN, *storage, "--json")
    assert code == 0, err
    document = json.loads(out)
    bill = document["bill"]
    assert bill["provider"] == "aws" and bill["pricing"] == "on-demand"
    # AWS's published rates (S3 Standard us-east-1 $0.023/GB-month; inter-region $0.02/GB), as the table has them
    aws = load_storage_prices()["aws"]
    assert (aws.storage_usd_per_gb_month, aws.inter_region_usd_per_gb) == (0.023, 0.02)
    # transfer: 2,000 GB x $0.02/GB = $40.00
    assert bill["transfer_usd"] == 40.0
    assert bill["transfer"] == {
        "usd": 40.0,
        "gb": 2000,
        "data_location": "other-region",
        "from_provider": "aws",
        "usd_per_gb": 0.02,
    }
    # checkpoint: 300M fp32 master weights (4 B) + AdamW's two fp32 moments (8 B) = 3.6 GB
    params = document["inputs"]["params"]
    checkpoint_gb = params * 12 / 1e9
    assert bill["storage"]["checkpoint_gb"] == pytest.approx(checkpoint_gb, abs=1e-3)
    hours = 100_000 / 500 / 60
    assert document["runtime"]["hours"] == pytest.approx(hours, rel=1e-4)
    checkpoints = 3 * checkpoint_gb * 0.023 * 30 / (365.25 / 12)
    dataset = 2000 * 0.023 * (hours / 24) / (365.25 / 12)
    assert bill["storage_usd"] == pytest.approx(checkpoints + dataset, abs=0.006)
    compute = document["on_demand"]["cost_usd"]
    assert bill["compute_usd"] == compute
    assert bill["total_usd"] == pytest.approx(compute + checkpoints + dataset + 40.0, abs=0.011)
    assert document["inputs"]["dataset_gb"] == 2000 and document["inputs"]["data_location"] == "other-region"

    code, text, err = run(capsys, *PLAN, *storage)
    assert code == 0, err
    assert "transfer $40.00: egress of the 2,000 GB dataset from another region at $0.02/GB" in text
    total = f"${bill['total_usd']:,.2f}"
    assert f"Bill     {total} total (on-demand at aws): compute ${compute:,.2f}" in text
    assert "3 checkpoint(s) x 3.6 GB for 30 days + the 2,000 GB dataset for 3 h 20 min at $0.023/GB-month" in text


def test_where_the_data_lives_sets_the_transfer_rate(capsys: pytest.CaptureFixture[str]) -> None:
    def transfer(*extra: str) -> dict:
        code, out, err = run(capsys, *PLAN, "--dataset-gb", "2000", *extra, "--json")
        assert code == 0, err
        return json.loads(out)["bill"]

    # another provider: that provider's internet egress (GCP Premium Tier $0.12/GB, AWS $0.09/GB)
    assert transfer("--data-location", "other-provider", "--data-provider", "gcp")["transfer_usd"] == 240.0
    assert transfer("--data-location", "other-provider")["transfer_usd"] == 180.0  # aws by default
    assert transfer("--data-location", "same-region")["transfer_usd"] == 0.0
    on_prem = transfer("--data-location", "on-prem")
    assert on_prem["transfer_usd"] == 0.0 and on_prem["transfer"]["from_provider"] is None
    kept = transfer("--checkpoints-kept", "6", "--retention-days", "60")
    # 6 checkpoints of 3.6 GB for 60 days at $0.023/GB-month
    assert kept["storage"]["checkpoints_usd"] == pytest.approx(6 * 3.6 * 0.023 * 60 / 30.4375, abs=0.006)


def test_without_a_dataset_size_the_plan_is_compute_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *PLAN, "--json")
    assert code == 0
    document = json.loads(out)
    assert "bill" not in document and "dataset_gb" not in document["inputs"]
    code, text, _ = run(capsys, *PLAN)
    assert "Bill" not in text and "storage" not in text
    code, out, _ = run(capsys, "compare", "--params", "300M", "--samples", "10k", "--json")
    rows = json.loads(out)
    assert rows and all("bill" not in row and "total_usd" not in row for row in rows)


def test_compare_json_has_the_three_parts_and_ranks_by_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    # 200 TB in another region: the inter-region egress ($0.02/GB at AWS, GCP, Azure; none at Lambda and
    # RunPod) outweighs the GPU-hours, so the total reorders options the compute cost alone would rank
    argv = ("compare", "--params", "300M", "--samples", "100k", "--dataset-gb", "200000")
    code, out, err = run(capsys, *argv, "--data-location", "other-region", "--json")
    assert code == 0, err
    rows = json.loads(out)
    priced = [row for row in rows if row["bill"]["storage"] is not None and row["bill"]["compute_usd"] is not None]
    assert priced
    for row in priced:
        bill = row["bill"]
        assert set(bill) >= {"compute_usd", "storage_usd", "transfer_usd", "total_usd"}
        assert bill["total_usd"] == pytest.approx(
            bill["compute_usd"] + bill["storage_usd"] + bill["transfer_usd"], abs=0.011
        )
        assert row["total_usd"] == bill["total_usd"]
        rate = load_storage_prices()[row["provider"]].inter_region_usd_per_gb
        assert bill["transfer_usd"] == pytest.approx(200_000 * rate)
    usable = [row for row in rows if row["usable"]]
    assert [row["rank"] for row in usable] == list(range(1, len(usable) + 1))
    totals = [row["total_usd"] for row in usable if row["total_usd"] is not None]
    assert totals == sorted(totals) and len(totals) > 5
    costs = [row["cost_usd"] for row in usable if row["total_usd"] is not None]
    assert costs != sorted(costs)  # the egress changed the order
    assert usable[0]["bill"]["transfer_usd"] == 0.0
    # a provider without storage prices (tensorwave, vultr): the parts and the total are unknown, never $0,
    # and the option ranks after every fully priced one
    unknown = [row for row in usable if row["bill"]["storage"] is None]
    assert unknown and all(row["total_usd"] is None and row["bill"]["note"] for row in unknown)
    assert usable[-len(unknown) :] == unknown
    # the text table gets the three columns, and the recommendation names the total
    code, text, err = run(capsys, *argv, "--data-location", "other-region", "--top", "3")
    assert code == 0, err
    header = text.splitlines()[0]
    assert header.split()[-3:] == ["storage_usd", "transfer_usd", "total_usd"]
    best = usable[0]
    assert f"at {best['provider']}: ${best['total_usd']:,.2f}" in text


def test_the_budget_counts_storage_and_transfer(capsys: pytest.CaptureFixture[str]) -> None:
    # compute is about $3.35 (A10G at AWS): within $20 alone, over it with the $40 egress of 2,000 GB
    code, out, err = run(capsys, *PLAN, "--budget-usd", "20", "--json")
    assert code == 0, err
    assert json.loads(out)["budget_ok"] is True
    storage = ("--dataset-gb", "2000", "--data-location", "other-region")
    code, out, err = run(capsys, *PLAN, *storage, "--budget-usd", "20", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["on_demand"]["cost_usd"] < 20 < document["bill"]["total_usd"]
    assert document["budget_ok"] is False
    code, out, err = run(capsys, *PLAN, *storage, "--budget-usd", "50", "--json")
    assert json.loads(out)["budget_ok"] is True  # $43.81 in all
    # compare: options whose total is over the budget are not ranked, those under it are
    argv = ("compare", "--params", "300M", "--samples", "100k", *storage, "--budget-usd", "20", "--json")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    rows = [row for row in json.loads(out) if row["bill"]["total_usd"] is not None and row["memory"]["fits"]]
    over = [row for row in rows if row["pricing"] == "on-demand" and row["bill"]["total_usd"] > 20]
    under = [row for row in rows if row["pricing"] == "on-demand" and row["bill"]["total_usd"] <= 20]
    assert over and under
    assert all(row["within_budget"] is False and row["rank"] is None for row in over)
    assert all(row["within_budget"] is True for row in under)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--dataset-gb", "-5"), "--dataset-gb"),
        (("--dataset-gb", "lots"), "--dataset-gb"),
        (("--dataset-gb", "10", "--data-location", "mars"), "--data-location"),
        (("--dataset-gb", "10", "--data-provider", "dropbox"), "--data-provider"),
        (("--dataset-gb", "10", "--checkpoints-kept", "0"), "--checkpoints-kept"),
        (("--dataset-gb", "10", "--checkpoints-kept", "1.5"), "--checkpoints-kept"),
        (("--dataset-gb", "10", "--retention-days", "-1"), "--retention-days"),
    ],
)
def test_bad_storage_input_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], flag: str
) -> None:
    code, out, err = run(capsys, "plan", *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("gpuplanner")]
    assert len(lines) == 1 and flag in lines[0], err
    assert "Traceback" not in err and out == ""


def test_checkpoint_size_is_weights_and_optimizer_states_or_adapters_only() -> None:
    spec = from_preset("llama-3-8b")
    full = TrainSetup(method="full", optimizer="adamw", precision="bf16-mixed")
    assert checkpoint_bytes(spec, full) == spec.n_params * (4 + 8)
    pure = TrainSetup(method="full", optimizer="adamw", precision="bf16")
    assert checkpoint_bytes(spec, pure) == spec.n_params * (2 + 4)  # bf16 weights and moments
    sgd = TrainSetup(method="full", optimizer="sgd", precision="bf16-mixed")
    assert checkpoint_bytes(spec, sgd) == spec.n_params * (4 + 4)  # one momentum buffer
    for method in ("lora", "qlora"):
        lora = TrainSetup(method=method, optimizer="adamw", precision="bf16-mixed", lora_rank=16)
        adapters = trainable_params(spec, lora)
        assert 0 < adapters < spec.n_params / 50
        assert checkpoint_bytes(spec, lora) == adapters * (4 + 8)  # fp32 adapters and their moments


def test_the_price_table_is_sourced_and_dated() -> None:
    prices = load_storage_prices()
    assert set(DATA_PROVIDERS) <= set(prices)
    with open(_path(), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        assert all(url.strip().startswith("https://") for url in row["source"].split(";")), row["provider"]
        assert all(url.strip().startswith("https://") for url in row["read_at"].split(";")), row["provider"]
        assert dt.date.fromisoformat(row["as_of"]) <= dt.date(2026, 11, 27)
    assert DAYS_PER_MONTH == pytest.approx(30.4375)


def test_a_bad_price_table_row_names_file_row_and_column(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "storage_prices.csv"
    with open(_path(), encoding="utf-8") as fh:
        header = fh.readline()
    bad.write_text(header + "aws,S3,cheap,0.09,0.02,2026-11-27,https://x,https://x,\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: storage_usd_per_gb_month is not a number: 'cheap'"):
        load_storage_prices(bad)
