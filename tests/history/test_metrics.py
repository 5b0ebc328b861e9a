"""The history's Prometheus figures (history/metrics.py) on a real SQLite file: each equals what `runs show`,
`runs report` and the rollups say, the cardinality rule holds, and an unreadable history gives up 0."""

from __future__ import annotations

import calendar
import re
import sqlite3
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history import metrics as metrics_module
from gpuplanner.history import open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.billing import billed_span
from gpuplanner.history.metrics import SPECS, Family, Scraper, SummaryCache, read_metrics
from gpuplanner.history.spend import spend_report
from tests.history.metrics_seed import launcher_event, seed

NOW = float(calendar.timegm((2026, 11, 20, 12, 0, 0)))


def value(out: dict[str, Family], name: str, **labels: object) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    family = out[name]
    found = [
        v
        for values, v in family.samples
        if all(dict(zip(family.labels, values)).get(k) == str(want) for k, want in labels.items())
    ]
    assert len(found) == 1, f"{name} {labels}: {found} in {family.samples}"
    return found[0]


def label_values(out: dict[str, Family], name: str, label: str) -> set[str]:
    family = out[name]
    return {dict(zip(family.labels, values))[label] for values, _ in family.samples}


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    path = tmp_path / "history.sqlite"
    return path, seed(path, NOW)


def test_run_figures_equal_runs_show_and_live_gpus_their_newest_sample(seeded: tuple[Path, dict[str, int]]) -> None:
    path, ids = seeded
    with open_db(path) as db:
        out = read_metrics(db, now=NOW)
        live, slurm = summarize(db, ids["live"]), summarize(db, ids["slurm"])
    assert value(out, "gpuplanner_history_up") == 1
    spend = value(out, "gpuplanner_run_spend_usd", run=ids["live"], host="h1", gpu_type="H100")
    assert spend == live.cost_usd and spend == pytest.approx(2 * 3.0 * (29 * 60 + 2) / 3600)
    assert value(out, "gpuplanner_run_spend_usd", run=ids["slurm"]) == slurm.cost_usd == pytest.approx(2.0)
    assert value(out, "gpuplanner_run_budget_usd", run=ids["live"]) == 50.0
    assert value(out, "gpuplanner_run_budget_left_usd", run=ids["live"]) == pytest.approx(50.0 - spend)
    assert value(out, "gpuplanner_run_live", run=ids["live"]) == 1
    assert value(out, "gpuplanner_run_live", run=ids["slurm"]) == 0
    assert value(out, "gpuplanner_run_gpu_seconds", run=ids["live"]) == pytest.approx(live.gpu_hours * 3600)
    assert value(out, "gpuplanner_run_utilization_ratio", run=ids["live"]) == pytest.approx(0.41)
    assert value(out, "gpuplanner_run_tokens_per_second", run=ids["live"]) == live.tokens_per_s
    assert value(out, "gpuplanner_run_last_tokens_per_second", run=ids["live"]) == 929.0
    assert value(out, "gpuplanner_run_queue_wait_seconds", run=ids["slurm"]) == 90.0
    kinds = {a["kind"] for a in live.alerts}
    assert kinds and label_values(out, "gpuplanner_run_alerts", "kind") == kinds
    assert value(out, "gpuplanner_run_tag_info", run=ids["live"], key="project", value="search") == 1

    assert value(out, "gpuplanner_gpu_utilization_ratio", run=ids["live"], gpu=0) == pytest.approx(0.8)
    assert value(out, "gpuplanner_gpu_utilization_ratio", run=ids["live"], gpu=1) == pytest.approx(0.02)
    assert value(out, "gpuplanner_gpu_memory_used_bytes", run=ids["live"], gpu=0) == 30 * 2**30
    assert value(out, "gpuplanner_gpu_power_watts", run=ids["live"], gpu=1) == 90.0
    assert value(out, "gpuplanner_gpu_sample_age_seconds", run=ids["live"], gpu=0) == pytest.approx(59.0)
    assert label_values(out, "gpuplanner_gpu_utilization_ratio", "run") == {str(ids["live"])}  # live runs only


def test_aggregates_equal_the_report_and_the_minute_rollups(seeded: tuple[Path, dict[str, int]]) -> None:
    path, ids = seeded
    with open_db(path) as db:
        out = read_metrics(db, now=NOW)
        by_project = {(r.group, r.month): r.cost_usd for r in spend_report(db, by="project").rows}
        old = summarize(db, ids["old"]).cost_usd
    assert old == pytest.approx(96.0)
    assert value(out, "gpuplanner_spend_by_tag_usd", key="project", value="search", month="2026-11") == pytest.approx(
        by_project[("search", "2026-11")]
    )
    assert value(out, "gpuplanner_spend_by_tag_usd", key="project", value="vision", month="2026-11") == pytest.approx(
        2.0
    )
    assert value(out, "gpuplanner_spend_by_tag_usd", key="project", value="(none)", month="2026-10") == pytest.approx(
        old
    )
    assert value(out, "gpuplanner_spend_month_usd", month="2026-10") == pytest.approx(96.0)
    assert value(out, "gpuplanner_spend_month_usd", month="2026-11") == pytest.approx(
        by_project[("search", "2026-11")] + 2.0
    )
    # utilisation from the per-minute rows: the last hour holds only the live run (80 % and 2 %)
    assert value(out, "gpuplanner_utilization_avg_ratio", host="h1", window="1h") == pytest.approx(0.41)
    assert label_values(out, "gpuplanner_utilization_avg_ratio", "window") == {"1h", "24h"}
    assert value(out, "gpuplanner_utilization_avg_ratio", host="cluster", window="24h") == pytest.approx(0.5)
    # idle GPU time per day: 30 minutes of GPU 1 under 10 %, of 2 x 30 GPU-minutes sampled
    assert value(out, "gpuplanner_idle_gpu_day_seconds", host="h1", day="2026-11-20") == 1800.0
    assert value(out, "gpuplanner_gpu_day_seconds", host="h1", day="2026-11-20") == 3600.0
    assert value(out, "gpuplanner_idle_gpu_day_seconds", host="cluster", day="2026-11-20") == 0.0
    assert label_values(out, "gpuplanner_gpu_day_seconds", "day") == {"2026-11-20"}  # the old run is 40 days back
    assert value(out, "gpuplanner_effective_gpu_month_seconds", month="2026-10") == pytest.approx(4 * 86400 * 0.9)
    assert (
        value(out, "gpuplanner_runs", status="finished") == 2 and value(out, "gpuplanner_runs", status="running") == 1
    )


