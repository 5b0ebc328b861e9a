"""A run on a host without a price has an unknown cost: JSON null, "no price" in text, never $0 or
$0/effective GPU-hour, and counted in ``unpriced_runs`` wherever costs are summed.

Both ways a trainer says "no price" are covered: ``price_per_gpu_hour: 0.0`` in ``run_start`` (what the
trainer wrote before it knew "none") and ``null`` (what it writes now). Real files, real SQLite, the
real ``gpuplanner runs`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.run_cost import COST_KEYS, add_costs, known_price, run_cost_usd
from tests.history.streams import StreamBuilder

COST_FIGURES = ("cost_usd", "cost_per_effective_gpu_hour_usd", "cost_per_sample_usd", "cost_per_million_tokens_usd")


@pytest.fixture(autouse=True)
def _only_runs_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.runs",))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out


def one_hour_run(folder: Path, config: dict[str, object]) -> Path:
    """2 GPUs for one hour at 50% utilisation, 1,000 samples, as the trainer writes it."""
    s = StreamBuilder()
    s.add("run_start", 0.0, config={"model_name": "gpt2", **config}, host="box", gpus=2, resumed_from_step=None)
    for i in range(7):
        for g in range(2):
            s.gpu(i * 600.0, g, 50.0)
    s.step(3599.0, 10, samples_total=1000, tokens_total=1000 * 256)
    s.add("run_end", 3600.0, status="finished", totals={})
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(s.data())
    return folder


@pytest.fixture(params=[0.0, None], ids=["older-trainer-0.0", "null"])
def history(request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Run 1 without a price (tagged team=free), run 2 priced at $3 per GPU-hour (team=paid)."""
    db = tmp_path / "history.sqlite"
    unpriced = one_hour_run(tmp_path / "unpriced", {"price_per_gpu_hour": request.param})
    priced = one_hour_run(tmp_path / "priced", {"price_per_gpu_hour": 3.0})
    run(capsys, "runs", "import", str(unpriced), "--db", str(db), "--name", "free")
    run(capsys, "runs", "import", str(priced), "--db", str(db), "--name", "paid")
    run(capsys, "runs", "tag", "1", "team=free", "--db", str(db))
    run(capsys, "runs", "tag", "2", "team=paid", "--db", str(db))
    return db


def test_runs_show_json_gives_null_costs_and_text_says_no_price(
    history: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = run(capsys, "runs", "show", "1", "--db", str(history), "--json")
    doc = json.loads(out)
    assert doc["price_usd_per_gpu_hour"] is None
    assert {key: doc[key] for key in COST_FIGURES} == dict.fromkeys(COST_FIGURES)
    assert doc["gpu_hours"] == pytest.approx(2.0) and doc["effective_gpu_hours"] == pytest.approx(1.0)
    _, text = run(capsys, "runs", "show", "1", "--db", str(history))
    lines = {line.split()[0]: line.split(None, 1)[1].strip() for line in text.splitlines() if line[:1].isalpha()}
    for key in ("price_usd_per_gpu_hour", *COST_FIGURES):
        assert lines[key] == "no price", (key, lines[key])
    assert "$0" not in text
    _, paid = run(capsys, "runs", "show", "2", "--db", str(history), "--json")
    assert json.loads(paid)["cost_usd"] == pytest.approx(6.0)  # $3 x 2 GPUs x 1 h
    assert json.loads(paid)["cost_per_effective_gpu_hour_usd"] == pytest.approx(6.0)


def test_runs_list_json_and_text(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, "runs", "list", "--db", str(history), "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["free"]["cost_usd"] is None and rows["paid"]["cost_usd"] == pytest.approx(6.0)
    _, text = run(capsys, "runs", "list", "--db", str(history))
    header, *lines = text.splitlines()
    at = header.index("cost_usd")
    cost = {line.split()[1]: line[at:].split("  ")[0].strip() for line in lines}
    assert cost == {"free": "no price", "paid": "6"}


def test_runs_report_counts_the_unpriced_run(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, "runs", "report", "--by", "team", "--db", str(history), "--json")
    doc = json.loads(out)
    rows = {row["group"]: row for row in doc["rows"]}
    assert (rows["free"]["cost_usd"], rows["free"]["unpriced_runs"]) == (None, 1)
    assert (rows["paid"]["cost_usd"], rows["paid"]["unpriced_runs"]) == (pytest.approx(6.0), 0)
    assert doc["total"]["runs"] == 2 and doc["total"]["unpriced_runs"] == 1
    assert doc["total"]["cost_usd"] == pytest.approx(6.0)
    _, text = run(capsys, "runs", "report", "--by", "team", "--db", str(history))
    free = next(line for line in text.splitlines() if line.startswith("free"))
    assert "no price" in free and "0.00" not in free.split()[-3:]
    assert "1 run(s) have no price" in text


def test_the_cost_home_and_the_sum_over_runs() -> None:
    assert run_cost_usd(3.0, 2, 1.0) == pytest.approx(6.0) and run_cost_usd(None, 2, 1.0) is None
    assert known_price(0.0) is None and known_price(None) is None and known_price(2.5) == 2.5
    total = add_costs([6.0, None, 0.5])
    assert (total.runs, total.cost_usd, total.unpriced_runs) == (3, pytest.approx(6.5), 1)
    assert add_costs([None, None]).cost_usd is None and add_costs([]).cost_usd is None
    assert set(COST_FIGURES) <= COST_KEYS


def test_a_run_priced_at_launch_keeps_its_price(tmp_path: Path) -> None:
    """A price the launcher (or `runs import --price`) put on the run row wins over the trainer's."""
    folder = one_hour_run(tmp_path / "r", {"price_per_gpu_hour": None})
    with open_db(tmp_path / "h.sqlite") as db:
        from gpuplanner.history.analytics import summarize
        from gpuplanner.history.runs import create_run
        from gpuplanner.history.tail import ingest_file

        run_id = create_run(db, name="launched", price_usd_per_gpu_hour=0.0, gpu_count=2)
        ingest_file(db, run_id, folder / "events.jsonl")
        summary = summarize(db, run_id, with_alerts=False)
    assert summary.price_usd_per_gpu_hour == 0.0 and summary.cost_usd == 0.0  # a free host, said so


def test_runs_compare_text_says_no_price(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, text = run(capsys, "runs", "compare", "1", "2", "--db", str(history))
    header, *lines = text.splitlines()
    at = header.index("cost_usd")
    assert [line[at:].split("  ")[0].strip() for line in lines] == ["no price", "6"]
