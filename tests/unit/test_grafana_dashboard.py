"""The shipped Grafana dashboard: the shape Grafana's import needs (an exported dashboard with a
``${DS_PROMETHEUS}`` input), a tidy 24-column layout, and PromQL that parses (promtool) and names only
metrics `gpuplanner metrics serve` exposes, with only the labels those metrics carry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuplanner.history.metrics import SPECS
from gpuplanner.resources import resource_path

DASHBOARD = resource_path("grafana", "gpuplanner-dashboard.json")
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
PANEL_TYPES = {"stat", "bargauge", "timeseries", "table", "barchart", "gauge"}
METRIC = re.compile(r"\bgpuplanner_[a-z_]+\b")
MATCHER = re.compile(r"(gpuplanner_[a-z_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def test_the_dashboard_has_what_grafana_import_needs() -> None:
    d = dashboard()
    assert d["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": d["__inputs"][0]["description"],
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    required = {(r["type"], r["id"]) for r in d["__requires"]}
    assert ("grafana", "grafana") in required and ("datasource", "prometheus") in required
    assert isinstance(d["title"], str) and d["title"]
    assert isinstance(d["uid"], str) and re.fullmatch(r"[A-Za-z0-9_-]{8,40}", d["uid"])
    assert d["id"] is None  # import assigns it
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 39
    assert isinstance(d["version"], int) and isinstance(d["editable"], bool)
    assert set(d["time"]) == {"from", "to"} and isinstance(d["templating"]["list"], list)
    assert isinstance(d["annotations"]["list"], list) and isinstance(d["tags"], list)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES, p["title"]
        assert isinstance(p["title"], str) and p["title"] and p["description"]
        assert p["datasource"] == DS, p["title"]
        assert isinstance(p["fieldConfig"]["defaults"], dict) and isinstance(p["fieldConfig"]["overrides"], list)
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS and isinstance(t["expr"], str) and t["expr"].strip()
        if p["type"] == "barchart":
            fields = {
                label for e in (t["expr"] for t in p["targets"]) for g in GROUPING.findall(e) for label in g.split(",")
            }
            assert p["options"]["xField"] in {f.strip() for f in fields}, p["title"]


def test_panels_tile_the_24_column_grid_without_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and g[k] >= 0 for k in "hwxy") and g["w"] > 0 and g["h"] > 0
        assert g["x"] + g["w"] <= 24, p["title"]
        cells = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells


def test_the_kpi_panels_are_there() -> None:
    text = " ".join(expressions())
    for metric in (
        "gpuplanner_utilization_avg_ratio",
        "gpuplanner_idle_gpu_day_seconds",
        "gpuplanner_run_queue_wait_seconds",
        "gpuplanner_spend_by_tag_usd",
        "gpuplanner_run_spend_usd",
        "gpuplanner_run_budget_usd",
        "gpuplanner_run_last_tokens_per_second",
        "gpuplanner_run_alerts",
    ):
        assert metric in text, metric
    windows = {w for e in expressions() for w in re.findall(r'window="(\w+)"', e)}
    assert windows == {"1h", "24h"}


def test_every_expression_names_exposed_metrics_and_their_labels() -> None:
    for expr in expressions():
        names = METRIC.findall(expr)
        assert names, expr
        for name in names:
            assert name in SPECS, f"{name} in {expr!r} is not exposed"
        known = {label for name in names for label in SPECS[name][1]}
        for name, matchers in MATCHER.findall(expr):
            for label in re.findall(r"(\w+)\s*=~?", matchers):
                assert label in SPECS[name][1], f"{name} has no label {label}"
        for group in GROUPING.findall(expr):
            for label in (x.strip() for x in group.split(",")):
                assert label in known, f"{label} in {expr!r} is not a label of {names}"


def test_every_expression_is_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("needs promtool from Debian's prometheus package: tools/ensure_system_packages.sh --for test")
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(expressions())]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(expressions())} rules found" in done.stdout
