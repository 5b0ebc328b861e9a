"""Hosts in the history, the SSH config, host keys (unknown refused until trusted, changed refused), CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.launch.hosts import (
    LOCAL_HOST_NAME,
    ChangedHostKey,
    Host,
    HostError,
    UnknownHostKey,
    add_host,
    get_host,
    list_hosts,
    remove_host,
    ssh_config_hosts,
    update_host,
)
from gpuplanner.launch.manager import RunManager
from gpuplanner.launch.ssh_connection import SSHConnection
from tests.launch.conftest import add_ssh_host, rows


def test_hosts_store_local_first(db_path: Path) -> None:
    assert [h.name for h in list_hosts(db_path)] == [LOCAL_HOST_NAME]
    add_host(db_path, Host(name="gpu-b", kind="ssh", hostname="10.0.0.2", price_usd_per_gpu_hour=2.5, pricing="spot"))
    add_host(db_path, Host(name="gpu-a", kind="ssh", hostname="10.0.0.1", port=2222, user="me", proxy_jump="bastion"))
    hosts = list_hosts(db_path)
    assert [h.name for h in hosts] == ["local", "gpu-a", "gpu-b"]
    assert hosts[1] == Host(name="gpu-a", kind="ssh", hostname="10.0.0.1", port=2222, user="me", proxy_jump="bastion")
    update_host(db_path, Host(name="local", kind="local", price_usd_per_gpu_hour=0.5))
    assert list_hosts(db_path)[0].price_usd_per_gpu_hour == 0.5
    with pytest.raises(HostError, match="exists"):
        add_host(db_path, Host(name="gpu-a", kind="ssh", hostname="x"))
    with pytest.raises(HostError):
        add_host(db_path, Host(name="bad", kind="ssh", hostname="x", pricing="cheap"))
    remove_host(db_path, "gpu-b")
    with pytest.raises(HostError, match="no host"):
        get_host(db_path, "gpu-b")
    with pytest.raises(HostError):
        remove_host(db_path, LOCAL_HOST_NAME)


def test_ssh_config_aliases(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host trainbox\n  HostName 10.1.2.3\n  User ml\n  Port 2200\n  IdentityFile ~/.ssh/id_train\n"
        "  ProxyJump jump@bastion:22\nHost *.internal\n  User other\n"
    )
    (host,) = ssh_config_hosts(config)
    assert (host.name, host.hostname, host.user, host.port, host.proxy_jump) == (
        "trainbox",
        "10.1.2.3",
        "ml",
        2200,
        "jump@bastion:22",
    )
    assert host.identity_file and host.identity_file.endswith("/.ssh/id_train")


def test_cli_hosts_add_list_remove(db_path: Path, _private_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (_private_home / ".ssh" / "config").write_text("Host box\n  HostName 127.0.0.9\n  User root\n  Port 2022\n")
    assert main(["hosts", "add", "box", "--db", str(db_path), "--price", "1.5", "--spot", "--json"]) == 0
    assert main(["hosts", "add", "other", "--db", str(db_path), "--hostname", "h", "--port", "23"]) == 0
    capsys.readouterr()
    assert main(["hosts", "list", "--db", str(db_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(h["name"], h["hostname"], h["port"], h["pricing"]) for h in doc] == [
        ("local", None, 22, "on-demand"),
        ("box", "127.0.0.9", 2022, "spot"),
        ("other", "h", 23, "on-demand"),
    ]
    assert main(["hosts", "add", "nowhere", "--db", str(db_path)]) == 2
    assert "--hostname" in capsys.readouterr().err
    assert main(["hosts", "remove", "other", "--db", str(db_path)]) == 0
    assert main(["hosts", "remove", "other", "--db", str(db_path)]) == 2


@pytest.mark.slow
def test_unknown_key_refused_until_trusted_changed_key_refused(db_path: Path, sshd, known_hosts: Path) -> None:
    host = add_ssh_host(db_path, "box", sshd)
    with pytest.raises(UnknownHostKey) as info:
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    exc = info.value
    assert exc.fingerprint_sha256 == sshd.host_key_fingerprint and exc.key_type == "ssh-ed25519"
    assert (exc.hostname, exc.port) == ("127.0.0.1", sshd.port)
    assert not known_hosts.exists() or known_hosts.read_text() == ""
    # the manager refuses too, and leaves no run behind
    manager = RunManager(db_path, known_hosts_path=known_hosts)
    with pytest.raises(UnknownHostKey):
        manager.launch("box", ["--max-steps", "1"])
    assert rows(db_path, "SELECT COUNT(*) FROM runs") == [(0,)]
    manager.close()
    exc.trust()
    conn = SSHConnection(host, known_hosts_path=known_hosts).connect()
    assert conn.run("echo ok") == (0, "ok\n", "")
    conn.close()
    sshd.new_host_key()
    sshd.restart()
    with pytest.raises(ChangedHostKey) as changed:
        SSHConnection(host, known_hosts_path=known_hosts).connect()
    assert changed.value.fingerprint_sha256 == sshd.host_key_fingerprint
    assert "known_hosts" in str(changed.value) and "CHANGED" in str(changed.value)


@pytest.mark.slow
def test_cli_unknown_key_no_tty_refused_then_trusted_by_fingerprint(
    db_path: Path, sshd, known_hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_ssh_host(db_path, "box", sshd)
    code = main(["hosts", "probe", "box", "--db", str(db_path), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and sshd.host_key_fingerprint in err and len(err.strip().splitlines()) == 1
    assert main(["hosts", "probe", "box", "--db", str(db_path), "--trust-host-key", "SHA256:wrong"]) == 2
    assert (
        main(["hosts", "probe", "box", "--db", str(db_path), "--json", "--trust-host-key", sshd.host_key_fingerprint])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["gpu_count"] == 0 and doc["torch"] and doc["payload_uploaded"] is True
    assert sshd.known_hosts_line.split()[2] in known_hosts.read_text()
    assert get_host(db_path, "box").gpu_count == 0 and get_host(db_path, "box").probe["torch"] == doc["torch"]
