"""The watcher's reader of a node's job output (:class:`LogStream`) over the real local backend and a real
history file: each poll reads a bounded amount, the history keeps only the tail with the offset read, and
a new reader (the app restarted) goes on from there; another file (a failover) starts at its beginning."""

from __future__ import annotations

from pathlib import Path

from gpuplanner.history.db import open_db
from gpuplanner.history.run_logs import LOG_TAIL_BYTES, load_log_tail
from gpuplanner.history.runs import create_run, delete_run
from gpuplanner.launch.hosts import Host
from gpuplanner.launch.local_backend import LocalBackend
from gpuplanner.launch.log_streaming import MAX_PER_POLL, LogStream


def test_output_is_read_in_bounded_polls_and_its_tail_kept_across_readers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = run_dir / "node0.out"
    lines = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.6 MB
    out.write_bytes(lines)
    backend = LocalBackend(Host(name="local", kind="local"), tmp_path / "runs")
    with open_db(tmp_path / "h.sqlite") as db:
        run_id = create_run(db, host="local")
        stream = LogStream(db, run_id, 0, "local", str(run_dir), "node0", "out")
        first = stream.poll(backend)
        assert len(first) == MAX_PER_POLL and first == lines[:MAX_PER_POLL]  # bounded: the rest next time
        while stream.poll(backend, final=True):
            pass
        stored = load_log_tail(db, run_id, 0, "out")
        assert stored is not None and stored.offset == len(lines) and stored.cut
        assert len(stored.data) <= LOG_TAIL_BYTES and lines.endswith(stored.data)
        assert stored.data.startswith(b"line ")  # cut at a line's start

        with open(out, "ab") as fh:
            fh.write(b"after a restart\n")
        again = LogStream(db, run_id, 0, "local", str(run_dir), "node0", "out")  # a new watcher
        assert again.poll(backend, final=True) == b"after a restart\n"  # only what is new
        assert load_log_tail(db, run_id, 0, "out").data.endswith(b"line 0299999\nafter a restart\n")

        moved = tmp_path / "other"
        moved.mkdir()
        (moved / "node0.out").write_bytes(b"on the fallback host\n")
        elsewhere = LogStream(db, run_id, 0, "local", str(moved), "node0", "out")
        assert elsewhere.poll(backend, final=True) == b"on the fallback host\n"  # read from its start
        kept = load_log_tail(db, run_id, 0, "out")
        assert kept.data.endswith(b"after a restart\non the fallback host\n") and kept.offset == 21

        delete_run(db, run_id)  # the kept output goes with its run
        assert db.execute("SELECT COUNT(*) FROM run_logs").fetchone()[0] == 0
