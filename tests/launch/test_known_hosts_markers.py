"""Standard OpenSSH known_hosts lines (issue 13, item 13): ``@cert-authority`` and ``@revoked`` never
crash a connection, a revoked key is refused with a clear message (as OpenSSH's own ``ssh`` refuses
it), and plain and hashed entries keep working. Against a real sshd."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from gpuplanner.cli import main
from gpuplanner.launch.known_hosts import (
    ChangedHostKey,
    RevokedHostKey,
    UnknownHostKey,
    load_known_hosts,
    parse_known_hosts,
    patterns_match,
)
from gpuplanner.launch.ssh_connection import SSHConnection
from tests.launch.conftest import add_ssh_host
from tests.sshd import SSHServer, keygen


def pub(path: Path) -> str:
    """``ssh-ed25519 AAAA...`` of a key pair's public half."""
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


@pytest.fixture
def other_key(tmp_path: Path) -> Path:
    return keygen(tmp_path / "other_key")


def server_pub(sshd: SSHServer) -> str:
    return " ".join(sshd.known_hosts_line.split()[1:3])


def host_name(sshd: SSHServer) -> str:
    return sshd.known_hosts_line.split()[0]


def connect(db_path: Path, sshd: SSHServer, known_hosts: Path, name: str = "box") -> None:
    from gpuplanner.launch.hosts import get_host

    try:
        host = get_host(db_path, name)
    except Exception:
        host = add_ssh_host(db_path, name, sshd)
    conn = SSHConnection(host, known_hosts_path=known_hosts).connect()
    try:
        assert conn.run("echo ok") == (0, "ok\n", "")
    finally:
        conn.close()


def openssh_accepts(sshd: SSHServer, known_hosts: Path) -> bool:
    """What OpenSSH's own client decides with this known_hosts (strict checking, no prompts)."""
    ssh = shutil.which("ssh")
    assert ssh, "the ssh client is needed (openssh-client)"
    result = subprocess.run(
        [
            ssh,
            "-F",
            "/dev/null",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "HostKeyAlgorithms=ssh-ed25519",
            "-i",
            str(sshd.client_key),
            "-p",
            str(sshd.port),
            f"root@{sshd.address}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode == 0


def test_parser_never_raises_and_sorts_lines(other_key: Path) -> None:
    key = pub(other_key)
    text = "\n".join(
        [
            "# comment",
            "",
            f"@cert-authority *.example.com {key}",
            f"@revoked * {key}",
            f"@revoked {key}",  # too few fields after the marker
            f"@future-marker host {key}",
            f"plain.example.com,10.0.0.1 {key} comment words",
            f"|1|c2FsdHNhbHRzYWx0c2FsdHNhbHQ=|aGFzaGhhc2hoYXNoaGFzaGhhc2g= {key}",
            "host ssh-ed25519 !!!notbase64!!!",
            "host ssh-unknown AAAAB3NzaC1yc2EAAAADAQABAAABAQ",
            "host ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",  # truncated blob
            "\x00\xff garbage line",
            "@revoked",
        ]
    )
    found = parse_known_hosts(text)
    assert len(found.known) == 2 and len(found.revoked) == 1
    assert found.skipped == 8
    assert found.known[0][0] == ["plain.example.com", "10.0.0.1"]


def test_patterns() -> None:
    hashed = paramiko.HostKeys.hash_host("[127.0.0.1]:2222")
    assert patterns_match(["*"], "box")
    assert patterns_match(["*.example.com"], "a.example.com") and not patterns_match(["*.example.com"], "example.org")
    assert patterns_match(["10.0.0.?"], "10.0.0.7") and not patterns_match(["10.0.0.?"], "10.0.0.77")
    assert not patterns_match(["*", "!bad.host"], "bad.host") and patterns_match(["*", "!bad.host"], "ok.host")
    assert patterns_match(["BOX"], "box")
    assert patterns_match([hashed], "[127.0.0.1]:2222") and not patterns_match([hashed], "[127.0.0.1]:2223")
    # a hashed name (from a hashed known_hosts) against revocation patterns
    assert patterns_match(["[127.0.0.1]:2222"], hashed) and not patterns_match(["other"], hashed)
    assert patterns_match(["*"], hashed)


@pytest.mark.slow
def test_markers_plain_and_hashed_entries_with_a_real_sshd(
    db_path: Path, sshd: SSHServer, known_hosts: Path, other_key: Path
) -> None:
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"@cert-authority * {pub(other_key)}",
        f"@revoked other.example.com {server_pub(sshd)}",  # revoked elsewhere, not for this host
        f"@revoked * {pub(other_key)}",
        sshd.known_hosts_line.strip(),
    ]
    known_hosts.write_text("\n".join(lines) + "\n")
    connect(db_path, sshd, known_hosts)
    assert openssh_accepts(sshd, known_hosts)
    # hashed by OpenSSH itself: still works
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known_hosts)], check=True, capture_output=True)
    assert "|1|" in known_hosts.read_text() and host_name(sshd) not in known_hosts.read_text()
    connect(db_path, sshd, known_hosts)


@pytest.mark.slow
@pytest.mark.parametrize("hashed", [False, True])
def test_revoked_key_is_refused(
    db_path: Path, sshd: SSHServer, known_hosts: Path, other_key: Path, hashed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    pattern = paramiko.HostKeys.hash_host(host_name(sshd)) if hashed else "*"
    known_hosts.write_text(f"{sshd.known_hosts_line.strip()}\n@revoked {pattern} {server_pub(sshd)}\n")
    if hashed:
        subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known_hosts)], check=True, capture_output=True)
    assert not openssh_accepts(sshd, known_hosts)  # the reference behaviour
    host = add_ssh_host(db_path, "box", sshd)
    with pytest.raises(RevokedHostKey) as caught:
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    assert isinstance(caught.value, ChangedHostKey) and caught.value.revoked
    assert "REVOKED" in str(caught.value) and caught.value.fingerprint_sha256 == sshd.host_key_fingerprint
    # listed only as revoked (no plain entry): still revoked, never "unknown, trust it?"
    known_hosts.write_text(f"@revoked * {server_pub(sshd)}\n")
    with pytest.raises(RevokedHostKey):
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    # another key recorded for the host, the offered one revoked: the changed-key path says revoked too
    known_hosts.write_text(f"{host_name(sshd)} {pub(other_key)}\n@revoked * {server_pub(sshd)}\n")
    with pytest.raises(ChangedHostKey) as changed:
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    assert changed.value.revoked and "REVOKED" in str(changed.value)
    # the CLI: one clear message, no traceback, non-zero exit
    try:
        code = main(["hosts", "probe", "box", "--db", str(db_path)])
    except SystemExit as exc:  # `hosts` ends a refused host key with SystemExit(1)
        code = exc.code
    err = capsys.readouterr().err
    assert code != 0 and "REVOKED" in err and "Traceback" not in err


@pytest.mark.slow
def test_unknown_key_still_offered_for_trust(
    db_path: Path, sshd: SSHServer, known_hosts: Path, other_key: Path
) -> None:
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    known_hosts.write_text(f"@cert-authority * {pub(other_key)}\n@revoked * {pub(other_key)}\n")
    host = add_ssh_host(db_path, "box", sshd)
    with pytest.raises(UnknownHostKey) as caught:
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    caught.value.trust()
    assert len(load_known_hosts([known_hosts]).known) == 1
    connect(db_path, sshd, known_hosts)
