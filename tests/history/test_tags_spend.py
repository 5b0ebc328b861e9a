"""Run tags and the spend report on a real SQLite file: parsing, storage, sums by tag and month, exports,
bad input, and two processes tagging at once."""

from __future__ import annotations

import calendar
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run, delete_run, update_run
from gpuplanner.history.spend import month_of, parse_month, spend_report
from gpuplanner.history.tags import TagError, parse_tag, parse_tags, set_tags, tags_of
from tests.conftest import REPO_ROOT


def utc(year: int, month: int, day: int, hour: int = 12) -> float:
    return float(calendar.timegm((year, month, day, hour, 0, 0)))


def add_run(db_path: Path, start: float, hours: float, gpus: int, price: float | None, **tags: str) -> int:
    with open_db(db_path) as db:
        run_id = create_run(db, gpu_count=gpus, price_usd_per_gpu_hour=price, started_at=start, tags=tags)
        update_run(db, run_id, first_t=start, last_t=start + hours * 3600.0, status="finished")
    return run_id


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("foo", "'foo' is not key=value"),
        ("=search", "empty key"),
        ("project=", "empty value: write project=VALUE"),
        ("pro ject=x", "letters, digits"),
        ("-x=1", "starting with a letter or digit"),
    ],
)
def test_bad_tags_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(TagError, match=needle):
        parse_tag(text)


def test_tags_parse_and_a_key_twice_is_refused() -> None:
    assert parse_tags([" project = search ", "owner=ana", "owner=ana"]) == {"project": "search", "owner": "ana"}
    assert parse_tag("url=a=b") == ("url", "a=b")
    with pytest.raises(TagError, match="given twice"):
        parse_tags(["owner=ana", "owner=bob"])


def test_tags_are_stored_with_the_run_and_go_with_it(tmp_path: Path) -> None:
    db_path = tmp_path / "h.sqlite"
    run_id = add_run(db_path, utc(2026, 11, 3), 1.0, 1, 2.0, project="search", owner="ana")
    with open_db(db_path) as db:
        assert tags_of(db) == {run_id: {"owner": "ana", "project": "search"}}
        set_tags(db, run_id, {"owner": "bob"}, remove=["project"])
        assert tags_of(db, [run_id]) == {run_id: {"owner": "bob"}}
        with pytest.raises(TagError):  # a bad tag stores no run at all
            create_run(db, tags={"": "x"})
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
        delete_run(db, run_id)
        assert db.execute("SELECT COUNT(*) FROM run_tags").fetchone()[0] == 0


def test_months_are_checked_and_utc() -> None:
    assert parse_month("2026-11") == "2026-11"
    for bad in ("2026-13", "26-11", "2026/11", "november"):
        with pytest.raises(ValueError, match="YYYY-MM"):
            parse_month(bad)
    assert month_of(utc(2026, 11, 30, 23)) == "2026-11" and month_of(utc(2026, 12, 1, 0)) == "2026-12"


@pytest.fixture
def history(tmp_path: Path) -> Path:
    db_path = tmp_path / "history.sqlite"
    # hand figures: cost = price x GPUs x hours
    add_run(db_path, utc(2026, 11, 2), 2.0, 2, 3.0, project="search", owner="ana")  # $12, 4 GPU-h
    add_run(db_path, utc(2026, 11, 20), 0.5, 1, 4.0, project="search", owner="bob")  # $2, 0.5 GPU-h
    add_run(db_path, utc(2026, 11, 25), 1.0, 8, 1.5, project="pretrain", owner="ana")  # $12, 8 GPU-h
    add_run(db_path, utc(2026, 11, 26), 3.0, 1, None, project="pretrain")  # no price: 3 GPU-h, unpriced
    add_run(db_path, utc(2026, 10, 30), 1.0, 1, 10.0, project="search")  # October: $10
    add_run(db_path, utc(2026, 11, 5), 1.0, 1, 1.0)  # untagged: $1
    return db_path


def test_report_sums_by_tag_and_month(history: Path) -> None:
    with open_db(history) as db:
        report = spend_report(db, by="project", month="2026-11")
        rows = {row.group: row for row in report.rows}
        assert set(rows) == {"search", "pretrain", None}
        assert rows["search"].runs == 2 and rows["search"].cost_usd == pytest.approx(14.0)
        assert rows["search"].gpu_hours == pytest.approx(4.5)
        assert rows["pretrain"].cost_usd == pytest.approx(12.0) and rows["pretrain"].unpriced_runs == 1
        assert rows["pretrain"].gpu_hours == pytest.approx(11.0)
        assert rows[None].cost_usd == pytest.approx(1.0)
        assert report.total.runs == 5 and report.total.cost_usd == pytest.approx(27.0)
        every_month = spend_report(db, by="project")
        assert [(r.month, r.group) for r in every_month.rows][0] == ("2026-10", "search")
        assert every_month.total.cost_usd == pytest.approx(37.0)
        ana = spend_report(db, by="project", where={"owner": "ana"})
        assert {r.group: r.cost_usd for r in ana.rows} == pytest.approx({"search": 12.0, "pretrain": 12.0})


