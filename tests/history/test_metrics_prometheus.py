"""A real Prometheus server (Debian's `prometheus` package) scrapes `gpuplanner metrics serve` on loopback,
and its PromQL answers equal what `runs show --json` and `runs report --json` say."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.history.metrics_seed import seed

pytestmark = pytest.mark.slow
DEADLINE_S = 90.0  # a ceiling on waiting for a state, never a wait of its own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _cli(*argv: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "gpuplanner", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, int]]]:
    """`gpuplanner metrics serve --port 0` on a seeded history: (its host:port, the history, the run ids)."""
    tmp_path = tmp_path_factory.mktemp("exporter")
    db_path = tmp_path / "history.sqlite"
    ids = seed(db_path, time.time())
    errors = tmp_path / "exporter.err"
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplanner", "metrics", "serve", "--port", "0", "--db", str(db_path)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            # a module's fixture starts before the per-test private folders: give the server its own
            env={
                **os.environ,
                "GPUPLANNER_DATA_DIR": str(tmp_path / "data"),
                "GPUPLANNER_CONFIG_DIR": str(tmp_path / "config"),
            },
        )
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # the server prints this line once it listens
        assert line.startswith("serving http://127.0.0.1:"), (line, errors.read_text())
        yield line.split("http://", 1)[1].split("/", 1)[0], db_path, ids
    finally:
        _stop(proc)
        assert "Traceback" not in errors.read_text(), errors.read_text()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, exporter: tuple[str, Path, dict[str, int]]) -> Iterator[str]:
    """Our own Prometheus process scraping the exporter every second; its API base URL."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("this test needs Debian's prometheus package: tools/ensure_system_packages.sh --for test")
    target = exporter[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: gpuplanner\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # until the target has been scraped successfully once
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                targets = _get(f"{api}/targets")["data"]["activeTargets"]
            except (urllib.error.URLError, ConnectionError):
                targets = []
            if any(t["health"] == "up" and t["scrapeUrl"].startswith(f"http://{target}/") for t in targets):
                break
            time.sleep(0.2)
        yield api
    finally:
        _stop(proc)
        log.close()


def _query(api: str, promql: str) -> list[dict[str, Any]]:
    """The PromQL answer's samples, once the newest scrape is in (polled; an empty answer is retried)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = _get(f"{api}/query?" + urllib.parse.urlencode({"query": promql}))
        assert answer["status"] == "success", answer
        if answer["data"]["result"] or time.monotonic() > deadline:
            return answer["data"]["result"]
        time.sleep(0.2)


def _one(api: str, promql: str) -> float:
    result = _query(api, promql)
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def test_prometheus_scrapes_spend_utilisation_and_spend_by_tag(
    exporter: tuple[str, Path, dict[str, int]], prometheus: str
) -> None:
    _, db_path, ids = exporter
    api = prometheus
    assert _one(api, 'up{job="gpuplanner"}') == 1
    assert _one(api, "gpuplanner_history_up") == 1
    for role in ("live", "slurm"):
        shown = _cli("runs", "show", str(ids[role]), "--json", "--db", str(db_path))
        assert _one(api, f'gpuplanner_run_spend_usd{{run="{ids[role]}"}}') == pytest.approx(
            shown["cost_usd"], rel=1e-12
        )
    assert _one(api, f'gpuplanner_gpu_utilization_ratio{{run="{ids["live"]}",gpu="0"}}') == pytest.approx(0.8)
    assert _one(api, f'gpuplanner_run_budget_left_usd{{run="{ids["live"]}"}}') == pytest.approx(
        50.0 - _cli("runs", "show", str(ids["live"]), "--json", "--db", str(db_path))["cost_usd"]
    )
    report = _cli("runs", "report", "--by", "project", "--json", "--db", str(db_path))
    expected: dict[str, float] = {}
    for row in report["rows"]:
        value = row["group"] if row["group"] is not None else "(none)"
        expected[value] = expected.get(value, 0.0) + row["cost_usd"]
    answer = _query(api, 'sum by (value) (gpuplanner_spend_by_tag_usd{key="project"})')
    assert {r["metric"]["value"]: pytest.approx(float(r["value"][1]), abs=1e-6) for r in answer} == expected
    assert _one(api, 'sum(gpuplanner_idle_gpu_day_seconds{host="h1"})') == 1800.0  # GPU 1, 30 minutes idle


def test_every_dashboard_panel_gets_data_from_prometheus(
    exporter: tuple[str, Path, dict[str, int]], prometheus: str
) -> None:
    from tests.unit.test_grafana_dashboard import dashboard

    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            assert _query(prometheus, target["expr"]), f"panel {panel['title']!r}: no data for {target['expr']!r}"
