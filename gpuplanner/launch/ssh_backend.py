"""A host reached over SSH: payload by SFTP, detached runs under ``REMOTE_ROOT/runs/<id>``.

``REMOTE_ROOT`` is ``~/.gpuplanner`` unless the host's ``remote_root``, the manager or ``$GPUPLANNER_REMOTE_ROOT`` says
otherwise (in that order).

Every value put into a remote command line is quoted with :func:`shlex.quote` (``shlex.join``);
environment variable names are checked against ``[A-Za-z_][A-Za-z0-9_]*``. Reading telemetry uses
SFTP reads at an explicit offset, so a reconnect continues exactly where the store stopped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
from typing import Any

import paramiko

from gpuplanner.launch.backend import ProcessState
from gpuplanner.launch.command_lines import bench_result
from gpuplanner.launch.host_reports import HostProbe, parse_utilisation
from gpuplanner.launch.hosts import Host
from gpuplanner.launch.payload import Payload, ensure_remote
from gpuplanner.launch.probe_check import CHECK_CODE, missing_report
from gpuplanner.launch.ssh_connection import PassphraseCallback, SessionOpenError, SSHConnection, SSHError
from trainer.reports import BenchReport, GpuUtilisation

DEFAULT_REMOTE_ROOT = "~/.gpuplanner"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
q = shlex.quote


def env_assignments(env: dict[str, str]) -> list[str]:
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"bad environment variable name {key!r}")
    return [f"{k}={v}" for k, v in env.items()]


class SSHBackend:
    def __init__(
        self,
        host: Host,
        *,
        known_hosts_path: Any = None,
        passphrase_callback: PassphraseCallback | None = None,
        remote_root: str | None = None,
    ) -> None:
        self.host = host
        self.name = host.name
        self.python = host.python or "python3"
        self.known_hosts_path = known_hosts_path
        self.passphrase_callback = passphrase_callback
        self.remote_root_spec = (
            host.remote_root or remote_root or os.environ.get("GPUPLANNER_REMOTE_ROOT") or DEFAULT_REMOTE_ROOT
        )
        self.root = ""
        self.conn: SSHConnection | None = None
        self._payload: Payload | None = None
        self._lock = threading.RLock()  # one SFTP conversation at a time
        self._files: dict[str, paramiko.SFTPFile] = {}
        self.uploaded = False
        self.generation = 0  # counts connections made: which one a failure was seen on

    # -- connection -----------------------------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            if self.conn is not None and self.conn.is_active():
                return
            self.close()
            conn = SSHConnection(
                self.host, known_hosts_path=self.known_hosts_path, passphrase_callback=self.passphrase_callback
            ).connect()
            try:
                spec = self.remote_root_spec
                if spec == "~" or spec.startswith("~/"):
                    home = conn.sftp().normalize(".")
                    spec = home.rstrip("/") + spec[1:]
                self.root = spec.rstrip("/")
            except (OSError, paramiko.SSHException, EOFError) as exc:
                conn.close()
                raise SSHError(f"{self.name}: {exc}") from exc
            self.conn = conn
            self.generation += 1

    def is_connected(self) -> bool:
        return self.conn is not None and self.conn.is_active()

    def close(self) -> None:
        with self._lock:
            for handle in self._files.values():
                try:
                    handle.close()
                except Exception:
                    pass
            self._files.clear()
            if self.conn is not None:
                self.conn.close()
                self.conn = None

    def _conn(self) -> SSHConnection:
        if self.conn is None or not self.conn.is_active():
            raise SSHError(f"{self.name}: not connected")
        return self.conn

    def _run(self, command: str, timeout_s: float, attempts: int = 1) -> tuple[int, str, str]:
        """Run a command on the connection. With ``attempts`` > 1 (starting or signalling a run, which must
        not fail on a connection that can be remade), when no session can be opened (a connection the host
        cut looks alive until paramiko reads the reset) the command never started: drop that connection
        (unless another thread already remade it), connect again and run it again. A watcher's own reads
        keep one attempt, so it sees the cut and counts its reconnect."""
        for attempt in range(attempts):
            with self._lock:
                if attempt and not self.is_connected():
                    self.connect()
                conn, generation = self._conn(), self.generation
            try:
                return conn.run(command, timeout_s=timeout_s)
            except SessionOpenError:
                if attempt == attempts - 1:
                    raise
                self.close_if(generation)
        raise AssertionError("unreachable")

    def close_if(self, generation: int) -> None:
        """Close the connection if it is still the one of ``generation`` (a failure seen on an older
        connection must not close the one another thread has made since)."""
        with self._lock:
            if self.generation == generation:
                self.close()

    def payload(self) -> Payload:
        with self._lock:
            if self._payload is None:
                try:
                    self._payload, self.uploaded = ensure_remote(self._conn().sftp(), self.root)
                except (OSError, paramiko.SSHException, EOFError) as exc:
                    raise SSHError(f"{self.name}: payload upload failed: {exc}") from exc
            return self._payload

    # -- runs -----------------------------------------------------------------------------------
    def run_dir(self, run_id: int) -> str:
        return f"{self.root}/runs/{int(run_id)}"

    def start_command(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> str:
        payload = self.payload()
        assignments = env_assignments({**env, "PYTHONPATH": payload.pythonpath})
        wrapped = [self.python, payload.wrapper, run_dir, tag, "--", self.python, *args]
        # "mkdir ... || exit" first, on its own: "A && B &" would background a subshell, and $! would
        # not be the wrapper's pid (= its process group id after setsid).
        return (
            f"mkdir -p {q(run_dir)} || exit 1; env {shlex.join(assignments)} setsid {shlex.join(wrapped)}"
            f" </dev/null >>{q(f'{run_dir}/{tag}.out')} 2>>{q(f'{run_dir}/{tag}.err')} & echo $!"
        )

    def start(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> int:
        status, out, err = self._run(self.start_command(run_dir, tag, args, env), timeout_s=30, attempts=3)
        lines = out.strip().splitlines()
        if status != 0 or not lines or not lines[-1].isdigit():
            raise SSHError(f"{self.name}: could not start the run (exit {status}): {err.strip()[-500:]}")
        return int(lines[-1])

    def signal(self, pgid: int, signame: str) -> None:
        if not signame.isalnum():
            raise ValueError(f"bad signal name {signame!r}")
        plain = f"kill -{signame} -- -{int(pgid)} 2>/dev/null; true"
        try:  # the group and the processes that left it (wrapper.signal_job); plain kill if that cannot run
            wrapper = self.payload().wrapper
        except SSHError:
            self._run(plain, timeout_s=20, attempts=3)
            return
        command = shlex.join([self.python, wrapper, "--signal", str(int(pgid)), signame])
        self._run(f"{command} 2>/dev/null || {plain}", timeout_s=20, attempts=3)

    def state(self, run_dir: str, tag: str, pgid: int) -> ProcessState:
        exit_file = q(f"{run_dir}/{tag}.exit")
        status, out, _ = self._run(
            f"if kill -0 {int(pgid)} 2>/dev/null; then echo alive; elif [ -f {exit_file} ]; then cat {exit_file};"
            f" else echo gone; fi",
            timeout_s=20,
        )
        text = out.strip()
        if text == "alive":
            return ProcessState(True)
        if text == "gone":  # no process and no exit file: it died without the wrapper noting it
            return ProcessState(False, None)
        try:
            return ProcessState(False, int(json.loads(text)["exit_code"]))
        except (ValueError, KeyError, TypeError):
            # Anything else (an empty answer from a channel cut mid-command, a torn read) says nothing
            # about the process: a lost connection, never "process lost" (which would restart it).
            raise SSHError(f"{self.name}: unclear process state (exit {status}): {text[:200]!r}") from None

    def read(self, path: str, offset: int, size: int) -> bytes:
        with self._lock:
            sftp = self._conn().sftp()
            handle = self._files.get(path)
            try:
                if handle is None:
                    try:
                        handle = sftp.open(path, "rb")
                    except FileNotFoundError:
                        return b""
                    self._files[path] = handle
                handle.seek(offset)
                return handle.read(size)
            except (OSError, paramiko.SSHException, EOFError) as exc:
                self._files.pop(path, None)
                raise SSHError(f"{self.name}: reading {path} failed: {exc}") from exc

    def probe(self) -> HostProbe:
        conn = self._conn()
        status, out, err = conn.run(f"{q(self.python)} -c {q(CHECK_CODE)}", timeout_s=60)
        if status != 0:
            return {
                "ok": False,
                "missing": ["python"],
                "error": err.strip()[-1000:],
                "install_hint": f"install Python 3.11+ on {self.name} or set the host's python path",
            }
        report = missing_report(out, self.python)
        if report["missing"]:
            return {"ok": False, **report}
        payload = self.payload()
        status, out, err = conn.run(
            f"env {q('PYTHONPATH=' + payload.pythonpath)} {q(self.python)} -m trainer probe --run-root {q(self.root)}",
            timeout_s=300,
        )
        if status != 0:
            return {"ok": False, **report, "error": err.strip()[-2000:]}
        return {
            "ok": True,
            **json.loads(out),
            **report,
            "payload": payload.content_hash,
            "payload_uploaded": self.uploaded,
        }

    def gpu_utilisation(self) -> GpuUtilisation:
        payload = self.payload()
        command = f"env {q('PYTHONPATH=' + payload.pythonpath)} {q(self.python)} -m trainer.nvml_sampler"
        status, out, err = self._run(command, timeout_s=60)
        if status != 0:
            raise SSHError(f"{self.name}: reading the GPUs' utilisation failed: {err.strip()[-500:]}")
        return parse_utilisation(out)

    def bench(self, args: list[str], timeout_s: float) -> BenchReport:
        payload = self.payload()
        # `timeout` ends the bench on the host too when our deadline passes (closing the channel would not)
        command = " ".join(
            [
                "timeout",
                "-k",
                "30",
                str(max(1, int(timeout_s))),
                "env",
                q("PYTHONPATH=" + payload.pythonpath),
                q(self.python),
                "-m",
                "trainer",
                "bench",
                *(q(a) for a in args),
            ]
        )
        status, out, err = self._run(command, timeout_s=timeout_s + 60)  # the host's limit decides
        return bench_result(status, out, err, limit_s=timeout_s)
