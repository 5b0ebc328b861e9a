"""Host key checking: the system and user ``known_hosts`` are honoured, nothing is accepted silently.

An unknown key raises :class:`UnknownHostKey` (key type and SHA256 fingerprint, as ``ssh-keygen -l``
prints it); its :meth:`UnknownHostKey.trust` appends the key to the user's known_hosts. A key that
differs from the recorded one raises :class:`ChangedHostKey`; the only way on is editing known_hosts.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path

import paramiko

SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
_write_lock = threading.Lock()


def default_known_hosts_path() -> Path:
    """The user's known_hosts: ``$GPUPLANNER_KNOWN_HOSTS`` (tests) or ``~/.ssh/known_hosts``."""
    return Path(os.environ.get("GPUPLANNER_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts")


def fingerprint_sha256(key: paramiko.PKey) -> str:
    """``SHA256:<base64 without padding>`` of the public key blob, as OpenSSH prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def known_hosts_name(hostname: str, port: int) -> str:
    """The name a host key is filed under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


class UnknownHostKey(Exception):
    """The host offered a key that no known_hosts file lists; ask the user, then :meth:`trust`."""

    def __init__(self, hostname: str, port: int, key: paramiko.PKey, known_hosts_path: Path) -> None:
        self.hostname = hostname
        self.port = port
        self.key = key
        self.key_type = key.get_name()
        self.fingerprint_sha256 = fingerprint_sha256(key)
        self.known_hosts_path = Path(known_hosts_path)
        super().__init__(
            f"unknown host key for {known_hosts_name(hostname, port)}: {self.key_type} "
            f"{self.fingerprint_sha256}; trust it only if this is the key the host really has"
        )

    def trust(self) -> None:
        """Record the key in the user's known_hosts (created 0600 in a 0700 folder if missing)."""
        line = f"{known_hosts_name(self.hostname, self.port)} {self.key_type} {self.key.get_base64()}\n"
        path = self.known_hosts_path
        with _write_lock:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="ascii") as handle:
                if handle.tell() > 0 and not path.read_bytes().endswith(b"\n"):
                    handle.write("\n")
                handle.write(line)


class ChangedHostKey(Exception):
    """The host's key differs from the recorded one: refused, possibly an attack."""

    def __init__(self, hostname: str, port: int, key: paramiko.PKey, known_hosts_path: Path) -> None:
        self.hostname = hostname
        self.port = port
        self.key_type = key.get_name()
        self.fingerprint_sha256 = fingerprint_sha256(key)
        super().__init__(
            f"WARNING: the host key of {known_hosts_name(hostname, port)} has CHANGED (now {self.key_type} "
            f"{self.fingerprint_sha256}). Someone may be intercepting the connection, or the host was "
            f"reinstalled. Refusing to connect; if the change is expected, remove the old entry from "
            f"{known_hosts_path} (ssh-keygen -R '{known_hosts_name(hostname, port)}') and connect again."
        )


class _RaiseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, port: int, known_hosts_path: Path) -> None:
        self.port = port
        self.known_hosts_path = known_hosts_path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        name = hostname
        if name.startswith("[") and "]:" in name:
            name = name[1 : name.index("]:")]
        raise UnknownHostKey(name, self.port, key, self.known_hosts_path)


def prepare_client(client: paramiko.SSHClient, port: int, known_hosts_path: Path | None = None) -> Path:
    """Load the system and user known_hosts into ``client`` and make unknown keys raise; returns the user file."""
    user_file = Path(known_hosts_path) if known_hosts_path else default_known_hosts_path()
    if SYSTEM_KNOWN_HOSTS.is_file():
        client.load_system_host_keys(str(SYSTEM_KNOWN_HOSTS))
    if user_file.is_file():
        client.load_host_keys(str(user_file))  # read only: we never call save_host_keys
    client.set_missing_host_key_policy(_RaiseUnknown(port, user_file))
    return user_file
