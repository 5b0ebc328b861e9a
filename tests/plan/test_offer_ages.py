"""Issue 31 item 2: the headline says how many offers are stale and whose, and `catalog prices --summary`
prints the share of offers older than a year."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from gpuplanner.cli import main
from gpuplanner.paths import config_dir
from gpuplanner.plan.catalog import PRICE_COLUMNS
from gpuplanner.plan.price_dates import describe_offer_ages, offer_ages, stale_offers_warning

ON = dt.date(2026, 11, 27)


def test_offer_ages_count_stale_offers_per_provider_and_those_past_a_year() -> None:
    ages = offer_ages(
        [
            ("aws", "2026-11-20"),  # 7 days
            ("aws", "2026-08-28"),  # 91 days: stale
            ("vultr", "2025-06-15"),  # 530 days: stale, past a year
            ("runpod", "2025-11-26"),  # 366 days: stale, past a year
            ("runpod", "2025-11-27"),  # 365 days: stale, not past a year
            ("own", None),  # the user's own: undated, left out
        ],
        ON,
    )
    assert ages.total == 5 and ages.stale == 4 and ages.over_a_year == 2
    assert ages.stale_by_provider == {"runpod": 2, "aws": 1, "vultr": 1}
    assert ages.over_a_year_share == pytest.approx(2 / 5)
    assert describe_offer_ages(ages) == (
        "Prices as of 2026-11-20 to 2025-06-15: 4 of 5 offers older than 90 days (runpod 2, aws 1, vultr 1)"
    )
    warning = stale_offers_warning(ages)
    assert warning is not None
    assert "run `gpuplanner catalog update` for runpod, aws" in warning
    assert "check the pricing pages of vultr (the update does not fetch them)" in warning

    fresh = offer_ages([("aws", "2026-11-20")], ON)
    assert describe_offer_ages(fresh) == "Prices as of 2026-11-20: none of 1 offers older than 90 days"
    assert stale_offers_warning(fresh) is None


def test_catalog_prices_summary_counts_the_offers_it_lists(capsys: pytest.CaptureFixture[str]) -> None:
    today = dt.date.today()
    fresh, old = (today - dt.timedelta(days=3)).isoformat(), (today - dt.timedelta(days=400)).isoformat()
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prices.csv").write_text(
        ",".join(PRICE_COLUMNS)
        + "\n"
        + f"mycloud,eu-1,L40,1,l40-one,0.90,,,,{fresh},my quote,\n"
        + f"othercloud,eu-1,L40,2,l40-two,0.80,,,,{old},old quote,\n",
        encoding="utf-8",
    )
    assert main(["catalog", "prices", "--gpu", "L40", "--summary", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["older_than_a_year"] == 1 and document["offers"] >= 2
    assert document["older_than_90_days_by_provider"]["othercloud"] == 1
    assert "mycloud" not in document["older_than_90_days_by_provider"]
    assert document["older_than_a_year_share"] == pytest.approx(
        document["older_than_a_year"] / document["offers"], abs=1e-4
    )

    assert main(["catalog", "prices", "--summary"]) == 0
    out = capsys.readouterr().out
    assert " offers older than 90 days (" in out and "are older than a year" in out

    assert main(["catalog", "prices", "--summary", "--csv"]) == 2


def test_a_plan_priced_by_a_provider_the_update_does_not_fetch_says_where_to_look(
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = (dt.date.today() - dt.timedelta(days=200)).isoformat()
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prices.csv").write_text(
        ",".join(PRICE_COLUMNS) + "\n" + f"mycloud,eu-1,T4,1,t4-one,0.01,0.005,,,{old},my old quote,\n",
        encoding="utf-8",
    )
    argv = ["plan", "--model", "gpt2", "--samples", "1000", "--seq-len", "512", "--gpu", "T4", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["on_demand"]["provider"] == document["spot"]["provider"] == "mycloud"
    stale = [w for w in document["warnings"] if w.startswith("prices are 200 days old")]
    assert stale and stale[0].endswith(
        "check the pricing page of mycloud (`gpuplanner catalog update` does not fetch it)"
    ), document["warnings"]
