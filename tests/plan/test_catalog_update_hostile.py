"""`catalog update` against hostile catalogs and servers (issue 27 item 3): a price that rounds to $0, a
Last-Modified in the year 9999 or with an odd offset, a server that drips its file, a file cut inside its last
cell without a Content-Length, and two updates of different clouds at once."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuplanner.catalog_fetch import FetchError, _http_date, fetch_cloud
from gpuplanner.plan import catalog_update
from gpuplanner.plan.catalog import builtin_catalog, cached_prices_path, load_catalog, parse_prices
from gpuplanner.plan.catalog_update import FetchedCatalog, apply_update, read_state
from tests.plan.test_catalog_update import GOOD_AWS, GOOD_LAMBDA, CatalogServer, update


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    s = CatalogServer()
    try:
        yield s
    finally:
        s.close()


def test_a_price_that_rounds_to_zero_is_skipped_and_every_other_price_stays_usable(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("lambda", GOOD_LAMBDA, days_old=2)
    assert update(server, monkeypatch, capsys, "lambda")[0] == 0
    # $0.0000004 for an 8-GPU instance: $5e-8 per GPU-hour, positive but $0.000000 at the cache's precision.
    tiny = GOOD_AWS + "p4d.24xlarge,A100,8.0,96.0,1152.0,,0.0000004,,us-east-1,us-east-1a\n"
    server.put("aws", tiny, days_old=1)
    code, out, err = update(server, monkeypatch, capsys, "aws", json_out=True)
    assert code == 0, (out, err)
    # The cache reads back whole: the AWS rows that have a real price and lambda's cached one are planned with.
    offers = parse_prices(cached_prices_path(), builtin_catalog())
    assert all(o.on_demand_usd > 0 for o in offers)
    fetched = {(o.provider, o.instance_type) for o in load_catalog().offers if o.source.startswith("SkyPilot")}
    assert {("aws", "g4dn.xlarge"), ("aws", "p5.48xlarge"), ("lambda", "gpu_1x_a10")} <= fetched
    assert ("aws", "p4d.24xlarge") not in fetched
    # A later update of one cloud keeps the other's prices.
    server.put("lambda", GOOD_LAMBDA.replace("0.75", "0.80"), days_old=0)
    assert update(server, monkeypatch, capsys, "lambda")[0] == 0
    providers = {o.provider for o in parse_prices(cached_prices_path(), builtin_catalog())}
    assert providers == {"aws", "lambda"}


def test_a_cache_that_would_not_read_back_is_never_written(
    server: CatalogServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server.put("aws", GOOD_AWS, days_old=3)
    assert update(server, monkeypatch, capsys, "aws")[0] == 0
    before = cached_prices_path().read_bytes()
    real = catalog_update.offers_to_csv
    monkeypatch.setattr(catalog_update, "offers_to_csv", lambda offers: real(offers).replace("0.7,", "0,", 1))
    server.put("aws", GOOD_AWS, days_old=1)
    code, out, _ = update(server, monkeypatch, capsys, "aws")
    assert code == 1
    assert "the new cache would not read back" in out and "nothing was written" in out
    assert cached_prices_path().read_bytes() == before


@pytest.mark.parametrize(
    "header",
    [
        "Fri, 31 Dec 9999 23:59:59 GMT",  # the far future: it would freeze the prices
        "Mon, 01 Jan 2024 00:00:00 +9999",  # an offset no zone has
        "Fri, 31 Dec 9999 23:00:00 -0500",  # an offset that carries the date past year 9999
        "Mon, 01 Jan 2024 00:00:00 -99999999",
        "Tue, 99 Foo 2024 99:99:99 GMT",
        "\x00garbage",
    ],
)
def test_a_last_modified_in_the_future_or_malformed_is_not_the_catalog_date(header: str) -> None:
    assert _http_date(header) is None


def test_last_modified_dates_in_range_are_kept() -> None:
    assert _http_date("Mon, 01 Jan 2024 23:00:00 -0500") == "2024-01-02"
    today = dt.datetime.now(dt.UTC).date()
    assert _http_date(today.strftime("%a, %d %b %Y 10:00:00 GMT")) == today.isoformat()


class _OddServer:
    """One file served with a raw Last-Modified header, or without a Content-Length, or dripped a byte at a
    time for ever."""

    def __init__(self, body: bytes, *, last_modified: str | None = None, length: bool = True, drip: bool = False):
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                if length:
                    self.send_header("Content-Length", str(len(body) * (1000 if drip else 1)))
                if last_modified is not None:
                    self.send_header("Last-Modified", last_modified)
                self.send_header("Connection", "close")
                self.end_headers()
                if not drip:
                    self.wfile.write(body)
                    return
                while not served.stop.is_set():
                    try:
                        self.wfile.write(body[:1])
                        self.wfile.flush()
                    except OSError:
                        return
                    served.stop.wait(0.02)

            def log_message(self, *args: object) -> None:
                pass

        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/catalogs/v7"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_unusual_offset_gives_the_download_date_not_a_traceback() -> None:
    odd = _OddServer(GOOD_AWS.encode(), last_modified="Fri, 31 Dec 9999 23:00:00 -0500")
    try:
        fetched = fetch_cloud(odd.base, "aws", timeout=5)
    finally:
        odd.close()
    assert fetched.as_of == dt.date.today().isoformat()
    assert fetched.date_basis.startswith("download date")


def test_the_timeout_bounds_the_whole_download_not_each_read() -> None:
    odd = _OddServer(b"I", drip=True)  # a byte every 20 ms, never done: each read is fast, the whole never ends
    try:
        # it gives up (a per-read timeout would wait for ever, and the test's own timeout would fail it)
        with pytest.raises(FetchError, match="took longer than 0.5 s"):
            fetch_cloud(odd.base, "aws", timeout=0.5)
    finally:
        odd.close()


def test_a_file_cut_inside_its_last_cell_without_a_length_is_rejected(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = GOOD_AWS[: GOOD_AWS.index("0.22,us-east-1,us-east-1b") + len("0.22,us-east-1,us-east-1b")] + "\n"
    cut += "p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,24.0,us-west-2,us-we"  # no line end: cut mid-cell
    odd = _OddServer(cut.encode(), length=False)
    try:
        code, out, _ = update(odd, monkeypatch, capsys, "aws")  # type: ignore[arg-type]
    finally:
        odd.close()
    assert code == 1
    assert "the last row has no line end: the file is cut short" in out
    assert not cached_prices_path().exists()


def test_two_updates_of_different_clouds_at_once_keep_both(monkeypatch: pytest.MonkeyPatch) -> None:
    today = dt.date.today().isoformat()
    aws = FetchedCatalog("aws", "http://127.0.0.1/aws/vms.csv", GOOD_AWS, today, "Last-Modified header")
    lam = FetchedCatalog("lambda", "http://127.0.0.1/lambda/vms.csv", GOOD_LAMBDA, today, "Last-Modified header")
    # Both updates read the cache, then wait for each other before writing (the lost-update race, held open
    # on purpose); with the update lock the second cannot read before the first has written, so its wait
    # ends at the timeout and it reads what the first wrote.
    both_read = threading.Barrier(2, timeout=1.0)
    real_read = catalog_update.read_cached_offers

    def read_then_wait(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        offers = real_read(*args, **kwargs)  # type: ignore[arg-type]
        try:
            both_read.wait()
        except threading.BrokenBarrierError:
            pass
        return offers

    monkeypatch.setattr(catalog_update, "read_cached_offers", read_then_wait)
    errors: list[BaseException] = []

    def run(item: FetchedCatalog) -> None:
        try:
            apply_update([item])
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(item,)) for item in (aws, lam)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    providers = {o.provider for o in parse_prices(cached_prices_path(), builtin_catalog())}
    assert providers == {"aws", "lambda"}
    assert set(read_state()) == {"aws", "lambda"}
