"""One run per stream, whatever the order and concurrency (issue 13, item 9): several processes
importing, listing and deleting on one history file never duplicate a run, never lose a record and
never print a traceback; importing the run directory of a launched run finds that run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.runs import create_run, get_run, run_for_stream
from gpuplanner.history.tail import ingest_file
from tests.conftest import REPO_ROOT
from tests.history.streams import StreamBuilder

CHILD = r"""
import io, json, sqlite3, sys, time, contextlib
from pathlib import Path
from gpuplanner import cli
cli.COMMAND_MODULES = ("gpuplanner.commands.runs",)
role, db, events, go, rounds = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
ready, imports_done = Path(sys.argv[6]), go.with_name("imports_done")
ready.touch()  # imported and at the start line
while not go.exists():
    time.sleep(0.005)
results = []
for i in range(rounds):
    if role == "import":
        argv = ["runs", "import", events, "--db", db, "--json"]
    elif role == "list":
        argv = ["runs", "list", "--db", db, "--json"]
    else:  # delete a run the imports made: waits for one while an import may still make it (a loaded
        # machine cannot leave nothing to delete), not once every importer has finished
        ids = []
        while True:
            done = imports_done.exists()  # read before the runs, so a run made last is still seen
            conn = sqlite3.connect(db, timeout=30)
            ids = [r[0] for r in conn.execute("SELECT id FROM runs")]
            conn.close()
            if ids or done:
                break
            time.sleep(0.01)
        argv = ["runs", "delete", str(ids[0] if ids else 1), "--db", db]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    results.append({"role": role, "code": code, "out": out.getvalue(), "err": err.getvalue()})
    if role == "list":
        conn = sqlite3.connect(db, timeout=30)
        results[-1]["runs"] = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        conn.close()
print(json.dumps(results))
"""


def stream(n: int) -> bytes:
    s = StreamBuilder()
    s.add("run_start", 0, config={"model_name": "m"}, gpus=2)
    for i in range(n):
        s.gpu(i * 0.5, i % 2, 70.0)
        if i % 4 == 0:
            s.step(i * 0.5 + 0.1, i // 4 + 1, samples_total=i + 1, tokens_total=100 * (i + 1))
    s.add("run_end", n, status="finished")
    return s.data()


def start_children(tmp_path: Path, db: Path, events: Path, roles: list[tuple[str, int]]) -> list[dict]:
    """Run the children from one start line (each says it is ready; then ``go``); ``imports_done`` appears
    once every importer has exited, so a deleter stops waiting for a run that nobody will make."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    ready = [tmp_path / f"ready-{i}" for i in range(len(roles))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, role, str(db), str(events), str(go), str(rounds), str(ready[i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO_ROOT,
        )
        for i, (role, rounds) in enumerate(roles)
    ]
    while not all(r.exists() for r in ready):  # a state, not a clock: every child is at the start line
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    outputs: dict[int, bytes] = {}
    for i in sorted(range(len(procs)), key=lambda i: roles[i][0] != "import"):  # the importers first
        out, err = procs[i].communicate(timeout=300)
        assert procs[i].returncode == 0, err.decode()
        assert b"Traceback" not in err, err.decode()
        outputs[i] = out
        if all(j in outputs for j, (role, _) in enumerate(roles) if role == "import"):
            (tmp_path / "imports_done").touch()
    results = [record for i in range(len(procs)) for record in json.loads(outputs[i])]
    for result in results:
        assert "Traceback" not in result["err"], result
    return results


def stored(db_path: Path) -> tuple[int, int, int]:
    with open_db(db_path) as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        samples = db.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
        steps = db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    return runs, samples, steps


def test_simultaneous_imports_of_one_file_make_one_run(tmp_path: Path) -> None:
    events = tmp_path / "run" / "events.jsonl"
    events.parent.mkdir()
    events.write_bytes(stream(4000))
    db = tmp_path / "h.sqlite"
    open_db(db).close()
    results = start_children(tmp_path, db, events, [("import", 2)] * 4)
    assert all(r["code"] == 0 for r in results), results
    run_ids = {json.loads(r["out"])["run_id"] for r in results}
    assert run_ids == {1}
    assert sum(json.loads(r["out"])["inserted"] for r in results) == 4000 + 1000 + 2  # each record stored once
    assert stored(db) == (1, 4000, 1000)


