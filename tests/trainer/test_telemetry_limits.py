"""The monitor's and the history's telemetry readers under hostile input (issue 27 item 9): a line that never
ends or is huge is read once, incrementally, with a bounded buffer and skipped with one warning; a record
with ``t`` 1e300 or ``seq`` 2^63 is rejected alone, the good records around it kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner.history import open_db
from gpuplanner.history.ingest import Ingestor
from gpuplanner.history.runs import create_run
from tests.conftest import REPO_ROOT
from trainer.protocol import MAX_LINE_BYTES, StreamParser
from trainer.user_records import MAX_LINE_BYTES as USER_MAX_LINE
from trainer.user_records import READ_SIZE, UserRecords

STEP = {"v": 1, "kind": "step", "loss": 1.0, "tokens_total": 10, "samples_total": 1, "step_time_s": 0.1}


def _step(seq: int, step: int, t: float = 1.7e9) -> bytes:
    return (json.dumps({**STEP, "seq": seq, "t": t, "step": step}) + "\n").encode()


def test_user_records_read_a_line_without_newline_once_with_a_bounded_buffer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "user.jsonl"
    path.write_bytes(_step(0, 1))
    reader = UserRecords(path)
    assert [r["step"] for r in reader.poll()] == [1]
    piece = b"x" * (300 * 1024)
    for _ in range(40):  # 12 MiB of one line that has no newline yet
        with open(path, "ab") as fh:
            fh.write(piece)
        assert reader.poll() == []
        assert reader.pending_bytes <= USER_MAX_LINE  # never the whole line in memory
        assert reader.offset == path.stat().st_size  # each poll read only what the file gained
    assert reader.poll() == [] and reader.offset == path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b"\n" + _step(1, 2))
    assert [r["step"] for r in reader.poll()] == [2]  # the good record after it is kept
    assert reader.bad == 1 and reader.too_long == 1 and reader.pending_bytes == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "was skipped" in line]
    assert len(warnings) == 1 and f"more than {USER_MAX_LINE // 1024} KiB" in warnings[0]
    # a complete long line written in one go is skipped too, the short one after it read
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"step","pad":"' + b"y" * (2 * USER_MAX_LINE) + b'"}\n' + _step(2, 3))
    got = []
    while not got:  # one poll reads at most READ_PER_POLL
        got = reader.poll()
    assert [r["step"] for r in got] == [3] and reader.too_long == 2
    assert reader.pending_bytes <= USER_MAX_LINE + READ_SIZE


def test_the_stream_parser_skips_an_over_long_line_and_keeps_its_offset() -> None:
    parser = StreamParser()
    first = _step(0, 1)
    records = parser.feed(first)
    chunk = b"z" * (1 << 18)
    for _ in range(24):  # 6 MiB without a newline
        records += parser.feed(chunk)
        assert parser.pending_bytes <= MAX_LINE_BYTES + len(chunk)
    records += parser.feed(b"\n" + _step(1, 2))
    assert [r["step"] for r in records] == [1, 2]
    assert parser.malformed == 1 and "skipped" in (parser.last_error or "")
    assert parser.offset == len(first) + 24 * len(chunk) + 1 + len(_step(1, 2)) and parser.pending_bytes == 0


def test_a_huge_time_or_seq_rejects_that_record_alone(tmp_path: Path) -> None:
    data = _step(0, 1) + _step(1, 2, t=1e300) + _step(2**63, 3) + _step(3, 4)
    with open_db(tmp_path / "h.sqlite") as db:
        run_id = create_run(db)
        ingestor = Ingestor(db, run_id, "test")
        ingestor.feed_bytes(data)
        stats = ingestor.flush()
        steps = [r[0] for r in db.execute("SELECT step FROM steps WHERE run_id = ? ORDER BY seq", [run_id])]
    assert steps == [1, 4]
    assert stats.malformed == 2 and stats.offset == len(data)


def test_the_monitor_rejects_a_huge_time_and_keeps_the_records_around_it(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(
        "import os\n"
        f"lines = {[_step(0, 1).decode(), _step(1, 2, t=1e300).decode(), _step(2**63, 3).decode(), _step(3, 4).decode()]!r}\n"
        "with open(os.environ['GPUPLANNER_TELEMETRY_FILE'], 'a') as fh:\n"
        "    fh.write(''.join(lines))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "exec",
            "--run-dir",
            str(run_dir),
            "--simulate-gpu",
            "--",
            sys.executable,
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "a step record from the command was skipped: bad time 1e+300" in proc.stderr
    records = StreamParser().feed((run_dir / "events.jsonl").read_bytes())
    # the monitor numbers the job's records itself: the job's seq of 2^63 is not the record's
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 3, 4]


_LINE = st.one_of(
    st.integers(0, 10**6).map(lambda i: ("good", _step(i, i))),
    st.binary(max_size=60).map(lambda b: ("bad", b.replace(b"\n", b"") + b"\n")),
    st.integers(USER_MAX_LINE + 1, USER_MAX_LINE + 5000).map(lambda n: ("long", b"{" + b"x" * n + b"}\n")),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE, max_size=12), cuts=st.lists(st.integers(1, 90_000), max_size=8))
def test_user_records_fuzz_nothing_lost_nothing_held_past_the_cap(
    tmp_path: Path, lines: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    """Any mix of good, garbage and over-long lines, written in any pieces: every good record comes back
    once and in order, the buffer never passes the cap, and nothing raises."""
    path = tmp_path / f"user-{abs(hash((tuple(lines), tuple(cuts))))}.jsonl"
    path.unlink(missing_ok=True)
    data = b"".join(line for _, line in lines)
    reader = UserRecords(path)
    got: list[dict[str, object]] = []
    at = 0
    for cut in [*cuts, len(data)]:
        piece = data[at : at + cut]
        at += len(piece)
        with open(path, "ab") as fh:
            fh.write(piece)
        while True:
            before = reader.offset
            got += reader.poll()
            assert reader.pending_bytes <= USER_MAX_LINE
            if reader.offset == before:
                break
    assert reader.offset == len(data)
    assert [r["step"] for r in got] == [json.loads(line)["step"] for kind, line in lines if kind == "good"]
    assert reader.too_long == sum(kind == "long" for kind, _ in lines)


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(_LINE, max_size=12), cuts=st.lists(st.integers(1, 90_000), max_size=8))
def test_stream_parser_fuzz_every_good_record_once_and_the_offset_exact(
    lines: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    """The history's parser, with its own (1 MiB) cap: lines over it are scaled up to pass it."""
    scaled = [(kind, b"{" + b"x" * (MAX_LINE_BYTES + 1) + b"}\n" if kind == "long" else line) for kind, line in lines]
    data = b"".join(line for _, line in scaled)
    parser = StreamParser()
    got: list[dict[str, object]] = []
    at = 0
    for cut in [*cuts, len(data)]:
        got += parser.feed(data[at : at + cut])
        at = min(len(data), at + cut)
        assert parser.pending_bytes <= MAX_LINE_BYTES + cut
    assert parser.offset == len(data) and parser.pending_bytes == 0
    assert [r["step"] for r in got] == [json.loads(line)["step"] for kind, line in scaled if kind == "good"]
    assert parser.malformed + parser.unknown_kind >= sum(kind == "long" for kind, _ in scaled)
