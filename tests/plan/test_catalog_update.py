"""`gpuplanner catalog update` against a catalog server on 127.0.0.1: good, stale, malformed, partial, offline."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.catalog_fetch import commit_date, fetch_cloud, github_commits_url
from gpuplanner.paths import cache_dir, config_dir
from gpuplanner.plan.catalog import PRICE_COLUMNS, builtin_catalog, cached_prices_path, load_catalog, merge_newer
from gpuplanner.plan.catalog_update import (
    DEFAULT_BASE_URL,
    SPOT_ADVISOR_URL,
    STATE_FILE,
    base_url,
    read_state,
    spot_advisor_url,
)

HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n"
)
H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 81920}}]}\""
GOOD_AWS = (
    HEADER
    + "m6i.large,,,2.0,8.0,,0.096,0.035,us-east-1,us-east-1a\n"
    # shipped: $0.526 on demand, $0.21 spot -> on demand +33%, spot (cheapest zone 0.22) +4.8%: not reported
    + "g4dn.xlarge,T4,1.0,4.0,16.0,,0.70,0.25,us-east-1,us-east-1a\n"
    + "g4dn.xlarge,T4,1.0,4.0,16.0,,0.70,0.22,us-east-1,us-east-1b\n"
    # not in the shipped snapshot: a new offer
    + f"p5.48xlarge,H100,8.0,192.0,2048.0,{H100_INFO},55.04,24.0,us-west-2,us-west-2a\n"
)
GOOD_LAMBDA = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    "gpu_1x_a10,A10,1.0,30.0,200.0,0.75,us-west-1,,\n"  # shipped 0.75: unchanged
)


class CatalogServer:
    """Serves ``files[path] = (body, last_modified or None, declared length or None)``; 404 otherwise."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, dt.datetime | None, int | None]] = {}
        files = self.files

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                entry = files.get(urllib.parse.urlsplit(self.path).path)
                if entry is None:
                    self.send_error(404, "Not Found")
                    return
                body, modified, declared = entry
                self.send_response(200)
                self.send_header("Content-Type", "text/csv")
                self.send_header("Content-Length", str(declared if declared is not None else len(body)))
                if modified is not None:
                    self.send_header("Last-Modified", email.utils.format_datetime(modified, usegmt=True))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/catalogs/v7"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def put(self, cloud: str, text: str, days_old: int | None = 3, declared: int | None = None) -> None:
        modified = None
        if days_old is not None:
            modified = dt.datetime.now(dt.UTC).replace(hour=12, minute=0, second=0, microsecond=0) - dt.timedelta(
                days=days_old
            )
        self.files[f"/catalogs/v7/{cloud}/vms.csv"] = (text.encode(), modified, declared)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    s = CatalogServer()
    try:
        yield s
    finally:
        s.close()


def run_cli(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def days_ago(days: int) -> str:
    return (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days)).isoformat()


def update(server: CatalogServer, monkeypatch, capsys, *clouds: str, json_out: bool = False):  # type: ignore[no-untyped-def]
    argv = ["catalog", "update", "--url", server.base, "--timeout", "5"]
    for cloud in clouds:
        argv += ["--cloud", cloud]
    if json_out:
        argv.append("--json")
    return run_cli(argv, monkeypatch, capsys)


def aws_t4(catalog):  # type: ignore[no-untyped-def]
    return next(o for o in catalog.offers if o.provider == "aws" and o.instance_type == "g4dn.xlarge")


