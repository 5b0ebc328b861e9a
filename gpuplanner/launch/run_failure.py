"""A failed run's stderr tail, read from its host and kept in the history (:mod:`gpuplanner.history.failures`).

:class:`~gpuplanner.launch.manager.RunManager` calls :func:`collect_failure` on the run's watcher thread
when a run it launched ends failed (or cannot be started again), before it announces the final state,
so a run launched from ``gpuplanner run``, the window or a sweep is recorded the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.failures import record_failure, run_end_error
from gpuplanner.launch.backend import Backend

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


def collect_failure(
    backend_for: Callable[[str], Backend],
    db: Database,
    run_id: int,
    host: str,
    run_dir: str,
    exit_code: int | None,
    *,
    tag: str = "node0",
    error: str | None = None,
) -> dict[str, Any]:
    """Read the stderr tail of the run's ``tag`` process from ``host`` (through ``backend_for(host)``, the
    launcher's connection), combine it with the trainer's error (or ``error``, the launcher's own
    explanation), store it as the run's failure and return it. A host that cannot be reached leaves the
    tail empty and says so in ``stderr_problem``."""
    tail, problem = "", None
    if run_dir:
        path = f"{run_dir}/{tag}.err"
        try:
            backend = backend_for(host)
            tail = tail_text(read_tail(backend.read, path))
            forget = getattr(backend, "forget_file", None)
            if forget is not None:
                forget(path)
        except Exception as exc:  # unreachable host, permissions: the error alone is still worth keeping
            problem = f"could not read {path} on {host}: {exc}"
    trainer_error, code = run_end_error(db, run_id)
    detail: dict[str, Any] = {
        "error": trainer_error
        or error_line(tail)
        or error
        or (f"exit code {exit_code}" if exit_code is not None else None),
        "exit_code": exit_code if exit_code is not None else code,
        "stderr_tail": tail,
        "host": host,
        "run_dir": run_dir,
    }
    if problem:
        detail["stderr_problem"] = problem
    record_failure(db, run_id, detail)
    return detail