@pytest.mark.slow
def test_imports_lists_and_deletes_at_once(tmp_path: Path) -> None:
    events = tmp_path / "run" / "events.jsonl"
    events.parent.mkdir()
    events.write_bytes(stream(3000))
    db = tmp_path / "h.sqlite"
    open_db(db).close()
    results = start_children(
        tmp_path, db, events, [("import", 4), ("import", 4), ("import", 4), ("list", 8), ("delete", 4)]
    )
    for r in results:
        if r["role"] == "import":  # stored, or the run was deleted under it: one clear line
            assert r["code"] == 0 or (r["code"] == 1 and "was deleted" in r["err"] or "no run with id" in r["err"]), r
        elif r["role"] == "list":
            assert r["code"] == 0 and r["runs"] <= 1, r
            assert len(json.loads(r["out"])) <= 1
        else:
            assert r["code"] == 0 or (r["code"] == 1 and "no run with id" in r["err"]), r
    assert any(r["role"] == "delete" and r["code"] == 0 for r in results)
    # after the storm: one more import leaves exactly one run holding every record exactly once
    code = cli.main(["runs", "import", str(events), "--db", str(db), "--json"])
    assert code == 0
    assert stored(db) == (1, 3000, 750)
    with open_db(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM run_streams").fetchone()[0] == 1
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_import_of_a_launched_runs_directory_finds_that_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run started by `gpuplanner run` records its nodes' run directories; importing one adds to it."""
    run_dir = tmp_path / "runs" / "1"
    run_dir.mkdir(parents=True)
    (run_dir / "events.jsonl").write_bytes(stream(40))
    db_file = tmp_path / "h.sqlite"
    watcher_source = f"local:{run_dir}/events.jsonl"  # gpuplanner.launch.streaming.source_name
    with open_db(db_file) as db:
        launched = create_run(
            db,
            host="local",
            gpu_count=2,
            source="launch:local",
            launch={"trainer_args": [], "launch": {"nodes": [{"host": "local", "run_dir": str(run_dir), "tag": "n0"}]}},
        )
        create_run(db, source="launch:local", launch={"launch": {"nodes": [{"host": "local", "run_dir": "/x/2"}]}})
        half = stream(40)[: len(stream(40)) // 2]
        (tmp_path / "half.jsonl").write_bytes(half[: half.rindex(b"\n") + 1])
        ingest_file(db, launched, tmp_path / "half.jsonl", source=watcher_source)  # what the watcher stored
    for target in (run_dir, run_dir / "events.jsonl", run_dir / ".." / "1"):
        code = cli.main(["runs", "import", str(target), "--db", str(db_file), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["run_id"] == launched
    with open_db(db_file) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
        assert get_run(db, launched).status == "finished"
        assert db.execute("SELECT COUNT(*) FROM gpu_samples WHERE run_id = ?", [launched]).fetchone()[0] == 40
        # one stream position, the watcher's: offsets and malformed counts are shared, not doubled
        assert db.execute("SELECT source FROM stream_positions").fetchall() == [(watcher_source,)]
        assert run_for_stream(db, run_dir / "events.jsonl")[:2] == (launched, watcher_source)


def test_migration_gives_each_imported_source_to_its_oldest_run(tmp_path: Path) -> None:
    """A v2 history with two runs for one source (what concurrent imports used to leave) migrates: the
    oldest owns the stream, nothing is deleted, and the next import uses it."""
    from gpuplanner.history.db import connect
    from gpuplanner.history.schema import MIGRATIONS

    path = tmp_path / "h.sqlite"
    events = tmp_path / "events.jsonl"
    events.write_bytes(stream(8))
    db = connect(path)
    MIGRATIONS.apply(db, stop_before="m003_run_streams")
    db.execute("PRAGMA user_version = 2")
    for _ in range(2):
        db.execute("INSERT INTO runs (status, source, created_at) VALUES ('running', ?, 1)", [str(events.resolve())])
    db.execute("INSERT INTO runs (status, source, created_at) VALUES ('running', 'launch:box', 1)")
    db.conn.commit()
    db.close()
    with open_db(path) as db:
        assert db.execute("SELECT source, run_id FROM run_streams").fetchall() == [(str(events.resolve()), 1)]
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3
        assert run_for_stream(db, events)[:2] == (1, str(events.resolve()))
    assert len(list(tmp_path.glob("h.sqlite.v2-*.bak"))) == 1
