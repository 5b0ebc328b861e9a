"""`runs import RUN_DIR` of a run that `gpuplanner run` launched (issue 13, item 9): it finds that run,
during the run and after it, and stores nothing twice. A real tiny CPU training run."""

from __future__ import annotations

import io
import json
import os
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.launch.manager import RunManager
from tests.launch.conftest import rows, train_flags

pytestmark = pytest.mark.slow


def import_json(db_path: Path, target: Path) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["runs", "import", str(target), "--db", str(db_path), "--json"])
    assert code == 0
    return json.loads(out.getvalue())


def test_import_of_a_launched_run_dir(db_path: Path, model_config: Path, tmp_path: Path) -> None:
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", train_flags(model_config, steps=40))
    run_dir = tmp_path / "runs" / str(run_id)
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not events.exists() or b'"kind":"step"' not in events.read_bytes()):
        time.sleep(0.1)
    during = import_json(db_path, run_dir)  # while the run trains and its watcher stores the same stream
    assert during["run_id"] == run_id
    status = manager.wait(run_id, 180)
    assert status.state == "finished"
    manager.close()
    after = import_json(db_path, run_dir)
    assert after["run_id"] == run_id and after["inserted"] == 0 and after["status"] == "finished"
    assert rows(db_path, "SELECT COUNT(*) FROM runs") == [(1,)]
    seqs = [r[0] for r in rows(db_path, "SELECT seq FROM steps WHERE run_id = ? ORDER BY seq", run_id)]
    assert len(seqs) == 40 and len(set(seqs)) == 40
    lines = (run_dir / "events.jsonl").read_bytes().count(b"\n")
    stored = (
        sum(
            rows(db_path, f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", run_id)[0][0]
            for t in ("steps", "evals", "gpu_samples")
        )
        # the trainer's records (seq >= 0); the launcher's own (billed span, pre-flight check) have negative seq
        + rows(db_path, "SELECT COUNT(*) FROM events WHERE run_id = ? AND seq >= 0", run_id)[0][0]
    )
    assert stored == lines  # every line of the file stored exactly once
    # and the launcher's own records, which are not lines of the file: one billed span and one pre-flight check
    launcher = rows(db_path, "SELECT kind, COUNT(*) FROM events WHERE run_id = ? AND seq < 0 GROUP BY kind", run_id)
    assert dict(launcher) == {"billed": 1, "preflight": 1}
    # one stream position: the watcher's, shared with the import
    assert len(rows(db_path, "SELECT source FROM stream_positions WHERE run_id = ?", run_id)) == 1


def test_live_watcher_survives_a_poisoned_record(db_path: Path, model_config: Path, tmp_path: Path) -> None:
    """A record with impossible values lands in a running run's events file (issue 13, item 7): the live
    watcher skips and counts it, keeps storing the run, and the run ends finished."""
    manager = RunManager(db_path, local_runs_root=tmp_path / "runs")
    run_id = manager.launch("local", train_flags(model_config, steps=60))
    events = tmp_path / "runs" / str(run_id) / "events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not events.exists() or b'"kind":"step"' not in events.read_bytes()):
        time.sleep(0.05)
    poison = b'{"v":1,"seq":999999,"t":1763800000,"kind":"gpu","index":1e30,"util_pct":NaN,"mem_used_bytes":1,"mem_total_bytes":1}\n'
    fd = os.open(events, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, poison)  # one write of one whole line, as the trainer writes its lines
    finally:
        os.close(fd)
    status = manager.wait(run_id, 180)
    manager.close()
    assert status.state == "finished"
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("finished",)]
    assert len(rows(db_path, "SELECT seq FROM steps WHERE run_id = ?", run_id)) == 60
    assert rows(db_path, "SELECT SUM(malformed) FROM stream_positions WHERE run_id = ?", run_id) == [(1,)]
    assert rows(db_path, "SELECT COUNT(*) FROM gpu_samples WHERE seq = 999999") == [(0,)]
