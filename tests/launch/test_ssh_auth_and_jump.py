"""Passphrase-protected keys and ProxyJump against real sshd servers on loopback (no mocks).

Passphrases: the callback is asked with a prompt naming the key, once per key file (reconnects and
a jump host with the same key do not ask again); a wrong passphrase, a declined prompt and a missing
callback each fail with AuthenticationFailed naming the key. ProxyJump: ``user@host:port``, SSH config
aliases (also ``user@alias``) and chains reach the target through ``direct-tcpip`` channels; the jump
host's key is checked like a direct host's; an unreachable target or a jump host that forbids
forwarding gives "jump host ... could not reach"; nothing stays open after a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from gpuplanner.launch.hosts import ChangedHostKey, Host, UnknownHostKey, add_host, get_host, ssh_config_hosts
from gpuplanner.launch.manager import RunManager
from gpuplanner.launch.ssh_backend import SSHBackend
from gpuplanner.launch.ssh_connection import (
    AuthenticationFailed,
    SSHConnection,
    SSHError,
    forget_passphrases,
    load_key,
    parse_jump,
)
from tests.sshd import SSHServer, available, free_port, keygen

PASSPHRASE = "correct horse"


class Prompts:
    """A passphrase callback that records its prompts and gives the answers in turn (the last one repeats)."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str | None:
        self.prompts.append(prompt)
        return self.answers[min(len(self.prompts), len(self.answers)) - 1]


@pytest.fixture(autouse=True)
def _no_remembered_passphrases() -> Iterator[None]:
    forget_passphrases()
    yield
    forget_passphrases()


