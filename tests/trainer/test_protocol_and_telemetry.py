"""The telemetry parser survives garbage and half lines; the writer never crashes and keeps seq rising."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from trainer import protocol
from trainer.telemetry import StepRateLimiter, Telemetry, last_seq


def _line(seq: int, kind: str = "step", **extra: object) -> bytes:
    fields = {"step": seq, "loss": 1.0, "tokens_total": 10, "samples_total": 1, "step_time_s": 0.1}
    fields = fields if kind == "step" else {}
    return protocol.encode(protocol.make_record(kind, seq, 1.0, **fields, **extra)).encode()


def test_parser_skips_garbage_unknown_kinds_and_holds_half_lines() -> None:
    good = [_line(i) for i in range(3)]
    unknown = json.dumps({"v": 1, "seq": 9, "t": 1.0, "kind": "mystery"}).encode() + b"\n"
    stream = good[0] + b"garbage\n" + b"\xff\xfe\n" + good[1] + unknown + b'{"v":1,"seq":\n' + good[2][:10]
    parser = protocol.StreamParser()
    records = parser.feed(stream)
    assert [r["seq"] for r in records] == [0, 1]
    assert parser.malformed == 3 and parser.unknown_kind == 1
    assert parser.pending_bytes == 10
    assert parser.offset == len(stream) - 10
    assert [r["seq"] for r in parser.feed(good[2][10:])] == [2]
    assert parser.pending_bytes == 0


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50))
def test_parser_never_raises_on_random_bytes_and_any_chunking(noise: bytes, chunk: int) -> None:
    data = _line(0) + noise + b"\n" + _line(1)
    parser = protocol.StreamParser()
    seqs = []
    for i in range(0, len(data), chunk):
        seqs += [r["seq"] for r in parser.feed(data[i : i + chunk])]
    assert seqs[0] == 0 and seqs[-1] == 1


def test_writer_continues_seq_and_repairs_a_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(_line(0) + _line(1) + b'{"v":1,"seq":2,"t":1.0,"ki')  # killed mid-line
    assert last_seq(path) == 1
    tele = Telemetry(path)
    tele.emit("resumed", step=3)
    tele.close()
    parser = protocol.StreamParser()
    records = parser.feed(path.read_bytes())
    assert [r["seq"] for r in records] == [0, 1, 2]
    assert parser.malformed == 1 and parser.pending_bytes == 0


class _ClosedStdout(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError("closed")


def test_closed_stdout_and_unwritable_file_do_not_crash(tmp_path: Path, capsys) -> None:
    tele = Telemetry(tmp_path / "events.jsonl", stdout=_ClosedStdout())
    for i in range(5):
        tele.emit("resumed", step=i)
    tele.close()
    assert len(Path(tmp_path / "events.jsonl").read_text().splitlines()) == 5
    assert capsys.readouterr().err.count("stdout closed") == 1
    # The events path is a directory: the file cannot be opened; emitting still works.
    bad = tmp_path / "dir.jsonl"
    bad.mkdir()
    out = io.StringIO()
    tele = Telemetry(bad, stdout=out)
    assert tele.emit("resumed", step=1)["seq"] == 0
    tele.close()
    assert '"kind":"resumed"' in out.getvalue()


def test_full_disk_is_reported_once(tmp_path: Path, capsys) -> None:
    tele = Telemetry(tmp_path / "events.jsonl")

    class Full(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError(28, "No space left on device")

    tele._fh.close()
    tele._fh = Full()
    for i in range(4):
        tele.emit("resumed", step=i)
    assert tele.seq == 4
    assert capsys.readouterr().err.count("No space left") == 1


def test_step_rate_limiter() -> None:
    lim = StepRateLimiter(every=1, interval_s=1.0)
    times = [0.0, 0.1, 0.5, 1.05, 1.2, 2.1]
    assert [lim.due(i, t) for i, t in enumerate(times)] == [True, False, False, True, False, True]
    assert lim.due(99, 2.2, force=True)
