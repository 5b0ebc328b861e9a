"""Why a run failed: the trainer's error and the tail of its stderr, kept in the run history.

No Qt here; the Runs pane calls these on its controller's worker thread.

Storage (no schema change): one launcher event of kind ``failure`` in the history's ``events`` table
(negative ``seq`` like the launcher's own ``restart`` events, so it never collides with the trainer's
records), whose ``detail_json`` holds ``{"error", "exit_code", "stderr_tail", "host", "run_dir"}``. The
trainer's own ``run_end`` event keeps its ``error`` field as before; the failure event adds what only
the host's ``TAG.err`` file had (tracebacks, import errors, a bad flag before telemetry started).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

FAILURE_KIND = "failure"
TAIL_LINES = 40
TAIL_BYTES = 16 * 1024
CHUNK = 256 * 1024
MAX_READ = 64 * 1024 * 1024  # a runaway stderr: the tail of its first 64 MiB is still the answer


def tail_text(data: bytes, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of ``data`` (decoded leniently, carriage-return progress bars folded)."""
    text = data.decode("utf-8", errors="replace")
    kept = [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]
    kept = [line for line in kept if line.strip()]
    return "\n".join(kept[-lines:])


def read_tail(read: Callable[[str, int, int], bytes], path: str, keep: int = TAIL_BYTES) -> bytes:
    """The last ``keep`` bytes of a file through a backend's ``read(path, offset, size)`` (b"" if none)."""
    offset, tail = 0, b""
    while offset < MAX_READ:
        chunk = read(path, offset, CHUNK)
        if not chunk:
            break
        offset += len(chunk)
        tail = (tail + chunk)[-keep:]
    return tail


def error_line(tail: str) -> str | None:
    """The most telling line of a stderr tail: the last exception line or "trainer: ..." message."""
    for line in reversed(tail.splitlines()):
        stripped = line.strip()
        if stripped.startswith("trainer:") or (
            ":" in stripped and stripped.split(":", 1)[0].replace(".", "").isidentifier() and "Error" in stripped
        ):
            return stripped
    return None


def run_end_error(db: Any, run_id: int) -> tuple[str | None, int | None]:
    """The trainer's ``run_end`` error and exit code, when it wrote one."""
    row = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_end' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    detail = _load(row[0]) if row else {}
    code = detail.get("exit_code")
    return (str(detail["error"]) if detail.get("error") else None), (code if isinstance(code, int) else None)


def _load(raw: Any) -> dict[str, Any]:
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def load_failure(db: Any, run_id: int) -> dict[str, Any] | None:
    """The stored failure of a run (its newest ``failure`` event), else the ``run_end`` error, else None."""
    row = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = ? ORDER BY t DESC LIMIT 1", [run_id, FAILURE_KIND]
    ).fetchone()
    if row:
        return _load(row[0])
    error, code = run_end_error(db, run_id)
    if error:
        return {"error": error, "exit_code": code, "stderr_tail": ""}
    return None


def record_event(db: Any, run_id: int, kind: str, detail: dict[str, Any]) -> None:
    """A window event in the history's ``events`` table (negative ``seq``, as the launcher's own events)."""
    from gpuplanner.history.db import write_transaction

    with write_transaction(db):
        low = db.execute("SELECT MIN(seq) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
        seq = min(-1, (low or 0) - 1)
        db.execute(
            "INSERT INTO events (run_id, seq, t, kind, step, detail_json) VALUES (?,?,?,?,?,?)",
            [run_id, seq, time.time(), kind, None, json.dumps(detail)],
        )


def record_failure(db: Any, run_id: int, detail: dict[str, Any]) -> None:
    """Keep ``detail`` as the run's ``failure`` event (one per failed attempt: a resumed run may fail again)."""
    record_event(db, run_id, FAILURE_KIND, detail)


def stopped_by_user(db: Any, run_id: int) -> bool:
    """Whether the run's last process ended because the user pressed Stop (a ``user_stop`` event after its
    newest ``run_start``): the history keeps such a run as "preempted", the window calls it "stopped"."""
    row = db.execute(
        "SELECT MAX(CASE WHEN kind = 'user_stop' THEN t END), MAX(CASE WHEN kind = 'run_start' THEN t END)"
        " FROM events WHERE run_id = ?",
        [run_id],
    ).fetchone()
    return bool(row and row[0] is not None and (row[1] is None or row[0] >= row[1]))


def collect_failure(
    manager: Any, db_path: Any, run_id: int, host: str, run_dir: str, exit_code: int | None, tag: str = "node0"
) -> dict[str, Any]:
    """Read the stderr tail from the run's host, combine it with the trainer's error, store and return it.

    Runs on a worker thread. The host is read through the launcher's backend for it (the connection the
    run already uses); a host that cannot be reached leaves the tail empty and says so."""
    from gpuplanner.history.db import connect

    tail, problem = "", None
    if run_dir:
        try:
            backend = manager._backend(host)  # the launcher's connection to the run's host
            tail = tail_text(read_tail(backend.read, f"{run_dir}/{tag}.err"))
            forget = getattr(backend, "forget_file", None)
            if forget is not None:
                forget(f"{run_dir}/{tag}.err")
        except Exception as exc:  # unreachable host, permissions: the error alone is still worth keeping
            problem = f"could not read {run_dir}/{tag}.err on {host}: {exc}"
    db = connect(db_path)
    try:
        error, code = run_end_error(db, run_id)
        detail = {
            "error": error or error_line(tail) or (f"exit code {exit_code}" if exit_code is not None else None),
            "exit_code": exit_code if exit_code is not None else code,
            "stderr_tail": tail,
            "host": host,
            "run_dir": run_dir,
        }
        if problem:
            detail["stderr_problem"] = problem
        record_failure(db, run_id, detail)
    finally:
        db.close()
    return detail
