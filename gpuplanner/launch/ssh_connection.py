"""One SSH connection to a host: host key check, key/agent authentication, keepalives, deadlines.

- Authentication: ssh-agent and key files; an encrypted key asks ``passphrase_callback(prompt)``
  (None or an empty answer means "skip this key"), once per key file and process: the decrypted key
  is kept in memory until the file changes, so reconnects do not ask again. A wrong passphrase raises
  :class:`AuthenticationFailed` naming the key. Passwords are never used or stored.
- Every blocking call has a deadline: the TCP connect, the banner, authentication, each command
  (``run``), and SFTP reads (channel timeout). Keepalives detect a dead peer.
- ``run`` drains stdout and stderr while waiting for the exit status, so a chatty command never
  blocks on a full window.
- ProxyJump: ``[user@]host[:port]``, ``ssh://[user@]host[:port]`` or an alias of the SSH config, or a
  comma-separated chain of them (the target is reached through the last, which is reached through
  the ones before it); ``none`` means no jump. Every jump host's key is checked like a direct host's.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
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


def why_not_connected(exc: BaseException) -> str:
    """Why a TCP connection failed, in words: paramiko's ``NoValidConnectionsError`` reads "[Errno None]
    Unable to connect to port 9 on 127.0.0.1" (the reasons of each address it tried sit in ``errors``)."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = sorted({why_not_connected(error) for error in exc.errors.values()})
        return "; ".join(reasons) or "no address answered"
    if isinstance(exc, TimeoutError):
        return "no answer (timed out)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    if isinstance(exc, EOFError):
        return "the server closed the connection"
    return str(exc)


class SSHError(OSError):
    """The host could not be reached or a command could not run; the message says why."""


class SessionOpenError(SSHError):
    """No session could be opened on the connection (the command never started), e.g. the host reset a
    connection the transport still thought alive: reconnecting and running the command again is safe."""


class AuthenticationFailed(SSHError):
    """No key (agent or file) was accepted. Not retried: the user must fix keys or the agent."""


MAX_JUMPS = 8  # a longer chain is taken for a loop (e.g. ``Host *`` with a ProxyJump that matches itself)


def _parse_hop(hop: str) -> Host:
    """One ProxyJump hop as a Host: ``[ssh://][user@]host[:port]``; ``host`` may be an SSH config alias."""
    from gpuplanner.launch.hosts import Host, ssh_config_host

    rest = hop[len("ssh://") :] if hop.startswith("ssh://") else hop
    user, _, rest = rest.rpartition("@")
    hostname, port_text = rest, ""
    if rest.startswith("["):
        hostname, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        hostname, port_text = rest.split(":")
    if not hostname or (port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536)):
        raise SSHError(f"bad ProxyJump host {hop!r}: expected [user@]host[:port] or an SSH config alias")
    alias = ssh_config_host(hostname)
    if alias is not None:
        return replace(alias, name=hop, user=user or alias.user, port=int(port_text) if port_text else alias.port)
    return Host(name=hop, kind="ssh", hostname=hostname, port=int(port_text or 22), user=user or None)


def parse_jump(spec: str) -> Host | None:
    """A ProxyJump value as the Host to connect through (None for ``none``). In a chain ``a,b`` that is
    ``b``, with ``a`` as its own ProxyJump."""
    hops = [hop.strip() for hop in spec.split(",")]
    if spec.strip().lower() == "none":
        return None
    if not all(hops):
        raise SSHError(f"bad ProxyJump {spec!r}: an empty host in the list")
    host = _parse_hop(hops[-1])
    if len(hops) > 1:
        host = replace(host, proxy_jump=",".join(hops[:-1]))
    return host


def jump_chain(host: Host) -> list[Host]:
    """The jump hosts on the way to ``host``, nearest first: ``[b, a]`` for ProxyJump ``a,b`` (``b`` is
    reached through ``a``). Raises SSHError for a bad value or more than MAX_JUMPS hops (a loop)."""
    chain: list[Host] = []
    spec = host.proxy_jump
    while spec:
        hop = parse_jump(spec)
        if hop is None:
            break
        chain.append(hop)
        if len(chain) > MAX_JUMPS:
            raise SSHError(
                f"{host.name}: more than {MAX_JUMPS} jump hosts, a ProxyJump loop? "
                + " <- ".join(h.name for h in chain[:4])
                + " <- ..."
            )
        spec = hop.proxy_jump
    return chain


