"""The run manager's connections to hosts: one :class:`~gpuplanner.launch.backend.Backend` per host,
shared by the runs on it, made on first use and re-opened after a failure; and which errors mean that a
connection dropped (:data:`DISCONNECTS`: retry with backoff) or cannot succeed as things are
(:data:`PERMANENT`: a host key, a refused login, a broken host).

Every method may be called from any thread.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import paramiko

from gpuplanner.launch.backend import Backend
from gpuplanner.launch.hosts import Host, HostError, get_host
from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey
from gpuplanner.launch.local_backend import LocalBackend
from gpuplanner.launch.slurm_backend import SlurmBackend
from gpuplanner.launch.ssh_backend import SSHBackend
from gpuplanner.launch.ssh_connection import AuthenticationFailed, PassphraseCallback, SSHError

RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
DISCONNECTS = (SSHError, OSError, EOFError, paramiko.SSHException)
PERMANENT = (UnknownHostKey, ChangedHostKey, AuthenticationFailed, HostError)


def backoff_s(attempt: int) -> float:
    """The wait before reconnect attempt ``attempt`` (0 first), the last step repeating."""
    return RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)]


class Connections:
    """The backends of the hosts stored in the history at ``db_path``. ``remote_root`` and
    ``local_runs_root`` say where run directories and the payload go (see :class:`RunManager
    <gpuplanner.launch.manager.RunManager>`)."""

    def __init__(
        self,
        db_path: Path,
        *,
        passphrase_callback: PassphraseCallback | None = None,
        known_hosts_path: Any = None,
        remote_root: str | None = None,
        local_runs_root: Any = None,
    ) -> None:
        self.db_path = db_path
        self.passphrase_callback = passphrase_callback
        self.known_hosts_path = known_hosts_path
        self.remote_root = remote_root
        self.local_runs_root = local_runs_root
        self._lock = threading.Lock()
        self._backends: dict[str, Backend] = {}

    def make(self, host: Host) -> Backend:
        """A new, not yet connected backend for ``host`` (stored or not), not shared."""
        if host.kind == "local":
            return LocalBackend(host, self.local_runs_root)
        return (SlurmBackend if host.kind == "slurm" else SSHBackend)(
            host,
            known_hosts_path=self.known_hosts_path,
            passphrase_callback=self.passphrase_callback,
            remote_root=self.remote_root,
        )

    def get(self, host_name: str) -> Backend:
        """The connected backend of a stored host (shared by its runs); reconnects if the connection dropped."""
        with self._lock:
            backend = self._backends.get(host_name)
            if backend is None:
                backend = self._backends[host_name] = self.make(get_host(self.db_path, host_name))
        backend.connect()
        return backend

    def drop(self, host_name: str, generation: int | None = None) -> None:
        """Close a host's connection after a failure; with ``generation`` only if it is still the connection
        the failure was seen on (another thread may have reconnected since)."""
        with self._lock:
            backend = self._backends.get(host_name)
        if backend is None:
            return
        close_if = getattr(backend, "close_if", None)
        if generation is not None and close_if is not None:
            close_if(generation)
        else:
            backend.close()

    def close_all(self) -> None:
        """Close every connection; a later :meth:`get` opens a new one."""
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            backend.close()
