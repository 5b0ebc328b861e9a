"""A real OpenSSH server for tests: ``/usr/sbin/sshd`` on a free loopback port, keys in a temp dir.

Reusable outside ``tests/launch`` (e.g. the trainer's ``sftp://`` mirror tests)::

    server = SSHServer(tmp_path / "sshd", address="127.0.0.1").start()
    server.client_key        # private key accepted for root (authorized_keys in the temp dir)
    server.known_hosts_line  # "[127.0.0.1]:PORT ssh-ed25519 AAAA..." to trust the host key
    server.cut_connections() # kill the per-connection sshd processes (the listener stays)
    server.authorize(pub)    # accept one more public key (e.g. a passphrase-protected one)
    server.stop()

``options`` are sshd_config lines that take precedence over the defaults (sshd uses the first value
of a keyword), e.g. ``SSHServer(folder, options=["AllowTcpForwarding no"])``.

Nothing outside the given folder is touched except ``/run/sshd`` (sshd's privilege separation dir).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"


def available() -> bool:
    return Path(SSHD).is_file() and os.geteuid() == 0


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def keygen(path: Path, comment: str = "gpuplanner-test", passphrase: str = "") -> Path:
    if path.exists():
        path.unlink()
        Path(f"{path}.pub").unlink(missing_ok=True)
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path)], check=True)
    return path


def fingerprint(pub_path: Path) -> str:
    """``SHA256:...`` of a public key file, as ssh-keygen prints it."""
    out = subprocess.run(
        [SSH_KEYGEN, "-l", "-E", "sha256", "-f", str(pub_path)], check=True, capture_output=True, text=True
    ).stdout
    return out.split()[1]


class SSHServer:
    def __init__(
        self,
        folder: Path,
        address: str = "127.0.0.1",
        client_key: Path | None = None,
        options: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.address = address
        self.port = 0
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.client_key = client_key or self.dir / "client_key"
        self.authorized_keys = self.dir / "authorized_keys"
        self.config = self.dir / "sshd_config"
        self.log = self.dir / "sshd.log"
        self.options = list(options)
        self.extra_keys: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None

    # -- keys -------------------------------------------------------------------------------------
    def _keys(self) -> None:
        if not self.host_key.exists():
            keygen(self.host_key, "test-host")
        if not self.client_key.exists():
            keygen(self.client_key)
        self._write_authorized_keys()

    def _write_authorized_keys(self) -> None:
        lines = [Path(f"{self.client_key}.pub").read_text().strip(), *self.extra_keys]
        self.authorized_keys.write_text("\n".join(lines) + "\n")

    def authorize(self, pub_path: Path) -> None:
        """Accept the key of ``pub_path`` (a ``.pub`` file) too; sshd reads authorized_keys per login."""
        self.extra_keys.append(Path(pub_path).read_text().strip())
        if self.client_key.exists():
            self._write_authorized_keys()

    def new_host_key(self) -> None:
        """Replace the host key (a restart is needed for sshd to use it)."""
        keygen(self.host_key, "test-host-new")

    @property
    def host_key_fingerprint(self) -> str:
        return fingerprint(Path(f"{self.host_key}.pub"))

    @property
    def known_hosts_line(self) -> str:
        key_type, blob = Path(f"{self.host_key}.pub").read_text().split()[:2]
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{name} {key_type} {blob}\n"

    # -- process ----------------------------------------------------------------------------------
    def _write_config(self) -> None:
        self.config.write_text(
            "\n".join(
                [
                    *self.options,
                    f"Port {self.port}",
                    f"ListenAddress {self.address}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "StrictModes no",
                    "PermitRootLogin yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PubkeyAuthentication yes",
                    "Subsystem sftp internal-sftp",
                    "AllowTcpForwarding yes",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "LogLevel VERBOSE",
                    "PrintMotd no",
                    "ClientAliveInterval 0",
                    "",
                ]
            )
        )

    def start(self, port: int | None = None, attempts: int = 5) -> SSHServer:
        self._keys()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for _ in range(attempts):
            self.port = port or free_port(self.address)
            self._write_config()
            log = open(self.log, "ab")
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
            log.close()
            if self._wait_ready(10.0):
                return self
            self.stop()
            if port:
                break
        raise RuntimeError(f"sshd did not start: {self.log.read_text()[-2000:]}")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection((self.address, self.port), timeout=1.0) as s:
                    s.settimeout(2.0)
                    if s.recv(64).startswith(b"SSH-"):
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener)."""
        if self.proc is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                pids.append(int(entry.name))
        return pids

    def cut_connections(self) -> int:
        """Kill every per-connection sshd process, dropping the clients' TCP connections; returns how many."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.cut_connections()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        port = self.port
        self.stop()
        self.start(port=port)

    def __enter__(self) -> SSHServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
