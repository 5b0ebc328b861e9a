"""This machine: runs as child processes in their own session, run dirs under the user's data dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from gpuplanner.launch.backend import ProcessState
from gpuplanner.launch.hosts import Host
from gpuplanner.launch.payload import local_payload
from gpuplanner.launch.probe_check import CHECK_CODE, missing_report
from gpuplanner.paths import data_dir


# Children started by this process, shared by every backend instance: a Popen is never dropped
# while its process runs (and a child is reaped, never left a zombie), even after the manager that
# started it closed and another one attached.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def read_exit_file(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class LocalBackend:
    def __init__(self, host: Host, runs_root: str | os.PathLike[str] | None = None) -> None:
        self.host = host
        self.name = host.name
        self.runs_root = Path(runs_root) if runs_root else data_dir() / "runs"
        self.python = host.python or sys.executable

    def connect(self) -> None:
        pass

    def is_connected(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def run_dir(self, run_id: int) -> str:
        return str(self.runs_root / str(run_id))

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(extra)
        payload = local_payload()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (payload.pythonpath, env.get("PYTHONPATH")) if p)
        return env

    def start(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> int:
        folder = Path(run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        payload = local_payload()
        command = [self.python, payload.wrapper, run_dir, tag, "--", self.python, *args]
        with open(folder / f"{tag}.out", "ab") as out, open(folder / f"{tag}.err", "ab") as err:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self._env(env),
                                    start_new_session=True, close_fds=True)
        with _CHILDREN_LOCK:
            _CHILDREN[proc.pid] = proc
        return proc.pid

    def signal(self, pgid: int, signame: str) -> None:
        try:
            os.killpg(pgid, getattr(signal, f"SIG{signame}"))
        except ProcessLookupError:
            pass

    def state(self, run_dir: str, tag: str, pgid: int) -> ProcessState:
        with _CHILDREN_LOCK:
            proc = _CHILDREN.get(pgid)
        alive = proc.poll() is None if proc is not None else _pid_alive(pgid)
        if alive:
            return ProcessState(True)
        with _CHILDREN_LOCK:
            _CHILDREN.pop(pgid, None)
        return ProcessState(False, read_exit_file(Path(run_dir) / f"{tag}.exit"))

    def read(self, path: str, offset: int, size: int) -> bytes:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(size)
        except FileNotFoundError:
            return b""

    def probe(self) -> dict[str, Any]:
        env = self._env({})
        check = subprocess.run([self.python, "-c", CHECK_CODE], capture_output=True, text=True, env=env, timeout=60)
        report = missing_report(check.stdout, self.python)
        if report["missing"]:
            return {"ok": False, **report}
        out = subprocess.run([self.python, "-m", "trainer", "probe", "--run-root", str(self.runs_root)],
                             capture_output=True, text=True, env=env, timeout=300)
        if out.returncode != 0:
            return {"ok": False, **report, "error": out.stderr.strip()[-2000:]}
        return {"ok": True, **json.loads(out.stdout), **report}
