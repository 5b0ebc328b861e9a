"""`gpuplanner metrics`: the history as a Prometheus endpoint (serve) or one exposition printed (show).

The figures come from :mod:`gpuplanner.history.metrics`, read from the history (read only) on every
scrape; this module only turns them into ``prometheus_client`` metric families and serves them.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.history import metrics as metrics_module
from gpuplanner.history.db import resolve_db_path
from gpuplanner.history.metrics import RECENT_S, Scraper

DEFAULT_PORT = 9877
DEFAULT_HOST = "127.0.0.1"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics",
        help="the history as Prometheus metrics: live runs, spend, utilisation, idle GPU time, queue wait",
        description=__doc__.splitlines()[0],
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    parser.set_defaults(handler=_no_action)

    p = actions.add_parser("serve", help="serve /metrics for Prometheus until stopped (Ctrl+C or SIGTERM)")
    _common_flags(p)
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; 0.0.0.0 for every interface: the history's figures"
        " are then readable by anyone who can reach the port)",
    )
    p.set_defaults(handler=_serve)

    p = actions.add_parser("show", help="print the metrics once, in Prometheus' text format")
    _common_flags(p)
    p.set_defaults(handler=_show)


def _common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
    p.add_argument(
        "--recent-days",
        type=_days,
        default=RECENT_S / 86400.0,
        help="per-run series for live runs and runs that ended within this many days (default 7)",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a TCP port 0-65535, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port 0-65535, not {text!r}")
    return value


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 36500:
        raise argparse.ArgumentTypeError(f"a number of days, 0 or more, not {text!r}")
    return value


def _no_action(args: argparse.Namespace) -> int:
    raise UsageError("ACTION: one of serve, show")


class HistoryCollector:
    """A ``prometheus_client`` collector that reads the history on each scrape (one scrape at a time)."""

    def __init__(self, scraper: Scraper) -> None:
        self.scraper = scraper
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            families = self.scraper.scrape()
        for family in families.values():
            gauge = GaugeMetricFamily(family.name, family.help, labels=family.labels)
            for labels, value in family.samples:
                gauge.add_metric(labels, value)
            yield gauge

    def describe(self) -> list[Any]:
        return []  # registering must not read the history


def _registry(args: argparse.Namespace) -> tuple[Any, Scraper]:
    """A registry holding only the history's collector (no process or platform metrics), and its scraper."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        raise UsageError(
            "the prometheus-client package is missing: pip install prometheus-client (it ships with gpuplanner)"
        ) from None
    scraper = Scraper(resolve_db_path(args.db), recent_s=args.recent_days * 86400.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HistoryCollector(scraper))
    return registry, scraper


def _log_to_stderr() -> None:
    """The collector's reasons (an unreadable history) on stderr, once per change."""
    logger = logging.getLogger(metrics_module.__name__)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (not the stream of when it was made)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"gpuplanner metrics: {record.getMessage()}", file=sys.stderr, flush=True)


def _show(args: argparse.Namespace) -> int:
    _log_to_stderr()
    from prometheus_client import generate_latest

    registry, scraper = _registry(args)
    sys.stdout.write(generate_latest(registry).decode())
    return 0 if scraper.reason is None else 1


def _serve(args: argparse.Namespace) -> int:
    _log_to_stderr()
    registry, _ = _registry(args)
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(args.port, addr=args.host, registry=registry)
    except OSError as exc:
        print(
            f"gpuplanner metrics: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    address, port = server.server_address[:2]
    host = address.decode() if isinstance(address, bytes) else address
    print(f"serving http://{host}:{port}/metrics from {resolve_db_path(args.db)}", flush=True)
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return 0
