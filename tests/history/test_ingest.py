"""Ingestion: idempotent, resumable at any byte, tolerant of garbage, half lines and unknown kinds."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from gpuplanner.history import Ingestor, ingest_records, open_db, stream_position
from gpuplanner.history.maintenance import downsample
from gpuplanner.history.runs import create_run, get_run
from gpuplanner.history.tail import ingest_file, ingest_stream
from tests.history.conftest import dump
from tests.history.streams import GIB, StreamBuilder


def rich_stream() -> StreamBuilder:
    """Two GPUs, steps, evals, a checkpoint, a preemption and resume, low-util and memory-pressure stretches."""
    s = StreamBuilder()
    s.add("run_start", 0, config={"model_name": "gpt2", "seq_len": 512}, host="box", gpus=2, resumed_from_step=None)
    for i in range(120):
        at = 10.0 * i + 1
        for g in range(2):
            util = 20.0 if 30 <= i < 60 else 90.0
            used = 70 * GIB if (g == 1 and i > 100) else 30 * GIB
            s.gpu(at, g, util, mem_used=used)
        s.step(at + 0.5, i, samples_total=8 * i, tokens_total=4096 * i, data_wait_s=0.5 if i % 4 == 0 else 0.0)
        if i % 40 == 39:
            s.add("eval", at + 0.7, step=i, eval_loss=3.0 - i / 100)
            s.add("checkpoint", at + 0.8, step=i, path=f"ckpt-{i}", bytes=1000, seconds=1.0)
        if i == 70:
            s.add("preempted", at + 0.9, reason="spot")
            s.add("run_start", at + 300, config={}, resumed_from_step=39)
            s.add("resumed", at + 301, step=39)
    s.add("run_end", 1500, status="finished", totals={})
    return s


def ingest_whole(db: Database, data: bytes, source: str = "s") -> int:
    run_id = create_run(db, gpu_count=2, price_usd_per_gpu_hour=2.0)
    ingestor = Ingestor(db, run_id, source, batch_size=100)
    ingestor.feed_bytes(data)
    ingestor.flush()
    return run_id


def test_stream_read_twice_stores_the_same_rows(db: Database) -> None:
    data = rich_stream().data()
    run_id = ingest_whole(db, data)
    first = dump(db, run_id)
    assert len(first["gpu_samples"]) == 240 and len(first["steps"]) == 120 and len(first["evals"]) == 3
    again = Ingestor(db, run_id, "other-source", batch_size=7)  # a second reader of the whole stream
    again.feed_bytes(data)
    stats = again.flush()
    assert stats.inserted == 0 and stats.duplicates == len(rich_stream().records)
    second = dump(db, run_id)
    second["stream_positions"] = first["stream_positions"]
    assert second == first
    ingest_records(db, run_id, rich_stream().records)  # parsed records: also ignored
    assert dump(db, run_id)["gpu_samples"] == first["gpu_samples"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), batch=st.integers(1, 300))
def test_stream_cut_at_random_offsets_and_resumed_gives_identical_rows(
    tmp_path: Path, cuts: list[float], batch: int
) -> None:
    data = rich_stream().data()
    with open_db(tmp_path / "ref.sqlite") as ref:
        expected = dump(ref, ingest_whole(ref, data))
    (tmp_path / "ref.sqlite").unlink()
    with open_db(tmp_path / "cut.sqlite") as db:
        run_id = create_run(db, gpu_count=2, price_usd_per_gpu_hour=2.0)
        for end in sorted(int(c * len(data)) for c in cuts) + [len(data)]:
            ingestor = Ingestor(db, run_id, "s", batch_size=batch)  # a fresh reader after each cut
            start = ingestor.resume_offset
            ingestor.feed_bytes(data[start : max(start, end)])
            ingestor.flush()
            # a crash loses what was buffered: a reader that stops here resumes from the stored offset
        got = dump(db, run_id)
    (tmp_path / "cut.sqlite").unlink()
    assert got == expected


def test_garbage_half_lines_and_unknown_kinds_are_counted_and_skipped(db: Database) -> None:
    s = rich_stream()
    lines = s.data().splitlines(keepends=True)
    noisy = (
        b"".join(lines[:50])
        + b'not json\n\xff\xfe\n{"v":1,"seq":-1}\n'
        + b'{"v":1,"seq":99999,"t":1.0,"kind":"weather"}\n'
        + b"\n"
        + b"".join(lines[50:])
        + b'{"v":1,"seq":5000,"t'
    )
    run_id = create_run(db)
    ingestor = Ingestor(db, run_id, "noisy", batch_size=64)
    ingestor.feed_bytes(noisy)
    stats = ingestor.flush()
    assert stats.malformed == 3 and stats.unknown_kind == 1
    assert stats.inserted == len(s.records)
    assert stats.offset == len(noisy) - len(b'{"v":1,"seq":5000,"t')  # the half line is not consumed
    position = stream_position(db, run_id, "noisy")
    assert (position.offset, position.malformed, position.unknown_kind) == (stats.offset, 3, 1)
    assert position.last_seq == len(s.records) - 1
    # the writer finishes the half line later: a resumed reader picks it up
    rest = b'":1763800000.0,"kind":"eval","step":1,"eval_loss":1.0}\n'
    resumed = Ingestor(db, run_id, "noisy")
    resumed.feed_bytes(noisy[resumed.resume_offset :] + rest)
    assert resumed.flush().inserted == 1
    assert stream_position(db, run_id, "noisy").malformed == 3


def test_run_metadata_status_and_events_from_the_stream(db: Database) -> None:
    run_id = create_run(db)
    ingest_records(db, run_id, rich_stream().records[:5])
    run = get_run(db, run_id)
    assert (run.status, run.host, run.gpu_count, run.model_name) == ("running", "box", 2, "gpt2")
    assert run.config["seq_len"] == 512
    ingest_records(db, run_id, rich_stream().records)
    run = get_run(db, run_id)
    assert run.status == "finished" and run.ended_at == rich_stream().records[-1]["t"]
    kinds = [r[0] for r in db.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY seq", [run_id])]
    assert kinds == [
        "run_start",
        "checkpoint",
        "preempted",
        "run_start",
        "resumed",
        "checkpoint",
        "checkpoint",
        "run_end",
    ]


def test_ingest_file_resumes_and_follows_a_growing_file(db: Database, tmp_path: Path) -> None:
    data = rich_stream().data()
    file = tmp_path / "events.jsonl"
    file.write_bytes(data[:10_000])
    run_id = create_run(db, gpu_count=2, price_usd_per_gpu_hour=2.0)
    first = ingest_file(db, run_id, tmp_path)
    assert 0 < first.offset <= 10_000
    with open(file, "ab") as handle:
        handle.write(data[10_000:])
    second = ingest_file(db, run_id, file, follow=True, poll_s=0.01)  # returns: run_end is stored
    assert second.offset == len(data)
    assert first.inserted + second.inserted == len(rich_stream().records)
    assert second.duplicates == 0  # the second read started where the first stopped
    with open_db(tmp_path / "ref.sqlite") as ref:
        expected = dump(ref, ingest_whole(ref, data))
    got = dump(db, run_id)
    got["stream_positions"] = expected["stream_positions"]
    assert got == expected


def test_ingest_stream_from_a_byte_stream(db: Database, tmp_path: Path) -> None:
    import io

    data = rich_stream().data()
    run_id = create_run(db)
    stats = ingest_stream(db, run_id, io.BytesIO(data), "ssh:box:/runs/1", batch_size=50)
    assert stats.offset == len(data) and stats.inserted == len(rich_stream().records)
    assert stream_position(db, run_id, "ssh:box:/runs/1").offset == len(data)


def test_downsampled_samples_do_not_come_back_on_reingest(db: Database) -> None:
    s = rich_stream()
    run_id = ingest_whole(db, s.data())
    before = dump(db, run_id)
    cutoff_t = s.t0 + 600.0
    result = downsample(db, older_than_s=0.0, now=cutoff_t)
    assert result.runs == 1 and result.samples_removed > 0
    raw_left = db.execute("SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?", [run_id]).fetchone()[0]
    minutes = db.execute(
        "SELECT SUM(n), MIN(util_min), MAX(util_max) FROM gpu_samples_1m WHERE run_id = ?", [run_id]
    ).fetchone()
    assert raw_left + minutes[0] == 240
    assert (minutes[1], minutes[2]) == (20.0, 90.0)
    ingest_records(db, run_id, s.records, source="again")
    assert db.execute("SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?", [run_id]).fetchone()[0] == raw_left
    after = dump(db, run_id)
    assert after["run_gpus"] == before["run_gpus"]  # the rollups never change


def test_bad_field_types_do_not_break_ingest(db: Database) -> None:
    s = StreamBuilder()
    s.add("gpu", 0, index="x", util_pct=None, mem_used_bytes="lots", mem_total_bytes=0, power_w=True)
    s.add("step", 1, step=1, loss=None, tokens_total=1e400 if False else 10, samples_total="?", step_time_s=-1)
    s.add("run_end", 2, status="exploded")
    run_id = create_run(db)
    stats = ingest_records(db, run_id, s.records)
    # wrong types where numbers belong: rejected like malformed lines, the rest is stored
    assert (stats.inserted, stats.malformed) == (1, 2)
    assert get_run(db, run_id).status == "failed"
    assert db.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0] == 0
    assert json.loads(db.execute("SELECT detail_json FROM events").fetchone()[0])["status"] == "exploded"
