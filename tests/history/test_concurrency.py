"""Crash safety and concurrency on real files: SIGKILL mid-ingest, readers beside a writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpuplanner.history import Ingestor, open_db, stream_position
from gpuplanner.history.analytics import summarize
from gpuplanner.history.runs import create_run, list_runs
from tests.conftest import REPO_ROOT
from tests.history.conftest import dump
from tests.history.streams import StreamBuilder
from trainer.protocol import StreamParser

CHILD = """
import sys, time
from gpuplanner.history import Ingestor, open_db
db = open_db(sys.argv[1])
data = open(sys.argv[2], "rb").read()
ing = Ingestor(db, 1, "s", batch_size=1000)
pos = ing.resume_offset
while pos < len(data):
    ing.feed_bytes(data[pos:pos + 65536])
    pos += 65536
    if ing.stats.batches >= 3:
        print("ingesting", flush=True)
ing.flush()
print("done", flush=True)
time.sleep(60)
"""


def big_stream(n: int) -> bytes:
    s = StreamBuilder()
    s.add("run_start", 0, config={}, gpus=8)
    for i in range(n):
        s.gpu(i * 0.125, i % 8, float(i % 100))
    return s.data()


@pytest.mark.slow
def test_sigkill_mid_ingest_leaves_whole_transactions(tmp_path: Path) -> None:
    data = big_stream(60_000)
    events = tmp_path / "events.jsonl"
    events.write_bytes(data)
    db_path = tmp_path / "h.sqlite"
    with open_db(db_path) as db:
        create_run(db, gpu_count=8)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path), str(events)], stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == b"ingesting\n", line
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    with open_db(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        position = stream_position(db, 1, "s")
        stored = db.execute("SELECT COUNT(*), MAX(seq) FROM gpu_samples").fetchone()
        # whole transactions only: the rows are exactly the records before the stored offset
        parser = StreamParser()
        covered = parser.feed(data[: position.offset])
        assert 0 < position.offset < len(data)
        assert stored[0] == len(covered) - 1 and stored[1] == covered[-1]["seq"] == position.last_seq
        rollup_n = db.execute("SELECT SUM(n) FROM run_gpus WHERE run_id = 1").fetchone()[0]
        assert rollup_n == stored[0]
        # and the stream resumes from there to the same rows as a clean ingest
        ingestor = Ingestor(db, 1, "s", batch_size=5000)
        ingestor.feed_bytes(data[ingestor.resume_offset :])
        ingestor.flush()
        got = dump(db, 1)
    with open_db(tmp_path / "ref.sqlite") as ref:
        create_run(ref, gpu_count=8)
        ingestor = Ingestor(ref, 1, "s")
        ingestor.feed_bytes(data)
        ingestor.flush()
        assert got == dump(ref, 1)


@pytest.mark.slow  # over the 5 s budget of an unmarked test on a quiet machine (issue 25)
def test_two_readers_and_a_writer_never_see_database_is_locked(tmp_path: Path) -> None:
    db_path = tmp_path / "h.sqlite"
    data = big_stream(60_000)
    with open_db(db_path) as db:
        run_id = create_run(db, gpu_count=8, price_usd_per_gpu_hour=1.0)
    errors: list[BaseException] = []
    done = threading.Event()
    reads = [0, 0]

    def writer() -> None:
        try:
            with open_db(db_path) as db:
                ingestor = Ingestor(db, run_id, "s", batch_size=500)
                for start in range(0, len(data), 32768):
                    ingestor.feed_bytes(data[start : start + 32768])
                ingestor.flush()
                for _ in range(20):  # other writes interleaved with the readers
                    create_run(db, gpu_count=1)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            done.set()

    def reader(slot: int) -> None:
        try:
            seen = 0
            with open_db(db_path) as db:
                while not done.is_set() or reads[slot] < 3:
                    summary = summarize(db, run_id)
                    assert summary.gpu_samples >= seen  # committed batches only ever add up
                    seen = summary.gpu_samples
                    list_runs(db)
                    reads[slot] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert min(reads) >= 3
    with open_db(db_path) as db:
        assert summarize(db, run_id).gpu_samples == 60_000