def test_only_live_and_recent_runs_get_series(seeded: tuple[Path, dict[str, int]]) -> None:
    path, ids = seeded
    with open_db(path) as db:
        out = read_metrics(db, now=NOW)
        assert label_values(out, "gpuplanner_run_spend_usd", "run") == {str(ids["live"]), str(ids["slurm"])}
        later = read_metrics(db, now=NOW + 86400.0, recent_s=3600.0)  # a day on: the live run still reports
        assert label_values(later, "gpuplanner_run_spend_usd", "run") == {str(ids["live"])}


def test_every_family_is_named_and_labelled_as_declared(seeded: tuple[Path, dict[str, int]]) -> None:
    path, _ = seeded
    with open_db(path) as db:
        out = read_metrics(db, now=NOW)
    assert list(out) == list(SPECS)
    for name, family in out.items():
        assert name.startswith("gpuplanner_") and not name.endswith("_total")
        assert all(len(labels) == len(family.labels) for labels, _ in family.samples)
        assert family.samples or name in ("gpuplanner_run_billed_usd",), f"{name} has no sample"


def test_an_unreadable_history_is_up_0_with_a_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = Scraper(tmp_path / "none.sqlite")
    out = missing.scrape()
    assert out["gpuplanner_history_up"].samples == [((), 0.0)]
    assert all(not f.samples for name, f in out.items() if name != "gpuplanner_history_up")
    assert "no history database" in (missing.reason or "")
    assert not (tmp_path / "none.sqlite").exists()  # read only: never created

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    assert Scraper(garbage).scrape()["gpuplanner_history_up"].samples == [((), 0.0)]

    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    scraper = Scraper(newer)
    assert scraper.scrape()["gpuplanner_history_up"].samples == [((), 0.0)]
    assert "schema v99" in (scraper.reason or "") and "schema v99" in caplog.text


def test_a_locked_history_is_up_0_then_readable_again(seeded: tuple[Path, dict[str, int]]) -> None:
    path, _ = seeded
    scraper = Scraper(path, timeout_s=0.05)
    holder = sqlite3.connect(path)
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the file: readers get "locked"
        assert scraper.scrape()["gpuplanner_history_up"].samples == [((), 0.0)]
        assert "locked" in (scraper.reason or "")
    finally:
        holder.close()
    assert scraper.scrape()["gpuplanner_history_up"].samples == [((), 1.0)] and scraper.reason is None


def test_metrics_show_prints_the_exposition(
    seeded: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, ids = seeded
    assert main(["metrics", "show", "--db", str(path), "--recent-days", "3650"]) == 0
    text = capsys.readouterr().out
    assert "# TYPE gpuplanner_run_spend_usd gauge" in text and "gpuplanner_history_up 1.0" in text
    assert f'gpuplanner_run_spend_usd{{gpu_type="L4",host="h1",run="{ids["old"]}"}} 96.0' in text
    assert main(["metrics", "show", "--db", str(tmp_path / "missing.sqlite")]) == 1
    captured = capsys.readouterr()
    assert "gpuplanner_history_up 0.0" in captured.out and "no history database" in captured.err
    assert main(["metrics", "serve", "--port", "70000"]) == 2


def test_the_user_guide_lists_every_metric_with_its_labels() -> None:
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(gpuplanner_\w+)` \| ([^|]*) \|", text, re.MULTILINE)}
    assert set(rows) == set(SPECS)
    for name, (_, labels) in SPECS.items():
        assert rows[name].strip() == (", ".join(labels) or "-"), name
    assert set(re.findall(r"\bgpuplanner_[a-z_]*[a-z]\b", text)) <= set(SPECS)


def test_a_cached_summary_is_refreshed_when_the_launcher_bills_the_run(seeded: tuple[Path, dict[str, int]]) -> None:
    path, ids = seeded
    cache = SummaryCache()
    with open_db(path) as db:
        assert read_metrics(db, now=NOW, cache=cache)["gpuplanner_run_billed_usd"].samples == []
    launcher_event(path, ids["slurm"], NOW - 3600.0, "billed", billed_span(NOW - 3 * 3600.0, NOW - 3600.0, 1, 2.0))
    with open_db(path) as db:
        out = read_metrics(db, now=NOW, cache=cache)
    assert value(out, "gpuplanner_run_billed_usd", run=ids["slurm"]) == pytest.approx(4.0)  # 2 h billed at $2


def test_live_runs_keep_their_series_past_the_run_cap(
    seeded: tuple[Path, dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = seeded
    monkeypatch.setattr(metrics_module, "MAX_RUNS", 1)
    with open_db(path) as db:
        out = read_metrics(db, now=NOW)
    assert label_values(out, "gpuplanner_run_spend_usd", "run") == {str(ids["live"])}