def test_a_good_update_keeps_the_catalog_date_and_reports_changes(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("aws", GOOD_AWS, days_old=3)
    server.put("lambda", GOOD_LAMBDA, days_old=10)
    code, out, err = update(server, monkeypatch, capsys, "aws", "lambda", json_out=True)
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and report["written"]
    clouds = {c["cloud"]: c for c in report["clouds"]}
    assert clouds["aws"]["status"] == "updated" and clouds["aws"]["as_of"] == days_ago(3)
    assert clouds["aws"]["date_basis"] == "Last-Modified header" and clouds["aws"]["offers"] == 2
    assert clouds["lambda"]["as_of"] == days_ago(10) and clouds["lambda"]["stale_days"] is None
    # New: the H100 instance in us-west-2 (and the lambda A10 only if the shipped snapshot lacks it).
    new = {(o["provider"], o["region"], o["instance_type"]) for o in report["new_offers"]}
    assert ("aws", "us-west-2", "p5.48xlarge") in new
    h100 = next(o for o in report["new_offers"] if o["instance_type"] == "p5.48xlarge")
    assert h100["gpu"] == "H100 SXM" and h100["gpu_count"] == 8 and h100["on_demand_usd_per_gpu_hour"] == 6.88
    changes = report["price_changes"]
    assert [
        (c["instance_type"], c["pricing"], c["old_usd_per_gpu_hour"], c["new_usd_per_gpu_hour"]) for c in changes
    ] == [("g4dn.xlarge", "on-demand", 0.526, 0.7)]
    assert changes[0]["change_pct"] == 33.1

    # The planner now sees the fetched prices, dated by the catalog, with the shipped interruption rate.
    t4 = aws_t4(load_catalog())
    assert (t4.on_demand_usd, t4.spot_usd, t4.as_of) == (0.7, 0.22, days_ago(3))
    assert server.base in t4.source and "Last-Modified" in t4.source
    assert t4.interruptions_per_hour == 0.02 and t4.interruptions_basis == "assumed (shipped snapshot 2025-06-15)"
    state = read_state()
    assert state["aws"]["as_of"] == days_ago(3) and state["lambda"]["offers"] == 1
    assert cached_prices_path() == cache_dir() / "catalog" / "prices.csv"

    # The text report of the same update: one line per cloud, the change, where the cache is.
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 0
    assert (
        out.splitlines()[0] == f"aws: prices as of {days_ago(3)} (3 days old) (from the Last-Modified header), 2 offers"
    )
    assert "price changes above 10%: 0" in out  # the second run changes nothing


def test_user_overrides_always_win(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prices.csv").write_text(
        ",".join(PRICE_COLUMNS) + "\naws,us-east-1,T4,1,g4dn.xlarge,0.30,,,,2024-01-01,my contract,\n"
    )
    server.put("aws", GOOD_AWS, days_old=1)
    code, _, err = update(server, monkeypatch, capsys, "aws")
    assert code == 0, err
    t4 = aws_t4(load_catalog())
    assert t4.on_demand_usd == 0.30 and t4.source == "my contract"  # older, but the user's: it wins


def test_a_stale_catalog_is_flagged_and_an_older_one_never_replaces_the_cache(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("aws", GOOD_AWS, days_old=200)
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 0
    assert f"aws: prices as of {days_ago(200)} (200 days old)" in out and "STALE: older than 90 days" in out
    assert aws_t4(load_catalog()).as_of == days_ago(200)

    server.put("aws", GOOD_AWS.replace("0.70", "0.90"), days_old=300)
    before = cached_prices_path().read_bytes()
    code, out, _ = update(server, monkeypatch, capsys, "aws", json_out=True)
    aws = json.loads(out)["clouds"][0]
    assert code == 0 and aws["status"] == "kept-newer-cache"
    assert days_ago(200) in aws["message"] and days_ago(300) in aws["message"]
    assert cached_prices_path().read_bytes() == before


def test_shipped_prices_newer_than_the_cache_are_kept() -> None:
    shipped = builtin_catalog().offers
    old = next(o for o in shipped if o.provider == "aws" and o.instance_type == "g4dn.xlarge")
    older = type(old)(**{**old.__dict__, "on_demand_usd": 9.0, "as_of": "2020-01-01"})
    merged = {o.key: o for o in merge_newer(shipped, [older])}
    assert merged[old.key].on_demand_usd == old.on_demand_usd


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        # (a malformed row inside a whole file is skipped and counted, not fatal since issue 31: see
        # test_a_malformed_row_is_skipped_and_counted_and_the_rest_updates)
        # cut short: the last row stops mid-way (a partial download without a length)
        (GOOD_AWS[: GOOD_AWS.rindex("55.04")], 5, "the file is cut short or malformed"),
        # not a vms.csv at all
        ("<html>rate limited</html>\n", 1, "does not look like a SkyPilot vms.csv"),
        # a header and nothing else
        (HEADER, None, "no rows"),
    ],
)
def test_a_malformed_or_partial_file_is_rejected_whole_and_the_cache_stays(
    text: str,
    line: int | None,
    words: str,
    server: CatalogServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.put("aws", GOOD_AWS, days_old=5)
    assert update(server, monkeypatch, capsys, "aws")[0] == 0
    before = cached_prices_path().read_bytes()
    state_before = (cached_prices_path().parent / STATE_FILE).read_bytes()

    server.put("aws", text, days_old=1)
    code, out, err = update(server, monkeypatch, capsys, "aws")
    assert code == 1 and err == ""
    url = f"{server.base}/aws/vms.csv"
    assert out.splitlines()[0].startswith(f"aws: rejected: rejected whole: {url}")
    if line is not None:
        assert f"{url}, line {line}" in out
    assert words in out and f"the cache keeps its prices from {days_ago(5)}" in out
    assert "nothing changed" in out
    assert cached_prices_path().read_bytes() == before
    assert (cached_prices_path().parent / STATE_FILE).read_bytes() == state_before
    assert aws_t4(load_catalog()).as_of == days_ago(5)


def test_a_download_cut_short_is_rejected(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("aws", GOOD_AWS, days_old=1, declared=len(GOOD_AWS.encode()) + 500)
    server.put("lambda", GOOD_LAMBDA, days_old=1)
    code, out, _ = update(server, monkeypatch, capsys, "aws", "lambda", "nosuchcloud")
    assert code == 1
    lines = {line.split(":")[0]: line for line in out.splitlines() if ":" in line}
    assert "cut short" in lines["aws"] and lines["aws"].startswith("aws: failed: ")
    assert lines["nosuchcloud"].endswith("HTTP 404 Not Found")
    assert lines["lambda"].startswith(f"lambda: prices as of {days_ago(1)}")
    # The clouds that worked are cached; the others have nothing (there was no previous cache).
    assert {o.provider for o in load_catalog().offers if o.source.startswith("SkyPilot catalog")} == {"lambda"}


def test_offline_says_so_in_one_line_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("GPUPLANNER_CATALOG_URL", f"http://127.0.0.1:{port}/catalogs")
    code, out, err = run_cli(["catalog", "update", "--timeout", "5"], monkeypatch, capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpuplanner catalog update: offline: cannot reach 127.0.0.1:")
    assert err.rstrip().endswith("the price catalog is unchanged")
    assert not cached_prices_path().parent.exists()


def test_bad_flags_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["catalog", "update", "--url", "file:///etc"], monkeypatch, capsys)
    assert code == 2 and "--url: an http:// or https:// address" in err
    code, _, err = run_cli(["catalog", "update", "--cloud", "own"], monkeypatch, capsys)
    assert code == 2 and "--cloud:" in err


def test_base_url_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPLANNER_CATALOG_URL", raising=False)
    assert base_url() == "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v7"
    monkeypatch.setenv("GPUPLANNER_CATALOG_URL", "http://mirror.example/c/")
    assert base_url() == "http://mirror.example/c" and base_url("http://x/y") == "http://x/y"


def test_the_date_of_a_file_on_github_is_its_last_commit(server: CatalogServer) -> None:
    raw = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v7/aws/vms.csv"
    api = server.base.rsplit("/catalogs", 1)[0]
    query = github_commits_url(raw, api)
    assert query == (
        f"{api}/repos/skypilot-org/skypilot-catalog/commits?path=catalogs%2Fv7%2Faws%2Fvms.csv&sha=master&per_page=1"
    )
    assert github_commits_url("http://127.0.0.1/x/aws/vms.csv") is None
    answer = [{"sha": "abc", "commit": {"committer": {"date": "2026-11-20T06:12:00Z"}}}]
    server.files["/repos/skypilot-org/skypilot-catalog/commits"] = (json.dumps(answer).encode(), None, None)
    assert commit_date(query, 5) == "2026-11-20"
    server.files["/repos/skypilot-org/skypilot-catalog/commits"] = (b"[]", None, None)
    assert commit_date(query, 5) is None


def test_without_a_date_the_download_day_is_used_and_said(server: CatalogServer) -> None:
    server.put("aws", GOOD_AWS, days_old=None)
    fetched = fetch_cloud(server.base, "aws", timeout=5)
    assert fetched.as_of == dt.date.today().isoformat()
    assert fetched.date_basis == "download date (the catalog gave none)"


def test_a_broken_cache_never_blocks_planning() -> None:
    path = cached_prices_path()
    path.parent.mkdir(parents=True)
    path.write_text("this is not, a price file\n")
    assert load_catalog().offers  # the shipped snapshot still answers
    assert Path(path).exists()


ADVISOR = {
    "ranges": [
        {"index": 0, "label": "<5%", "dots": 0, "max": 5},
        {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
        {"index": 2, "label": "10-15%", "dots": 2, "max": 16},
        {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
        {"index": 4, "label": ">20%", "dots": 4, "max": 100},
    ],
    "spot_advisor": {
        "us-east-1": {"Linux": {"g4dn.xlarge": {"s": 70, "r": 3}}, "Windows": {"g4dn.xlarge": {"s": 50, "r": 0}}},
        "us-west-2": {"Linux": {"p5.48xlarge": {"s": 57, "r": 4}}},
    },
}


def test_aws_spot_rates_come_from_the_spot_instance_advisor(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("aws", GOOD_AWS, days_old=2)
    modified = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    server.files["/catalogs/v7/aws/spot-advisor-data.json"] = (json.dumps(ADVISOR).encode(), modified, None)
    code, out, err = update(server, monkeypatch, capsys, "aws", json_out=True)
    assert code == 0, err
    info = json.loads(out)["spot_advisor"]
    assert info["status"] == "used" and info["as_of"] == days_ago(1)
    offers = {o.instance_type: o for o in load_catalog().offers if o.provider == "aws" and o.as_of == days_ago(2)}
    hours_per_month = 365.25 * 24 / 12
    # 15-20% of instances reclaimed a month, taken at its upper bound (22% in AWS's ranges), as an hourly hazard.
    t4 = offers["g4dn.xlarge"]
    assert t4.interruptions_per_hour == pytest.approx(-math.log(1 - 0.22) / hours_per_month, abs=1e-6)
    assert t4.interruptions_basis == (
        f"AWS Spot Instance Advisor {days_ago(1)}: 15-20% of instances reclaimed per month in us-east-1, taken as 22%"
    )
    # The open-ended top band is taken as 40% a month.
    p5 = offers["p5.48xlarge"]
    assert p5.interruptions_per_hour == pytest.approx(-math.log(0.6) / hours_per_month, abs=1e-6)

    # A broken advisor file never stops the update: the shipped rate stays, and the report says why.
    server.files["/catalogs/v7/aws/spot-advisor-data.json"] = (b'{"ranges": "x"}', modified, None)
    server.put("aws", GOOD_AWS, days_old=1)
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 0
    assert "aws spot interruptions: the Spot Instance Advisor file was rejected" in out
    assert aws_t4(load_catalog()).interruptions_basis == "assumed (shipped snapshot 2025-06-15)"


def test_spot_advisor_url_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPLANNER_SPOT_ADVISOR_URL", raising=False)
    assert spot_advisor_url(None, DEFAULT_BASE_URL) == SPOT_ADVISOR_URL
    assert spot_advisor_url(None, "http://mirror/c") == "http://mirror/c/aws/spot-advisor-data.json"
    assert spot_advisor_url("http://x/a.json", DEFAULT_BASE_URL) == "http://x/a.json"
    monkeypatch.setenv("GPUPLANNER_SPOT_ADVISOR_URL", "http://env/a.json")
    assert spot_advisor_url(None, DEFAULT_BASE_URL) == "http://env/a.json"


def test_a_malformed_row_is_skipped_and_counted_and_the_rest_updates(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Azure's catalog was once rejected whole for one bad CPU row; now the row is skipped, counted and named.
    text = GOOD_AWS.replace("m6i.large,,,2.0,8.0,,0.096,0.035,", "m6i.large,,,2.0,8.0,,abc,0.035,").replace(
        "0.70,0.22", "0.70,-0.22"
    )
    server.put("aws", text, days_old=2)
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 0, out
    assert "aws: skipped 2 malformed rows and 0 GPU-only rows" in out
    assert "line 2: malformed row skipped: Price must be a positive number of dollars, got 'abc'" in out
    assert "line 4: malformed row skipped: SpotPrice must be a positive number of dollars, got '-0.22'" in out
    t4 = aws_t4(load_catalog())
    assert t4.as_of == days_ago(2)
    assert t4.spot_usd == 0.25  # the us-east-1b row (spot 0.22, but malformed) counts for nothing
    code, out, _ = update(server, monkeypatch, capsys, "aws", json_out=True)
    aws = json.loads(out)["clouds"][0]
    assert aws["malformed_rows"] == 2 and aws["gpu_only"] == 0


def test_a_mirror_dated_with_as_of_prices_as_given_and_replace_corrects_a_wrong_newer_date(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mirror serves the file with today's Last-Modified: dated so, and said so.
    server.put("aws", GOOD_AWS, days_old=0)
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 0 and f"aws: prices as of {days_ago(0)} (today)" in out
    assert "dated by the server's Last-Modified header, not by the catalog" in out
    assert aws_t4(load_catalog()).as_of == days_ago(0)

    # The correct, older date is refused without --replace ...
    argv = ["catalog", "update", "--url", server.base, "--timeout", "5", "--cloud", "aws", "--as-of", days_ago(40)]
    code, out, _ = run_cli(argv, monkeypatch, capsys)
    assert code == 0 and "kept, the cache holds prices from" in out and "--replace" in out
    assert aws_t4(load_catalog()).as_of == days_ago(0)

    # ... and replaces the wrong newer one with it.
    code, out, _ = run_cli([*argv, "--replace"], monkeypatch, capsys)
    assert code == 0, out
    assert f"aws: prices as of {days_ago(40)} (40 days old) (from the date given with --as-of)" in out
    assert f"replaced the cache's prices dated {days_ago(0)} (--replace)" in out
    assert "Last-Modified" not in out
    t4 = aws_t4(load_catalog())
    assert t4.as_of == days_ago(40) and t4.on_demand_usd == 0.70
    assert read_state()["aws"]["as_of"] == days_ago(40)

    code, _, err = run_cli([*argv[:-1], "2026-13-01"], monkeypatch, capsys)
    assert code == 2 and "--as-of: an ISO date" in err


def test_as_of_dates_a_served_file_before_its_last_modified(server: CatalogServer) -> None:
    from gpuplanner.catalog_fetch import fetch_dated

    api = server.base.rsplit("/catalogs", 1)[0]
    server.put("aws", GOOD_AWS, days_old=0)
    _, as_of, basis = fetch_dated(f"{server.base}/aws/vms.csv", timeout=5, api_base=api, as_of="2026-10-01")
    assert (as_of, basis) == ("2026-10-01", "date given with --as-of")
    _, as_of, basis = fetch_dated(f"{server.base}/aws/vms.csv", timeout=5, api_base=api)
    assert (as_of, basis) == (days_ago(0), "Last-Modified header")
