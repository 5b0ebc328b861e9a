"""One SSH connection to a host: host key check, key/agent authentication, keepalives, deadlines.

- Authentication: ssh-agent and key files; an encrypted key asks ``passphrase_callback(prompt)``
  (None or an empty answer means "skip this key"). Passwords are never used or stored.
- Every blocking call has a deadline: the TCP connect, the banner, authentication, each command
  (``run``), and SFTP reads (channel timeout). Keepalives detect a dead peer.
- ``run`` drains stdout and stderr while waiting for the exit status, so a chatty command never
  blocks on a full window.
- ProxyJump: ``[user@]host[:port]`` or an alias of the SSH config; the jump host's key is checked too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey, prepare_client

if TYPE_CHECKING:
    from gpuplanner.launch.hosts import Host

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 5
COMMAND_TIMEOUT_S = 60.0
SFTP_TIMEOUT_S = 20.0

PassphraseCallback = Callable[[str], "str | None"]


class SSHError(OSError):
    """The host could not be reached or a command could not run; the message says why."""


class AuthenticationFailed(SSHError):
    """No key (agent or file) was accepted. Not retried: the user must fix keys or the agent."""


def parse_jump(spec: str) -> Host:
    """A ProxyJump value (first hop only) as a Host: an SSH config alias, or ``[user@]host[:port]``."""
    from gpuplanner.launch.hosts import Host, ssh_config_host

    first = spec.split(",")[0].strip()
    alias = ssh_config_host(first)
    if alias is not None:
        return alias
    user, _, rest = first.rpartition("@")
    hostname, port = rest, 22
    if rest.startswith("["):
        hostname, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else 22
    elif rest.count(":") == 1:
        hostname, port_text = rest.split(":")
        port = int(port_text)
    return Host(name=first, kind="ssh", hostname=hostname, port=port, user=user or None)


def load_key(path: str, passphrase_callback: PassphraseCallback | None) -> paramiko.PKey | None:
    """A private key file, asking for its passphrase if it is encrypted; None if the user declines."""
    file = str(Path(path).expanduser())
    try:
        return paramiko.PKey.from_path(file)
    except paramiko.PasswordRequiredException:
        if passphrase_callback is None:
            return None
        passphrase = passphrase_callback(f"Passphrase for key {file}:")
        if not passphrase:
            return None
        try:
            return paramiko.PKey.from_path(file, passphrase=passphrase.encode())
        except paramiko.SSHException as exc:
            raise AuthenticationFailed(f"could not decrypt {file}: {exc}") from exc
    except (OSError, paramiko.SSHException) as exc:
        raise AuthenticationFailed(f"could not read key {file}: {exc}") from exc


class SSHConnection:
    """A connected SSH client to one host; ``run`` and ``sftp`` are safe to use from several threads."""

    def __init__(self, host: Host, *, known_hosts_path: str | Path | None = None,
                 passphrase_callback: PassphraseCallback | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.host = host
        self.known_hosts_path = known_hosts_path
        self.passphrase_callback = passphrase_callback
        self.connect_timeout_s = connect_timeout_s
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHConnection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_lock = threading.RLock()

    # -- connecting -------------------------------------------------------------------------------
    def connect(self) -> SSHConnection:
        """Connect and authenticate; raises UnknownHostKey, ChangedHostKey, AuthenticationFailed, SSHError."""
        host = self.host
        assert host.hostname
        sock = None
        if host.proxy_jump:
            self._jump = SSHConnection(parse_jump(host.proxy_jump), known_hosts_path=self.known_hosts_path,
                                       passphrase_callback=self.passphrase_callback,
                                       connect_timeout_s=self.connect_timeout_s).connect()
            try:
                sock = self._jump.transport.open_channel("direct-tcpip", (host.hostname, host.port),
                                                         ("127.0.0.1", 0), timeout=self.connect_timeout_s)
            except (paramiko.SSHException, OSError) as exc:
                self._jump.close()
                raise SSHError(f"jump host {host.proxy_jump} could not reach {host.hostname}:{host.port}: {exc}") from exc
        client = paramiko.SSHClient()
        self._user_known_hosts = prepare_client(client, host.port, self.known_hosts_path)
        pkey = load_key(host.identity_file, self.passphrase_callback) if host.identity_file else None
        try:
            client.connect(host.hostname, port=host.port, username=host.user, pkey=pkey, sock=sock,
                           allow_agent=True, look_for_keys=pkey is None and not host.identity_file,
                           timeout=self.connect_timeout_s, banner_timeout=self.connect_timeout_s,
                           auth_timeout=self.connect_timeout_s, channel_timeout=self.connect_timeout_s)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise ChangedHostKey(host.hostname, host.port, exc.key, self._user_known_hosts) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            raise AuthenticationFailed(f"{host.name}: authentication failed ({exc}); load a key into ssh-agent "
                                       "or set the host's identity file") from exc
        except UnknownHostKey:
            client.close()
            raise
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise SSHError(f"{host.name}: cannot connect to {host.hostname}:{host.port}: {exc}") from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)
        self._client = client
        return self

    @property
    def transport(self) -> paramiko.Transport:
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            raise SSHError(f"{self.host.name}: not connected")
        return transport

    def is_active(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def close(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:
                    pass
                self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._jump is not None:
            self._jump.close()
            self._jump = None

    # -- commands -------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        """Run a shell command; returns (exit status, stdout, stderr). Raises SSHError after the deadline."""
        deadline = time.monotonic() + timeout_s
        try:
            channel = self.transport.open_session(timeout=self.connect_timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise SSHError(f"{self.host.name}: cannot open a session: {exc}") from exc
        out, err = bytearray(), bytearray()
        try:
            channel.settimeout(1.0)
            channel.exec_command(command)
            channel.shutdown_write()
            while True:
                progressed = False
                while channel.recv_ready():
                    out += channel.recv(65536)
                    progressed = True
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    progressed = True
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if channel.closed and not channel.exit_status_ready():
                    raise SSHError(f"{self.host.name}: connection lost while running a command")
                if time.monotonic() > deadline:
                    raise SSHError(f"{self.host.name}: command did not finish within {timeout_s:.0f} s")
                if not progressed:
                    time.sleep(0.01)
            status = channel.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if isinstance(exc, SSHError):
                raise
            raise SSHError(f"{self.host.name}: command failed: {exc}") from exc
        finally:
            channel.close()
        return status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP client (one per connection, opened on first use, with a read timeout)."""
        with self._sftp_lock:
            if self._sftp is None:
                try:
                    self._sftp = paramiko.SFTPClient.from_transport(self.transport)
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    raise SSHError(f"{self.host.name}: cannot start SFTP: {exc}") from exc
                assert self._sftp is not None
                self._sftp.get_channel().settimeout(SFTP_TIMEOUT_S)
            return self._sftp