def _is_encrypted(data: bytes) -> bool:
    """Whether a private key file needs a passphrase (OpenSSH format: cipher not "none"; PEM: an
    ``ENCRYPTED`` header)."""
    text = data.decode("ascii", "replace")
    begin = "-----BEGIN OPENSSH PRIVATE KEY-----"
    if begin in text:
        body = text.split(begin, 1)[1].split("-----END", 1)[0]
        try:
            blob = base64.b64decode("".join(body.split()))
        except ValueError:
            return False
        magic = b"openssh-key-v1\x00"
        if not blob.startswith(magic):
            return False
        size = int.from_bytes(blob[len(magic) : len(magic) + 4], "big")
        return blob[len(magic) + 4 : len(magic) + 4 + size] != b"none"
    return any(
        line.startswith(("-----BEGIN ENCRYPTED ", "Proc-Type:")) and "ENCRYPTED" in line for line in text.splitlines()
    )


_decrypted: dict[tuple[str, int, int, int], paramiko.PKey] = {}  # (path, inode, size, mtime) -> key
_key_locks: dict[str, threading.Lock] = {}
_key_locks_lock = threading.Lock()


def forget_passphrases() -> None:
    """Drop the decrypted keys kept in memory; the next connection asks for the passphrases again."""
    with _key_locks_lock:
        _decrypted.clear()


def _read_key(file: str, password: bytes | None) -> paramiko.PKey:
    # positional: the argument is ``passphrase`` in paramiko 3 and 4, ``password`` in paramiko 5
    return paramiko.PKey.from_path(file, password)  # type: ignore[arg-type]  # the stub says str; it takes bytes


