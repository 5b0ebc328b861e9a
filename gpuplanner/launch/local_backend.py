"""This machine: runs as child processes in their own session, run dirs under the user's data dir.

The interpreter is the host's ``python`` when set (an explicit override), otherwise the one
:func:`gpuplanner.trainer_python.find_trainer_python` finds (``$GPUPLANNER_TRAINER_PYTHON``, this
Python unless it is the frozen app, the app's trainer venv, ``python3``); the child's environment is
:func:`gpuplanner.trainer_python.trainer_env` (the shipped trainer sources on ``PYTHONPATH``, without
the app's own Python or bundle settings) plus the run's variables. In the frozen app
``sys.executable`` is the app, not a Python, so it is never used blindly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuplanner import trainer_python
from gpuplanner.launch.backend import ProcessState
from gpuplanner.launch.command_lines import bench_result
from gpuplanner.launch.host_reports import HostProbe, parse_utilisation
from gpuplanner.launch.hosts import Host, HostError
from gpuplanner.launch.payload import local_payload
from gpuplanner.launch.probe_check import CHECK_CODE, missing_report
from gpuplanner.launch.wrapper import STOP_SIGNALS, signal_job
from gpuplanner.paths import data_dir
from trainer.reports import BenchReport, GpuUtilisation

# Children started by this process, shared by every backend instance: a Popen is never dropped
# while its process runs (and a child is reaped, never left a zombie), even after the manager that
# started it closed and another one attached.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


# Interpreters found to work, by the settings that decide the lookup (checking one imports torch: seconds).
_FOUND: dict[tuple[str, str], str] = {}
_FOUND_LOCK = threading.Lock()


class TrainerPythonMissing(HostError):
    """No interpreter on this machine can run the trainer; the message says how to create one."""


def find_python() -> str:
    """The interpreter for local runs (cached per ``$GPUPLANNER_TRAINER_PYTHON`` and ``PATH``)."""
    key = (os.environ.get(trainer_python.ENV_VAR, ""), os.environ.get("PATH", ""))
    with _FOUND_LOCK:
        if key in _FOUND:
            return _FOUND[key]
        lookup = trainer_python.find_trainer_python()
        if lookup.python is None:
            raise TrainerPythonMissing(lookup.message)
        _FOUND[key] = str(lookup.python.executable)
        return _FOUND[key]


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


@contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """Block the stop signals in this thread while it starts a child, which inherits the mask: a stop
    signal sent to the new process group before the wrapper's handlers exist then waits for them
    (:mod:`gpuplanner.launch.wrapper` unblocks them) instead of killing it. Only this thread's mask
    changes, and only for the moment of the start."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
        self._python = host.python  # an explicit override wins; otherwise found on first use
        self._benches: list[subprocess.Popen[str]] = []  # trainer bench processes in progress
        self._bench_lock = threading.Lock()

    @property
    def python(self) -> str:
        """The trainer's interpreter; :class:`TrainerPythonMissing` when there is none."""
        if self._python is None:
            self._python = find_python()
        return self._python

    def connect(self) -> None:
        pass

    def is_connected(self) -> bool:
        return True

    def close(self) -> None:
        """Ends a ``bench`` in progress (its process group); runs are detached and go on."""
        with self._bench_lock:
            procs = list(self._benches)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def run_dir(self, run_id: int) -> str:
        return str(self.runs_root / str(run_id))

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = trainer_python.trainer_env()
        env.update(extra)
        env["PYTHONPATH"] = local_payload().pythonpath  # the shipped trainer sources, whatever extra says
        return env

    def start(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> int:
        python = self.python
        folder = Path(run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        payload = local_payload()
        command = [python, payload.wrapper, run_dir, tag, "--", python, *args]
        with (
            open(folder / f"{tag}.out", "ab") as out,
            open(folder / f"{tag}.err", "ab") as err,
            _stop_signals_blocked(),  # the wrapper starts with them pending, never killed by one
        ):
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self._env(env),
                start_new_session=True,
                close_fds=True,
            )
        with _CHILDREN_LOCK:
            _CHILDREN[proc.pid] = proc
        return proc.pid

    def signal(self, pgid: int, signame: str) -> None:
        """The job's process group and the processes that left it (:func:`wrapper.signal_job`)."""
        signal_job(pgid, getattr(signal, f"SIG{signame}"))

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

    def probe(self) -> HostProbe:
        try:
            python = self.python
        except TrainerPythonMissing as exc:
            return {
                "ok": False,
                "missing": list(trainer_python.REQUIRED_MODULES),
                "error": str(exc),
                "install_hint": trainer_python.how_to_create(),
            }
        env = self._env({})
        check = subprocess.run([python, "-c", CHECK_CODE], capture_output=True, text=True, env=env, timeout=60)
        report = missing_report(check.stdout, python)
        if report["missing"]:
            return {"ok": False, **report}
        out = subprocess.run(
            [python, "-m", "trainer", "probe", "--run-root", str(self.runs_root)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        if out.returncode != 0:
            return {"ok": False, **report, "error": out.stderr.strip()[-2000:]}
        return {"ok": True, **json.loads(out.stdout), **report}

    def gpu_utilisation(self) -> GpuUtilisation:
        out = subprocess.run(
            [self.python, "-m", "trainer.nvml_sampler"], capture_output=True, text=True, env=self._env({}), timeout=60
        )
        if out.returncode != 0:
            raise RuntimeError(f"reading the GPUs' utilisation failed: {out.stderr.strip()[-500:]}")
        return parse_utilisation(out.stdout)

    def bench(self, args: list[str], timeout_s: float) -> BenchReport:
        proc = subprocess.Popen(
            [self.python, "-m", "trainer", "bench", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env({}),
            start_new_session=True,
        )
        with self._bench_lock:
            self._benches.append(proc)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RuntimeError(f"trainer bench did not finish within {timeout_s:.0f} s (stopped)") from None
        finally:
            with self._bench_lock:
                self._benches.remove(proc)
        if proc.returncode < 0:
            raise RuntimeError(f"trainer bench was stopped (signal {-proc.returncode})")
        return bench_result(proc.returncode, stdout, stderr)
