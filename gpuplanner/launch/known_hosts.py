"""Host key checking: the system and user ``known_hosts`` are honoured, nothing is accepted silently.

An unknown key raises :class:`UnknownHostKey` (key type and SHA256 fingerprint, as ``ssh-keygen -l``
prints it); its :meth:`UnknownHostKey.trust` appends the key to the user's known_hosts. A key that
differs from the recorded one raises :class:`ChangedHostKey`; the only way on is editing known_hosts.

The files are read here, not by paramiko (whose reader raises on OpenSSH's markers), line by line as
``sshd(8)`` documents the format: ``[@marker] patterns keytype base64-key [comment]``. Plain and hashed
(``|1|salt|hash``) entries are known keys. A ``@revoked`` key is never accepted for the hosts its
patterns match (wildcards ``*``/``?``, negation ``!``, hashed names), even where a plain entry lists it:
connecting raises :class:`RevokedHostKey`. ``@cert-authority`` lines are skipped (host certificates
are not used; such a host's plain key, if listed, still works). Lines that cannot be read (unknown key
types, bad base64, too few fields) are skipped as OpenSSH skips them.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass, field
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
    """The host's key differs from the recorded one: refused, possibly an attack. ``revoked`` is True
    when the key it offered is marked ``@revoked`` in a known_hosts file (see :class:`RevokedHostKey`)."""

    revoked = False

    def __init__(self, hostname: str, port: int, key: paramiko.PKey, known_hosts_path: Path) -> None:
        self.hostname = hostname
        self.port = port
        self.key_type = key.get_name()
        self.fingerprint_sha256 = fingerprint_sha256(key)
        name = known_hosts_name(hostname, port)
        if self.revoked or load_known_hosts([SYSTEM_KNOWN_HOSTS, Path(known_hosts_path)]).is_revoked(name, key):
            self.revoked = True
            super().__init__(
                f"the host key of {name} ({self.key_type} {self.fingerprint_sha256}) is REVOKED: a known_hosts "
                f"file marks it @revoked, so it is never accepted. Refusing to connect; the host must get a new "
                f"key (then remove its old entries: ssh-keygen -R '{name}')."
            )
            return
        super().__init__(
            f"WARNING: the host key of {known_hosts_name(hostname, port)} has CHANGED (now {self.key_type} "
            f"{self.fingerprint_sha256}). Someone may be intercepting the connection, or the host was "
            f"reinstalled. Refusing to connect; if the change is expected, remove the old entry from "
            f"{known_hosts_path} (ssh-keygen -R '{known_hosts_name(hostname, port)}') and connect again."
        )


class RevokedHostKey(ChangedHostKey):
    """The host offered a key that a known_hosts file marks ``@revoked``: refused, whatever else is listed."""

    revoked = True


# ---------------------------------------------------------------------------------------------------
# Reading known_hosts files
# ---------------------------------------------------------------------------------------------------

MARKERS = ("@cert-authority", "@revoked")


@dataclass
class KnownHosts:
    """What known_hosts files say: known keys (patterns, key) and revoked keys (patterns, key)."""

    known: list[tuple[list[str], paramiko.PKey]] = field(default_factory=list)
    revoked: list[tuple[list[str], paramiko.PKey]] = field(default_factory=list)
    skipped: int = 0  # unreadable lines and @cert-authority lines

    def is_revoked(self, name: str, key: paramiko.PKey) -> bool:
        """Whether ``key`` is revoked for host ``name`` (``host`` or ``[host]:port``)."""
        blob = key.asbytes()
        return any(r.asbytes() == blob and patterns_match(patterns, name) for patterns, r in self.revoked)


def _decode_key(key_type: str, blob: str) -> paramiko.PKey | None:
    try:
        return paramiko.PKey.from_type_string(key_type, base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError, TypeError, paramiko.SSHException, paramiko.pkey.UnknownKeyType):
        return None
    except Exception:  # noqa: BLE001 (a key blob that crashes a key class: skipped like any unreadable line)
        return None


def parse_known_hosts(text: str, into: KnownHosts | None = None) -> KnownHosts:
    """Parse the text of a known_hosts file; never raises."""
    result = into if into is not None else KnownHosts()
    for raw in text.splitlines():
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if (marker is not None and marker not in MARKERS) or len(fields) < 3 or marker == "@cert-authority":
            result.skipped += 1
            continue
        key = _decode_key(fields[1], fields[2])
        if key is None:
            result.skipped += 1
            continue
        patterns = fields[0].split(",")
        (result.revoked if marker == "@revoked" else result.known).append((patterns, key))
    return result


def load_known_hosts(paths: list[Path]) -> KnownHosts:
    """The known_hosts files that exist and can be read, in order; unreadable ones count as empty."""
    result = KnownHosts()
    for path in paths:
        try:
            text = Path(path).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        parse_known_hosts(text, result)
    return result


def _hashed_matches(hashed: str, name: str) -> bool:
    """``|1|salt|hash`` (OpenSSH's HashKnownHosts) against a plain name."""
    parts = hashed.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        want = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


def patterns_match(patterns: list[str], name: str) -> bool:
    """OpenSSH's host pattern list: a negated (``!``) match excludes, else any pattern matches.

    ``name`` may itself be hashed (an entry of a hashed known_hosts): then a literal pattern matches if
    it hashes to it, and a wildcard pattern is taken to match (revocation errs on the side of refusing).
    """
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            # two hashes with different salts cannot be compared: taken to match (refuse rather than accept)
            hit = (pattern == name or not negated) if name.startswith("|1|") else _hashed_matches(pattern, name)
        elif name.startswith("|1|"):
            hit = (not negated and any(c in pattern for c in "*?")) or _hashed_matches(name, pattern.lower())
        else:
            hit = fnmatch.fnmatchcase(name.lower(), pattern.lower())
        if hit and negated:
            return False
        matched = matched or hit
    return matched


class _RaiseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, port: int, known_hosts_path: Path, known: KnownHosts) -> None:
        self.port = port
        self.known_hosts_path = known_hosts_path
        self.known = known

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        name = hostname
        if name.startswith("[") and "]:" in name:
            name = name[1 : name.index("]:")]
        if self.known.is_revoked(hostname, key):
            raise RevokedHostKey(name, self.port, key, self.known_hosts_path)
        raise UnknownHostKey(name, self.port, key, self.known_hosts_path)


def prepare_client(client: paramiko.SSHClient, port: int, known_hosts_path: str | Path | None = None) -> Path:
    """Load the system and user known_hosts into ``client`` and make unknown keys raise; returns the user file.

    A known key that is also revoked for a name is left out for that name, so paramiko never accepts
    it: the connection then reaches the missing-key policy (or the changed-key path), which says revoked.
    """
    user_file = Path(known_hosts_path) if known_hosts_path else default_known_hosts_path()
    found = load_known_hosts([SYSTEM_KNOWN_HOSTS, user_file])
    table = client.get_host_keys()  # read only: we never call save_host_keys
    for patterns, key in found.known:
        for name in patterns:
            if name.startswith("!") or any(c in name for c in "*?"):
                continue  # paramiko matches names literally; a pattern entry never matches a connection
            if found.is_revoked(name, key):
                continue
            existing = table.lookup(name)
            if existing is None or key.get_name() not in existing:
                table.add(name, key.get_name(), key)
    client.set_missing_host_key_policy(_RaiseUnknown(port, user_file, found))
    return user_file
