"""`gpuplanner runs alerts` and the alert flags of `runs show`, end to end on a real events file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.alerts import stored_alerts
from tests.history.streams import StreamBuilder
from tests.history.test_alerts import _start, _steps


@pytest.fixture(autouse=True)
def _only_runs_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.runs",))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def starved_run(tmp_path: Path) -> Path:
    """A GPU alternating 0% and 80% for 90 minutes, its steps waiting 30% of their time for data."""
    s = StreamBuilder()
    _start(s)
    for i in range(90 * 4):
        s.gpu(i * 15.0, 0, 0.0 if i % 2 == 0 else 80.0)
    _steps(s, 90, step_time=1.0, wait=0.3)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(s.data())
    return folder


def test_runs_alerts_prints_stores_and_takes_the_settings(
    capsys: pytest.CaptureFixture[str], starved_run: Path
) -> None:
    code, _, _ = run(capsys, "runs", "import", str(starved_run), "--price", "2.5", "--gpu-type", "H100 SXM")
    assert code == 0
    code, out, _ = run(capsys, "runs", "alerts", "1", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["low_util_pct"] == 50 and doc["settings"]["low_util_minutes"] == 60
    assert [a["kind"] for a in doc["alerts"]] == ["low_util", "input_bound"]
    assert doc["alerts"][1]["diagnosis"]["cause"] == "input_pipeline"
    assert doc["alerts"][1]["diagnosis"]["saving_usd"] == pytest.approx((10_000 - 90) * 0.3 / 3600 * 2.5)
    with open_db() as db:
        assert [a.kind for a in stored_alerts(db, 1)] == ["low_util", "input_bound"]

    code, out, _ = run(capsys, "runs", "alerts", "1", "--low-util-pct", "30", "--data-wait-pct", "40")
    assert code == 0 and out.strip() == "run 1: no alerts"
    with open_db() as db:
        assert stored_alerts(db, 1) == []  # the stored alerts follow the latest evaluation

    code, out, _ = run(capsys, "runs", "show", "1", "--low-util-minutes", "30")
    assert code == 0
    assert "alert [low_util] GPU 0 on n0 averaged 40% utilisation" in out
    assert "  why: Data wait is 30% of step time with 2 loader workers on 16 cores" in out

    code, out, _ = run(capsys, "runs", "alerts", "1", "--markdown")
    assert code == 0 and out.startswith("| kind | gpu |")


def test_alerts_survive_compaction(capsys: pytest.CaptureFixture[str], starved_run: Path) -> None:
    run(capsys, "runs", "import", str(starved_run))
    code, out, _ = run(capsys, "runs", "compact", "--older-than-days", "0", "--json")
    assert code == 0 and json.loads(out)["samples_removed"] == 360
    code, out, _ = run(capsys, "runs", "alerts", "1", "--json")
    assert [a["kind"] for a in json.loads(out)["alerts"]] == ["low_util", "input_bound"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--low-util-pct", "0", "--low-util-pct: 0 is outside 1 to 100 %"), ("--comm-factor", "1", "--comm-factor")],
)
def test_bad_alert_settings_name_the_flag(
    capsys: pytest.CaptureFixture[str], starved_run: Path, flag: str, value: str, message: str
) -> None:
    run(capsys, "runs", "import", str(starved_run))
    code, _, err = run(capsys, "runs", "alerts", "1", flag, value)
    assert code == 2 and message in err and "Traceback" not in err