def test_runs_report_cli_prints_and_exports(history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("runs", "report", "--db", str(history), "--by", "project", "--month", "2026-11")
    code, out, err = run(capsys, *base)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["project", "month", "runs", "gpu_hours", "cost_usd", "unpriced_runs"]
    assert any(line.split()[:3] == ["search", "2026-11", "2"] and "14.00" in line.split() for line in lines)
    assert lines[-1].startswith("note: 1 run(s) have no price")
    code, out, _ = run(capsys, *base, "--json")
    document = json.loads(out)
    assert document["by"] == "project" and document["month"] == "2026-11"
    assert {r["group"]: r["cost_usd"] for r in document["rows"]} == {"pretrain": 12.0, "search": 14.0, None: 1.0}
    assert document["total"]["cost_usd"] == 27.0 and document["total"]["unpriced_runs"] == 1
    out_csv = tmp_path / "spend.csv"
    code, _, err = run(capsys, *base, "--csv", "--out", str(out_csv))
    assert code == 0 and "wrote" in err
    table = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert {r["project"]: float(r["cost_usd"]) for r in table} == {"pretrain": 12.0, "search": 14.0, "(none)": 1.0,
                                                                  "total": 27.0}  # fmt: skip
    code, out, _ = run(capsys, *base, "--markdown")
    assert out.startswith("# Spend by project, 2026-11") and "| search | 2026-11 | 2 | 4.5 | 14 | 0 |" in out
    code, out, _ = run(capsys, "runs", "list", "--db", str(history), "--tag", "owner=ana", "--json")
    listed = json.loads(out)
    assert sorted(r["tags"]["project"] for r in listed) == ["pretrain", "search"]
    code, out, _ = run(capsys, "runs", "show", str(listed[0]["run_id"]), "--db", str(history), "--json")
    assert json.loads(out)["tags"] == listed[0]["tags"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--month", "2026-13"), "--month: expected a month as YYYY-MM"),
        (("--tag", "foo"), "--tag: 'foo' is not key=value"),
        (("--tag", "=x"), "--tag: '=x' has an empty key"),
        (("--by", "a b"), "--by: key 'a b'"),
    ],
)
def test_report_bad_input(
    history: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str
) -> None:
    code, out, err = run(capsys, "runs", "report", "--db", str(history), *argv)
    assert code == 2 and out == "" and needle in err


def test_run_with_a_bad_tag_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "h.sqlite"
    code, out, err = run(capsys, "run", "--db", str(db_path), "--host", "local", "--tag", "foo", "--", "--x", "1")
    assert code == 2 and "--tag: 'foo' is not key=value" in err
    code, out, err = run(capsys, "run", "--db", str(db_path), "--host", "local", "--tag", "=v", "--", "--x", "1")
    assert code == 2 and "--tag: '=v' has an empty key" in err
    if db_path.exists():
        with open_db(db_path) as db:
            assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


WRITER = """
import sys
from gpuplanner.history.db import open_db
from gpuplanner.history.runs import create_run
from gpuplanner.history.tags import set_tags
path, who, shared, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open_db(path) as db:
    for i in range(n):
        run_id = create_run(db, gpu_count=1, price_usd_per_gpu_hour=1.0, started_at=1.0e9, tags={"owner": who, "i": str(i)})
        set_tags(db, shared, {who: str(i)})
"""


def test_two_processes_tagging_at_once_lose_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "h.sqlite"
    shared = add_run(db_path, utc(2026, 11, 1), 1.0, 1, 1.0, project="shared")
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(db_path), who, str(shared), str(n)], cwd=REPO_ROOT)
        for who in ("ana", "bob")
    ]
    assert [p.wait(120) for p in procs] == [0, 0]
    with open_db(db_path) as db:
        tags = tags_of(db)
        assert tags[shared] == {"project": "shared", "ana": str(n - 1), "bob": str(n - 1)}
        owners = [t["owner"] for run_id, t in tags.items() if run_id != shared]
        assert sorted(owners) == ["ana"] * n + ["bob"] * n
        for who in ("ana", "bob"):  # every index once per process: nothing lost, nothing doubled
            assert sorted(int(t["i"]) for t in tags.values() if t.get("owner") == who) == list(range(n))
        report = spend_report(db, by="owner")
        assert {r.group: r.runs for r in report.rows} == {"ana": n, "bob": n, None: 1}


FORMULAS = ('=HYPERLINK("http://x.invalid","open")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "-2+3")


def test_csv_exports_never_write_a_formula(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run names and tag values are the user's text: in every CSV the product writes (runs list, runs export,
    runs report) a cell a spreadsheet would run as a formula starts with a quote (issue 27 item 8), and a
    number stays a number."""
    db_path = tmp_path / "h.sqlite"
    with open_db(db_path) as db:
        for i, text in enumerate(FORMULAS):
            run_id = create_run(
                db, name=text, gpu_count=1, price_usd_per_gpu_hour=2.0, started_at=utc(2026, 11, 3), tags={"t": text}
            )
            update_run(db, run_id, first_t=utc(2026, 11, 3), last_t=utc(2026, 11, 3) + 3600.0 * (i + 1))
    outputs = []
    code, out, err = run(capsys, "runs", "list", "--db", str(db_path), "--csv")
    assert code == 0, err
    outputs.append(out)
    code, out, err = run(capsys, "runs", "export", "1", "--db", str(db_path), "--format", "csv")
    assert code == 0, err
    outputs.append(out)
    code, out, err = run(capsys, "runs", "report", "--db", str(db_path), "--by", "t", "--month", "2026-11", "--csv")
    assert code == 0, err
    outputs.append(out)
    for text in outputs:
        cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not _number(c))], text
    names = [row["name"] for row in csv.DictReader(io.StringIO(outputs[0]))]
    assert sorted(names) == sorted("'" + text for text in FORMULAS)
    groups = {row["t"] for row in csv.DictReader(io.StringIO(outputs[2]))}
    assert {"'" + text for text in FORMULAS} <= groups


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