def load_key(path: str, passphrase_callback: PassphraseCallback | None) -> paramiko.PKey | None:
    """A private key file, asking for its passphrase if it is encrypted (once per file and process);
    None if it is encrypted and there is no callback or the user declines (None or "").
    Raises AuthenticationFailed, naming the key, for a wrong passphrase or a file that is no key."""
    file = str(Path(path).expanduser())
    try:
        data = Path(file).read_bytes()
        stat = os.stat(file)
    except OSError as exc:
        raise AuthenticationFailed(f"could not read key {file}: {exc}") from exc
    if not _is_encrypted(data):
        try:
            return _read_key(file, None)
        except (ValueError, TypeError, paramiko.SSHException, paramiko.pkey.UnknownKeyType) as exc:
            raise AuthenticationFailed(f"could not read key {file}: {exc}") from exc
    cache_key = (file, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _key_locks_lock:
        lock = _key_locks.setdefault(file, threading.Lock())
    with lock:  # one prompt per key at a time: other threads wait for the answer, then use it
        with _key_locks_lock:
            cached = _decrypted.get(cache_key)
        if cached is not None:
            return cached
        if passphrase_callback is None:
            return None
        answer = passphrase_callback(f"Passphrase for key {file}:")
        if not answer:
            return None
        try:
            key = _read_key(file, answer if isinstance(answer, bytes) else answer.encode())
        except (ValueError, TypeError, paramiko.SSHException, paramiko.pkey.UnknownKeyType) as exc:
            raise AuthenticationFailed(f"wrong passphrase for key {file} (it could not be decrypted)") from exc
        with _key_locks_lock:
            _decrypted[cache_key] = key
        return key


class SSHConnection:
    """A connected SSH client to one host; ``run`` and ``sftp`` are safe to use from several threads."""

    def __init__(
        self,
        host: Host,
        *,
        known_hosts_path: str | Path | None = None,
        passphrase_callback: PassphraseCallback | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
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
        """Connect and authenticate; raises UnknownHostKey, ChangedHostKey, AuthenticationFailed, SSHError.
        Nothing stays open when it raises (a jump host's connection included)."""
        host = self.host
        assert host.hostname
        # the key first: a wrong passphrase fails before anything is opened
        try:
            pkey = load_key(host.identity_file, self.passphrase_callback) if host.identity_file else None
        except AuthenticationFailed as exc:
            raise AuthenticationFailed(f"{host.name}: {exc}") from exc
        try:
            sock = self._open_jump() if host.proxy_jump else None
            self._connect(pkey, sock)
        except BaseException:
            self.close()
            raise
        return self

    def _open_jump(self) -> paramiko.Channel | None:
        """Connect to the jump host and open a ``direct-tcpip`` channel from it to this host."""
        host = self.host
        assert host.proxy_jump and host.hostname
        chain = jump_chain(host)
        if not chain:
            return None
        jump_host = chain[0]
        self._jump = SSHConnection(
            jump_host,
            known_hosts_path=self.known_hosts_path,
            passphrase_callback=self.passphrase_callback,
            connect_timeout_s=self.connect_timeout_s,
        )
        try:
            self._jump.connect()
        except (UnknownHostKey, ChangedHostKey):
            raise  # about the jump host itself: its hostname and port say which key to trust or fix
        except AuthenticationFailed as exc:
            hint = (
                ""
                if jump_host.identity_file
                else " (a jump host given as [user@]host[:port] is offered the "
                "ssh-agent's keys and ~/.ssh/id_*; for another key, name an SSH config alias with an IdentityFile)"
            )
            raise AuthenticationFailed(f"{host.name}: jump host {exc}{hint}") from exc
        except SSHError as exc:
            raise SSHError(f"{host.name}: jump host {exc}") from exc
        try:
            return self._jump.transport.open_channel(
                "direct-tcpip", (host.hostname, host.port), ("127.0.0.1", 0), timeout=self.connect_timeout_s
            )
        except (paramiko.SSHException, OSError, EOFError) as exc:
            why = exc.text if isinstance(exc, paramiko.ChannelException) else (str(exc) or type(exc).__name__)
            raise SSHError(f"jump host {jump_host.name} could not reach {host.hostname}:{host.port}: {why}") from exc

    def _connect(self, pkey: paramiko.PKey | None, sock: paramiko.Channel | None) -> None:
        host = self.host
        if not host.hostname:  # validate_host gives every SSH host one
            raise SSHError(f"{host.name}: no hostname to connect to")
        client = paramiko.SSHClient()
        self._client = client  # closed by close() if anything below raises
        self._user_known_hosts = prepare_client(client, host.port, self.known_hosts_path)
        try:
            client.connect(
                host.hostname,
                port=host.port,
                username=host.user,
                pkey=pkey,
                sock=sock,
                allow_agent=True,
                look_for_keys=pkey is None and not host.identity_file,
                timeout=self.connect_timeout_s,
                banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s,
                channel_timeout=self.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as exc:
            raise ChangedHostKey(host.hostname, host.port, exc.key, self._user_known_hosts) from exc
        except UnknownHostKey:
            raise
        except paramiko.SSHException as exc:
            transport = client.get_transport()
            in_auth = isinstance(exc, paramiko.AuthenticationException) or (
                transport is not None and transport.is_active() and not transport.is_authenticated()
            )
            if not in_auth:
                raise SSHError(f"{host.name}: cannot connect to {host.hostname}:{host.port}: {exc}") from exc
            if host.identity_file and pkey is None:  # an encrypted key nobody could or would unlock
                file = str(Path(host.identity_file).expanduser())
                why = (
                    "no passphrase was given"
                    if self.passphrase_callback is not None
                    else "nothing here can ask for its passphrase"
                )
                raise AuthenticationFailed(
                    f"{host.name}: key {file} is encrypted and {why}, and ssh-agent "
                    f"offered no accepted key; load it with ssh-add {file}"
                ) from exc
            raise AuthenticationFailed(
                f"{host.name}: authentication failed ({exc}); load a key into ssh-agent or set the host's identity file"
            ) from exc
        except (OSError, EOFError) as exc:
            raise SSHError(
                f"{host.name}: cannot connect to {host.hostname}:{host.port}: {why_not_connected(exc)}"
            ) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)

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
            raise SessionOpenError(f"{self.host.name}: cannot open a session: {exc}") from exc
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
                    sftp = paramiko.SFTPClient.from_transport(self.transport)
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    raise SSHError(f"{self.host.name}: cannot start SFTP: {exc}") from exc
                if sftp is None:
                    raise SSHError(f"{self.host.name}: cannot start SFTP: the server opened no channel")
                channel = sftp.get_channel()
                if channel is not None:
                    channel.settimeout(SFTP_TIMEOUT_S)
                self._sftp = sftp
            return self._sftp
