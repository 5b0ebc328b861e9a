"""Hostile telemetry and hostile `runs` input (issue 13, items 5-8): impossible values are refused as
malformed lines, the rest of the stream is stored, every JSON output is valid, and bad flags, files and
databases end in one line naming what is wrong, never a traceback."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.runs import create_run, get_run
from gpuplanner.history.tail import ingest_file
from tests.history.streams import T0, StreamBuilder
from trainer.protocol import RecordError, StreamParser, parse_line


@pytest.fixture(autouse=True)
def _only_runs_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.runs",))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def good_stream() -> StreamBuilder:
    s = StreamBuilder()
    s.add("run_start", 0, config={"model_name": "m", "price_per_gpu_hour": 2.0}, gpus=1)
    for i in range(20):
        s.gpu(i, 0, 80.0)
        s.step(i + 0.5, i + 1, samples_total=8 * (i + 1), tokens_total=1024 * (i + 1))
    s.add("run_end", 21, status="finished")
    return s


def _line(seq: int, kind: str, **fields: object) -> str:
    body = {"v": 1, "seq": seq, "t": T0 + 5.25, "kind": kind, **fields}
    return json.dumps(body)


# seq 1000+ so they sit between the good records' seqs without colliding
POISON = [
    _line(1000, "step", step=10**30, loss=1.0, tokens_total=1, samples_total=1, step_time_s=1.0),
    _line(1001, "step", step=1, loss=1.0, tokens_total=int(1e30), samples_total=1, step_time_s=1.0),
    _line(1002, "gpu", index=int(1e30), util_pct=5.0, mem_used_bytes=1, mem_total_bytes=2),
    _line(1003, "gpu", index=0, util_pct=5.0, mem_used_bytes=-1, mem_total_bytes=2),
    _line(1004, "gpu", index=0, util_pct=101.0, mem_used_bytes=1, mem_total_bytes=2),
    _line(1005, "step", step=1, loss=1.0, tokens_total=1, samples_total="1", step_time_s=1.0),
    _line(1006, "eval", step=1, eval_loss=[1]),
    _line(1007, "run_start", config={}, gpus=1e300),
    '{"v":1,"seq":1008,"t":1763800005,"kind":"gpu","index":0,"util_pct":NaN,"mem_used_bytes":1,"mem_total_bytes":2}',
    '{"v":1,"seq":1009,"t":1763800005,"kind":"step","step":1,"loss":-Infinity,"tokens_total":1,"samples_total":1,'
    '"step_time_s":1}',
    '{"v":1,"seq":100000000000000000000000000000,"t":1763800005,"kind":"preempted"}',
    '{"v":1,"seq":1010,"t":1e300,"kind":"run_start","config":{}}',
    '{"v":1,"seq":1011,"t":1763800005,"kind":"resumed","step":' + "9" * 5000 + "}",
]


def poisoned_data() -> bytes:
    lines = [line.decode() for line in good_stream().data().splitlines()]
    mixed = lines[:10] + POISON + lines[10:]
    return ("\n".join(mixed) + "\n").encode()


@pytest.mark.parametrize("line", POISON)
def test_each_poisoned_record_is_refused_with_a_reason(line: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_line(line)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_poisoned_records_are_counted_and_the_rest_is_stored(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(poisoned_data())
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(good_stream().data())
    with open_db(tmp_path / "h.sqlite") as db:
        run_id, twin = create_run(db), create_run(db)
        stats = ingest_file(db, run_id, events)
        assert stats.malformed == len(POISON)
        assert stats.inserted == len(good_stream().records)
        assert get_run(db, run_id).status == "finished"
        again = ingest_file(db, run_id, events, source="second-read")  # re-import works: nothing new, no error
        assert (again.inserted, again.duplicates, again.malformed) == (0, len(good_stream().records), len(POISON))
        ingest_file(db, twin, clean)
        a, b = summarize(db, run_id), summarize(db, twin)
        assert a.gpu_hours == pytest.approx(b.gpu_hours) and a.gpu_hours > 0
        assert a.avg_util_pct == pytest.approx(80.0) and a.tokens == b.tokens == 20 * 1024
        assert a.malformed_lines == 2 * len(POISON) and b.malformed_lines == 0


def test_live_watching_survives_a_poisoned_record(tmp_path: Path) -> None:
    """The watcher's path (parser.feed, then the ingestor), fed byte by byte in small chunks."""
    from gpuplanner.history.ingest import Ingestor

    data = poisoned_data()
    with open_db(tmp_path / "h.sqlite") as db:
        run_id = create_run(db)
        ingestor = Ingestor(db, run_id, "watch", batch_size=3)
        for start in range(0, len(data), 97):
            ingestor.feed_records(ingestor.parser.feed(data[start : start + 97]))
            ingestor.flush()
        assert ingestor.stats.malformed == len(POISON)
        assert get_run(db, run_id).status == "finished"
        assert db.execute("SELECT COUNT(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0] == 20


def test_parser_offsets_still_cover_rejected_lines() -> None:
    data = poisoned_data()
    parser = StreamParser()
    records = parser.feed(data)
    assert parser.offset == len(data) and parser.malformed == len(POISON)
    assert [r["seq"] for r in records] == list(range(len(good_stream().records)))


def _db_with_extremes(path: Path) -> int:
    """A history holding what older versions let in: a start time of 1e300, -inf and nan numbers."""
    with open_db(path) as db:
        run_id = create_run(db, gpu_count=1, price_usd_per_gpu_hour=2.0)
        ingest_file(db, run_id, _write(path.parent / "e.jsonl", good_stream().data()))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET started_at = 1e300")
    conn.execute("UPDATE steps SET loss = -9e999 WHERE step = 20")
    conn.execute("UPDATE steps SET tokens_per_s = 9e999 WHERE step = 3")
    conn.commit()
    conn.close()
    return run_id


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_extreme_stored_values_never_break_list_show_export(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db_file = tmp_path / "h.sqlite"
    run_id = _db_with_extremes(db_file)
    code, out, err = run(capsys, "runs", "list", "--db", str(db_file))
    assert code == 0 and "bad time 1e+300" in out and not err
    code, out, err = run(capsys, "runs", "show", str(run_id), "--db", str(db_file))
    assert code == 0 and not err
    code, out, _ = run(capsys, "runs", "show", str(run_id), "--db", str(db_file), "--json")
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"invalid JSON constant {name}"))
    assert code == 0 and doc["final_loss"] is None
    assert doc["null_reasons"]["final_loss"].startswith("-inf")
    for argv in (["list", "--json"], ["compare", str(run_id), "--json"], ["export", str(run_id)]):
        code, out, _ = run(capsys, "runs", *argv, "--db", str(db_file))
        json.loads(out, parse_constant=lambda name: pytest.fail(f"invalid JSON constant {name}"))
        assert code == 0
    exported = json.loads(out)
    losses = [row["loss"] for row in exported["steps"]]
    assert losses[-1] is None and all(isinstance(x, float) and math.isfinite(x) for x in losses[:-1])
    assert exported["steps"][-1]["null_reasons"] == {"loss": "-inf in the history (not a finite number)"}
    assert exported["steps"][2]["null_reasons"] == {"tokens_per_s": "inf in the history (not a finite number)"}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["show", str(2**63)], "ID: an ID is a positive whole number up to 9223372036854775807"),
        (["show", str(10**30)], "ID: an ID is a positive whole number up to"),
        (["delete", "-5"], "ID"),
        (["export", str(2**64)], "ID"),
        (["compare", "1", str(2**63)], "ID"),
        (["delete-bench", str(2**70)], "BENCH_ID"),
        (["show", "1", "--low-util-minutes", "nan"], "--low-util-minutes: a finite number"),
        (["show", "1", "--low-util-minutes", "inf"], "--low-util-minutes: a finite number"),
        (["import", "x", "--price", "inf"], "--price: a finite number"),
        (["import", "x", "--price", "nan"], "--price: a finite number"),
        (["import", "x", "--price", "-1"], "--price: a finite number"),
        (["import", "x", "--gpus", str(2**63)], "--gpus: a whole number"),
        (["import", "x", "--plan", str(2**63)], "--plan: an ID"),
        (["list", "--limit", str(2**63)], "--limit: a whole number"),
        (["compact", "--older-than-days", "nan"], "--older-than-days: a finite number"),
    ],
)
def test_bad_numbers_get_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, out, err = run(capsys, "runs", *argv)
    assert code == 2 and not out
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_export_out_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db_file = tmp_path / "h.sqlite"
    with open_db(db_file) as db:
        run_id = create_run(db)
        ingest_file(db, run_id, _write(tmp_path / "e.jsonl", good_stream().data()))
    base = ["runs", "export", str(run_id), "--db", str(db_file), "--out"]
    for target, needle in (
        (tmp_path, "is a folder"),
        (tmp_path / "missing" / "x.json", "does not exist"),
        (Path("/dev/full"), "No space left on device"),
    ):
        code, out, err = run(capsys, *base, str(target))
        assert code == 2 and needle in err and err.count("\n") == 1, (target, err)
    code, _, err = run(capsys, *base, str(tmp_path / "x.json"))
    assert code == 0 and json.loads((tmp_path / "x.json").read_text())["summary"]["run_id"] == run_id
    code, _, err = run(capsys, "runs", "export", "99", "--db", str(db_file), "--out", str(tmp_path / "none.json"))
    assert code == 1 and "no run with id 99" in err and not (tmp_path / "none.json").exists()


def test_history_path_that_is_not_a_history(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = _write(tmp_path / "notes.txt", b"these are not the tables you are looking for\n" * 100)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE photos (id INTEGER)")
    conn.commit()
    conn.close()
    cases = [
        (text, "is not a GPU Planner history database"),
        (other, "is a SQLite database of something else"),
        (tmp_path, "is a folder"),
    ]
    for path, needle in cases:
        for argv in (["list"], ["show", "1"], ["import", str(text)], ["compact"]):
            code, out, err = run(capsys, "runs", *argv, "--db", str(path))
            assert code == 1 and needle in err and err.count("\n") == 1, (path, argv, err)
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [("photos",)]
    assert text.read_bytes().startswith(b"these are")