def _server(tmp_path: Path, name: str, **kwargs: object) -> SSHServer:
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    return SSHServer(tmp_path / name, "127.0.0.1", **kwargs).start()  # type: ignore[arg-type]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[SSHServer]]:
    """Started sshd servers, stopped at the end: ``servers.append(_server(...))``."""
    started: list[SSHServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def encrypted_key(tmp_path: Path) -> Path:
    (tmp_path / "keys").mkdir()
    return keygen(tmp_path / "keys" / "id_encrypted", "encrypted", passphrase=PASSPHRASE)


def _host(server: SSHServer, key: Path, **fields: object) -> Host:
    return Host(
        name=fields.pop("name", "box"),
        kind="ssh",
        hostname=server.address,  # type: ignore[arg-type]
        port=server.port,
        user="root",
        identity_file=str(key),
        **fields,
    )  # type: ignore[arg-type]


def _trust(known_hosts: Path, *servers: SSHServer) -> None:
    with open(known_hosts, "a") as handle:
        for server in servers:
            handle.write(server.known_hosts_line)


def _wait_no_sessions(server: SSHServer, timeout_s: float = 5.0) -> list[int]:
    """The server's per-connection processes once they are gone (or whatever is left at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while server.session_pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.session_pids()


def _connect(host: Host, known_hosts: Path, callback: Prompts | None = None) -> SSHConnection:
    return SSHConnection(host, known_hosts_path=known_hosts, passphrase_callback=callback).connect()


# -- passphrase-protected keys --------------------------------------------------------------------------


def test_encrypted_key_detected_and_loaded_without_a_server(encrypted_key: Path, tmp_path: Path) -> None:
    prompts = Prompts(PASSPHRASE)
    key = load_key(str(encrypted_key), prompts)
    public = Path(f"{encrypted_key}.pub").read_text().split()
    assert key is not None and (key.get_name(), key.get_base64()) == (public[0], public[1])
    assert prompts.prompts == [f"Passphrase for key {encrypted_key}:"]
    assert load_key(str(encrypted_key), None) is key  # remembered: no callback needed any more
    forget_passphrases()
    assert load_key(str(encrypted_key), None) is None
    plain = keygen(tmp_path / "keys" / "id_plain")
    never = Prompts("unused")
    assert load_key(str(plain), never) is not None and never.prompts == []  # no passphrase, no question
    (tmp_path / "keys" / "junk").write_text("not a key\n")
    with pytest.raises(AuthenticationFailed, match="could not read key .*junk"):
        load_key(str(tmp_path / "keys" / "junk"), never)
    with pytest.raises(AuthenticationFailed, match="could not read key .*missing"):
        load_key(str(tmp_path / "keys" / "missing"), never)


@pytest.mark.slow
def test_right_passphrase_connects_once_per_key_file(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, encrypted_key: Path
) -> None:
    server = _server(tmp_path, "sshd")
    servers.append(server)
    server.authorize(Path(f"{encrypted_key}.pub"))
    _trust(known_hosts, server)
    host = _host(server, encrypted_key)
    prompts = Prompts(PASSPHRASE)
    conn = _connect(host, known_hosts, prompts)
    assert conn.run("echo ok-$USER") == (0, "ok-root\n", "")
    assert prompts.prompts == [f"Passphrase for key {encrypted_key}:"]
    conn.close()
    # a reconnect (what the run watcher does after a cut) does not ask again
    conn = _connect(host, known_hosts, prompts)
    assert conn.run("echo again") == (0, "again\n", "") and len(prompts.prompts) == 1
    conn.close()
    # a new key in the same file (here: another passphrase) is asked for again
    keygen(encrypted_key, "encrypted-2", passphrase="another one")
    server.authorize(Path(f"{encrypted_key}.pub"))
    prompts = Prompts("another one")
    conn = _connect(host, known_hosts, prompts)
    assert conn.run("echo new") == (0, "new\n", "") and prompts.prompts == [f"Passphrase for key {encrypted_key}:"]
    conn.close()


@pytest.mark.slow
def test_wrong_declined_or_unaskable_passphrase_fails_clearly(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, encrypted_key: Path
) -> None:
    server = _server(tmp_path, "sshd")
    servers.append(server)
    server.authorize(Path(f"{encrypted_key}.pub"))
    _trust(known_hosts, server)
    host = _host(server, encrypted_key)
    wrong = Prompts("wrong passphrase")
    with pytest.raises(AuthenticationFailed) as info:
        _connect(host, known_hosts, wrong)
    assert str(info.value) == f"box: wrong passphrase for key {encrypted_key} (it could not be decrypted)"
    assert wrong.prompts == [f"Passphrase for key {encrypted_key}:"]
    for answer in (None, ""):
        declined = Prompts(answer)
        with pytest.raises(AuthenticationFailed) as info:
            _connect(host, known_hosts, declined)
        assert f"key {encrypted_key} is encrypted and no passphrase was given" in str(info.value)
        assert f"ssh-add {encrypted_key}" in str(info.value) and len(declined.prompts) == 1
    with pytest.raises(AuthenticationFailed) as info:
        _connect(host, known_hosts, None)
    assert f"key {encrypted_key} is encrypted and nothing here can ask for its passphrase" in str(info.value)
    assert _wait_no_sessions(server) == []  # every failed attempt closed its connection
    # a wrong answer is not remembered: the right one still works
    retry = Prompts(PASSPHRASE)
    conn = _connect(host, known_hosts, retry)
    assert conn.run("true")[0] == 0 and len(retry.prompts) == 1
    conn.close()


@pytest.mark.slow
def test_declined_passphrase_still_tries_the_agent(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, encrypted_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(tmp_path, "sshd")  # accepts server.client_key only, not the encrypted key
    servers.append(server)
    _trust(known_hosts, server)
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 5
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(
            ["ssh-add", "-q", str(server.client_key)],
            env=env,
            check=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        declined = Prompts(None)
        conn = _connect(_host(server, encrypted_key), known_hosts, declined)
        assert conn.run("echo agent") == (0, "agent\n", "") and len(declined.prompts) == 1
        conn.close()
    finally:
        agent.terminate()
        agent.wait(5)


# -- ProxyJump --------------------------------------------------------------------------------------------


def test_parse_jump_forms(_private_home: Path) -> None:
    (_private_home / ".ssh" / "config").write_text(
        "Host bastion\n  HostName 10.9.9.9\n  User ops\n  Port 2201\n  IdentityFile ~/.ssh/id_bastion\n"
        "Host loop\n  HostName 127.0.0.1\n  ProxyJump loop\n"
    )
    one = parse_jump("me@10.0.0.1:2222")
    assert one is not None and (one.hostname, one.port, one.user, one.proxy_jump) == ("10.0.0.1", 2222, "me", None)
    uri = parse_jump("ssh://me@gw")
    assert uri is not None and (uri.hostname, uri.port, uri.user) == ("gw", 22, "me")
    v6 = parse_jump("[::1]:2200")
    assert v6 is not None and (v6.hostname, v6.port, v6.user) == ("::1", 2200, None)
    alias = parse_jump("bastion")
    assert alias is not None and (alias.hostname, alias.port, alias.user) == ("10.9.9.9", 2201, "ops")
    assert alias.identity_file == str(_private_home / ".ssh" / "id_bastion")
    override = parse_jump("root@bastion:2300")
    assert override is not None and (override.hostname, override.port, override.user) == ("10.9.9.9", 2300, "root")
    chain = parse_jump("a@h1, bastion ,h3:23")
    assert chain is not None and (chain.hostname, chain.port, chain.proxy_jump) == ("h3", 23, "a@h1,bastion")
    assert parse_jump("none") is None
    for bad in ("me@host:notaport", "host:0", "a,,b", "me@"):
        with pytest.raises(SSHError, match="bad ProxyJump"):
            parse_jump(bad)
    # an alias that jumps through itself is a loop, refused before anything is connected
    target = Host(name="t", kind="ssh", hostname="127.0.0.1", port=free_port(), proxy_jump="loop")
    with pytest.raises(SSHError, match=r"^t: more than 8 jump hosts, a ProxyJump loop\? loop <- loop"):
        SSHConnection(target).connect()


@pytest.mark.slow
def test_jump_user_at_host_port_and_chain(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, _private_home: Path
) -> None:
    jump = _server(tmp_path, "sshd-jump")
    target = _server(tmp_path, "sshd-target", client_key=jump.client_key)
    jump2 = _server(tmp_path, "sshd-jump2", client_key=jump.client_key)
    servers += [jump, target, jump2]
    _trust(known_hosts, jump, target, jump2)
    # "user@host:port" names no key: the jump host gets the default ~/.ssh/id_ed25519 (as ssh does)
    shutil.copy(jump.client_key, _private_home / ".ssh" / "id_ed25519")
    host = _host(target, jump.client_key, proxy_jump=f"root@127.0.0.1:{jump.port}")
    conn = _connect(host, known_hosts)
    assert conn.run("echo through-the-jump") == (0, "through-the-jump\n", "")
    # the target's session runs over a channel of the jump host's connection, not over a socket of its own
    assert isinstance(conn.transport.sock, paramiko.Channel)
    assert conn.transport.getpeername() == ("127.0.0.1", jump.port)
    assert jump.session_pids() and target.session_pids()
    # losing the jump host loses the target
    jump.cut_connections()
    deadline = time.monotonic() + 10
    while conn.is_active() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not conn.is_active()
    with pytest.raises(SSHError):
        conn.run("true")
    conn.close()
    assert _wait_no_sessions(target) == []
    # a chain: jump, then jump2, then the target
    chained = _host(target, jump.client_key, proxy_jump=f"root@127.0.0.1:{jump.port},root@127.0.0.1:{jump2.port}")
    conn = _connect(chained, known_hosts)
    assert conn.run("echo chained") == (0, "chained\n", "")
    assert conn.transport.getpeername() == ("127.0.0.1", jump.port)  # the only real socket goes to the first hop
    assert jump.session_pids() and jump2.session_pids() and target.session_pids()
    conn.close()
    assert _wait_no_sessions(jump) == [] and _wait_no_sessions(jump2) == [] and _wait_no_sessions(target) == []
    # "none" means no jump: a direct connection
    conn = _connect(_host(target, jump.client_key, proxy_jump="none"), known_hosts)
    assert conn.transport.getpeername() == ("127.0.0.1", target.port) and conn.run("true")[0] == 0
    conn.close()


@pytest.mark.slow
def test_jump_from_ssh_config_alias(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, _private_home: Path
) -> None:
    jump = _server(tmp_path, "sshd-jump")
    target = _server(tmp_path, "sshd-target", client_key=jump.client_key)
    servers += [jump, target]
    _trust(known_hosts, jump, target)
    (_private_home / ".ssh" / "config").write_text(
        f"Host jumpbox\n  HostName 127.0.0.1\n  Port {jump.port}\n  User nobody\n  IdentityFile {jump.client_key}\n"
        f"Host trainbox\n  HostName 127.0.0.1\n  Port {target.port}\n  User root\n  IdentityFile {jump.client_key}\n"
        f"  ProxyJump root@jumpbox\n"
    )
    host = {h.name: h for h in ssh_config_hosts(None)}["trainbox"]
    assert host.proxy_jump == "root@jumpbox"
    conn = _connect(host, known_hosts)  # no default key in ~/.ssh: the alias's IdentityFile is used
    assert conn.run("echo alias") == (0, "alias\n", "")
    assert conn.transport.getpeername() == ("127.0.0.1", jump.port)
    conn.close()
    # the alias's own user (nobody) is refused by the jump host's sshd; the message says it was the jump host
    with pytest.raises(AuthenticationFailed, match="trainbox: jump host jumpbox: authentication failed"):
        _connect(replace(host, proxy_jump="jumpbox"), known_hosts)
    # "user@host:port" names no key; with no agent and no ~/.ssh/id_* the message says how to give one
    with pytest.raises(AuthenticationFailed, match="jump host root@127.0.0.1:.*name an SSH config alias"):
        _connect(replace(host, proxy_jump=f"root@127.0.0.1:{jump.port}"), known_hosts)
    assert _wait_no_sessions(jump) == [] and _wait_no_sessions(target) == []


@pytest.mark.slow
def test_jump_host_key_checked_like_a_direct_host(servers: list[SSHServer], tmp_path: Path, known_hosts: Path) -> None:
    jump = _server(tmp_path, "sshd-jump")
    target = _server(tmp_path, "sshd-target", client_key=jump.client_key)
    servers += [jump, target]
    key = jump.client_key
    (Path(known_hosts).parent / "config").write_text(
        f"Host jumpbox\n  HostName 127.0.0.1\n  Port {jump.port}\n  User root\n  IdentityFile {key}\n"
    )
    host = _host(target, key, proxy_jump="jumpbox")
    # the target is known, the jump host is not: refused, with the jump host's key, nothing written
    _trust(known_hosts, target)
    with pytest.raises(UnknownHostKey) as info:
        _connect(host, known_hosts)
    unknown = info.value
    assert (unknown.hostname, unknown.port) == ("127.0.0.1", jump.port)
    assert unknown.fingerprint_sha256 == jump.host_key_fingerprint
    assert jump.known_hosts_line.split()[2] not in known_hosts.read_text()
    assert target.session_pids() == []  # refused before the target was contacted
    unknown.trust()
    conn = _connect(host, known_hosts)
    assert conn.run("echo trusted") == (0, "trusted\n", "")
    conn.close()
    # the jump host's key changes: refused like a direct host's
    jump.new_host_key()
    jump.restart()
    with pytest.raises(ChangedHostKey) as changed:
        _connect(host, known_hosts)
    assert (changed.value.hostname, changed.value.port) == ("127.0.0.1", jump.port)
    assert changed.value.fingerprint_sha256 == jump.host_key_fingerprint and "CHANGED" in str(changed.value)
    assert target.session_pids() == []
    # the target's key unknown behind a known jump host: refused with the target's key, the jump closed
    known_hosts.write_text(jump.known_hosts_line)
    with pytest.raises(UnknownHostKey) as info:
        _connect(host, known_hosts)
    assert (info.value.hostname, info.value.port) == ("127.0.0.1", target.port)
    assert info.value.fingerprint_sha256 == target.host_key_fingerprint
    assert _wait_no_sessions(jump) == [] and _wait_no_sessions(target) == []


@pytest.mark.slow
def test_jump_host_that_cannot_reach_the_target(servers: list[SSHServer], tmp_path: Path, known_hosts: Path) -> None:
    jump = _server(tmp_path, "sshd-jump")
    closed = _server(tmp_path, "sshd-no-forwarding", client_key=jump.client_key, options=["AllowTcpForwarding no"])
    servers += [jump, closed]
    _trust(known_hosts, jump, closed)
    key = jump.client_key
    nothing = free_port()  # nobody listens here
    host = Host(
        name="gone",
        kind="ssh",
        hostname="127.0.0.1",
        port=nothing,
        user="root",
        identity_file=str(key),
        proxy_jump=f"root@127.0.0.1:{jump.port}",
    )
    shutil.copy(key, Path(known_hosts).parent / "id_ed25519")
    started = time.monotonic()
    with pytest.raises(SSHError) as info:
        _connect(host, known_hosts)
    assert time.monotonic() - started < 5
    assert (
        str(info.value) == f"jump host root@127.0.0.1:{jump.port} could not reach 127.0.0.1:{nothing}: Connect failed"
    )
    assert _wait_no_sessions(jump) == []
    # a jump host whose sshd forbids forwarding: the same clear error, about the reachable target
    via_closed = _host(jump, key, proxy_jump=f"root@127.0.0.1:{closed.port}")
    with pytest.raises(SSHError) as info:
        _connect(via_closed, known_hosts)
    assert str(info.value) == (
        f"jump host root@127.0.0.1:{closed.port} could not reach 127.0.0.1:{jump.port}: Administratively prohibited"
    )
    assert _wait_no_sessions(closed) == [] and _wait_no_sessions(jump) == []


# -- through the backend and the run manager ----------------------------------------------------------------


@pytest.mark.slow
def test_backend_and_manager_with_passphrase_and_jump(
    servers: list[SSHServer], tmp_path: Path, known_hosts: Path, db_path: Path, encrypted_key: Path
) -> None:
    """One encrypted key for the jump host (an SSH config alias) and the target: asked once, for both
    connections and the backend's reconnect; then the manager probes the target through the jump."""
    jump = _server(tmp_path, "sshd-jump")
    target = _server(tmp_path, "sshd-target", client_key=jump.client_key)
    servers += [jump, target]
    for server in (jump, target):
        server.authorize(Path(f"{encrypted_key}.pub"))
    _trust(known_hosts, jump, target)
    (Path(known_hosts).parent / "config").write_text(
        f"Host jumpbox\n  HostName 127.0.0.1\n  Port {jump.port}\n  User root\n  IdentityFile {encrypted_key}\n"
    )
    add_host(db_path, _host(target, encrypted_key, proxy_jump="jumpbox", python=sys.executable))
    prompts = Prompts(PASSPHRASE)
    backend = SSHBackend(get_host(db_path, "box"), known_hosts_path=known_hosts, passphrase_callback=prompts)
    backend.connect()
    assert backend.conn is not None and backend.conn.run("echo backend") == (0, "backend\n", "")
    assert backend.root == str(tmp_path / "remote")
    backend.close()
    backend.connect()
    assert backend.conn is not None and backend.conn.transport.getpeername() == ("127.0.0.1", jump.port)
    backend.close()
    assert prompts.prompts == [f"Passphrase for key {encrypted_key}:"]
    forget_passphrases()
    manager = RunManager(db_path, passphrase_callback=prompts, known_hosts_path=known_hosts)
    try:
        result = manager.probe("box")
    finally:
        manager.close()
    assert result["ok"] and result["gpu_count"] == 0 and result["payload_uploaded"] is True, json.dumps(result)
    assert len(prompts.prompts) == 2 and get_host(db_path, "box").gpu_count == 0
