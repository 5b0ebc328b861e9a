"""The SSH config as a new user has it (Match, Include, ProxyJump, IdentityFile with ~ and %h), host
prices from the CLI (this machine included) and Slurm hosts added from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.launch import ssh_config
from gpuplanner.launch.hosts import get_host, ssh_config_host, ssh_config_hosts


@pytest.fixture
def user_config(_private_home: Path) -> Path:
    ssh = _private_home / ".ssh"
    (ssh / "conf.d").mkdir()
    (ssh / "conf.d" / "bastion.conf").write_text(
        "Host bastion\n    HostName bastion.example.org\n    User jump\n    Port 2201\nHost inc-*\n    User pat\n"
    )
    config = ssh / "config"
    config.write_text(
        "Include conf.d/*.conf\n"
        'Match host gpu1 exec "true"\n'
        "    User matched\n"
        "Host gpu1\n"
        "    HostName 10.0.0.5\n"
        "    Port 2222\n"
        "    IdentityFile ~/.ssh/keys/%h.key\n"
        "    ProxyJump bastion\n"
        "Host plain\n"
        "    HostName=plain.example.org\n"
        "Host *\n"
        "    ServerAliveInterval 30\n"
    )
    return config


def test_ssh_g_resolves_match_include_jump_and_identity_tokens(user_config: Path, _private_home: Path) -> None:
    hosts = {h.name: h for h in ssh_config_hosts(None)}
    assert sorted(hosts) == ["bastion", "gpu1", "plain"]  # the included file's alias too, no patterns
    gpu1 = hosts["gpu1"]
    assert (gpu1.hostname, gpu1.port, gpu1.user, gpu1.proxy_jump) == ("10.0.0.5", 2222, "matched", "bastion")
    assert gpu1.identity_file == str(_private_home / ".ssh" / "keys" / "10.0.0.5.key")
    bastion = hosts["bastion"]
    assert (bastion.hostname, bastion.port, bastion.user) == ("bastion.example.org", 2201, "jump")
    assert bastion.identity_file is None  # only the client's default keys: the connection tries those itself
    assert hosts["plain"].hostname == "plain.example.org"
    assert ssh_config.resolve("gpu1").source == "ssh -G"
    assert ssh_config_host("not-in-config") is None


def test_paramiko_fallback_inlines_includes_and_names_what_it_cannot_read(user_config: Path, tmp_path: Path) -> None:
    resolved = ssh_config.resolve("bastion", use_ssh=False)  # as on a machine without OpenSSH's client
    assert (resolved.hostname, resolved.port, resolved.user, resolved.source) == (
        "bastion.example.org",
        2201,
        "jump",
        "paramiko",
    )
    bad = tmp_path / "bad_config"
    bad.write_text("Match tagged gpu\n    User x\nHost box\n    HostName 1.2.3.4\n")
    with pytest.raises(ssh_config.SSHConfigError) as caught:
        ssh_config.resolve("box", bad, use_ssh=False)
    message = str(caught.value)
    assert str(bad) in message and "install OpenSSH's client" in message


def test_cli_adds_an_alias_of_a_config_with_match_and_include(
    user_config: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hosts", "add", "gpu1", "--db", str(db_path), "--price", "2.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["hostname"], doc["port"], doc["user"], doc["proxy_jump"]) == ("10.0.0.5", 2222, "matched", "bastion")
    assert get_host(db_path, "gpu1").price_usd_per_gpu_hour == 2.5


def test_cli_without_ssh_reports_an_unreadable_config_in_one_line(
    _private_home: Path, db_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (_private_home / ".ssh" / "config").write_text("Match tagged gpu\n    User x\nHost box\n    HostName 1.2.3.4\n")
    monkeypatch.setenv("PATH", str(_private_home))  # no ssh on the PATH
    assert main(["hosts", "add", "box", "--db", str(db_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "paramiko's parser cannot read it" in err and "install OpenSSH's client" in err


def test_cli_prices_every_host_and_refuses_bad_prices(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(db_path)]
    assert main(["hosts", "add", "local", *db, "--price", "0.75"]) == 0
    assert get_host(db_path, "local").price_usd_per_gpu_hour == 0.75
    assert main(["hosts", "add", "box", *db, "--hostname", "10.0.0.9", "--price", "1"]) == 0
    assert main(["hosts", "set-price", "box", "3.25", "--spot", *db]) == 0
    box = get_host(db_path, "box")
    assert (box.price_usd_per_gpu_hour, box.pricing) == (3.25, "spot")
    assert main(["hosts", "set-price", "local", "1.5", *db]) == 0
    assert get_host(db_path, "local").price_usd_per_gpu_hour == 1.5
    capsys.readouterr()
    for bad in ("inf", "nan", "-1", "abc"):
        assert main(["hosts", "set-price", "box", bad, *db]) == 2
        err = capsys.readouterr().err
        assert "USD:" in err and "Traceback" not in err
    assert main(["hosts", "add", "other", *db, "--hostname", "h", "--price", "inf"]) == 2
    assert "--price: price per GPU-hour must be a finite number" in capsys.readouterr().err
    assert main(["hosts", "add", "local", *db, "--price", "-2"]) == 2
    assert "must not be negative" in capsys.readouterr().err
    assert get_host(db_path, "box").price_usd_per_gpu_hour == 3.25  # nothing changed by the refusals
    assert main(["hosts", "set-price", "box", "none", *db]) == 0
    assert get_host(db_path, "box").price_usd_per_gpu_hour is None
    assert main(["hosts", "set-price", "nosuch", "1", *db]) == 2


def test_cli_adds_a_slurm_login_node(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(db_path)]
    flags = ["--slurm", "--hostname", "login.hpc.example.org", "--user", "me", "--partition", "gpu", "--account"]
    flags += ["proj1", "--qos", "high", "--gpus-per-node", "4", "--nodes", "2", "--time-limit", "12:00:00"]
    flags += ["--requeue", "--remote-root", "/shared/me/gpuplanner", "--price", "2.1"]
    assert main(["hosts", "add", "hpc", *db, *flags]) == 0
    host = get_host(db_path, "hpc")
    assert host.kind == "slurm" and host.remote_root == "/shared/me/gpuplanner"
    settings = host.slurm_settings
    assert (settings.partition, settings.account, settings.qos) == ("gpu", "proj1", "high")
    assert (settings.gpus_per_node, settings.nodes, settings.time_limit, settings.requeue) == (4, 2, "12:00:00", True)
    assert settings.sbatch_options() == [
        "--partition=gpu",
        "--account=proj1",
        "--qos=high",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=4",
        "--time=12:00:00",
        "--signal=B:TERM@120",
        "--requeue",
    ]
    capsys.readouterr()
    assert main(["hosts", "list", *db]) == 0
    listed = capsys.readouterr().out
    assert "slurm me@login.hpc.example.org:22" in listed and "8 GPUs" in listed  # 2 nodes x 4, not probed yet
    assert main(["hosts", "add", "x", *db, "--hostname", "h", "--partition", "gpu"]) == 2
    assert "--partition: a Slurm setting; add --slurm" in capsys.readouterr().err
    assert main(["hosts", "add", "y", *db, "--slurm", "--hostname", "h", "--time-limit", "soon"]) == 2
    assert "--time-limit: 'soon' is not a Slurm time limit" in capsys.readouterr().err
    assert main(["hosts", "add", "z", *db, "--slurm", "--hostname", "h", "--partition", "a b"]) == 2
    assert "--partition:" in capsys.readouterr().err
    args = ["--slurm", "--hostname", "h", "--time-limit", "2", "--signal-lead", "300"]
    assert main(["hosts", "add", "w", *db, *args]) == 2
    assert "--signal-lead:" in capsys.readouterr().err


def test_a_name_a_wildcard_host_applies_to_can_be_added(
    _private_home: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Host gpu-* !gpu-old`` then ``hosts add gpu-1``: as ``ssh gpu-1`` connects (issue 30 item 6); a
    ``--hostname`` that a pattern names gets the config too; ``Host *`` alone makes no name known."""
    (_private_home / ".ssh" / "config").write_text(
        "Host gpu-* !gpu-old\n"
        "    User trainer\n"
        "    Port 2200\n"
        "    IdentityFile ~/.ssh/gpu_%h\n"
        "Host *\n"
        "    ServerAliveInterval 30\n"
    )
    assert main(["hosts", "add", "gpu-1", "--db", str(db_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["hostname"], doc["port"], doc["user"]) == ("gpu-1", 2200, "trainer")
    assert get_host(db_path, "gpu-1").identity_file == str(_private_home / ".ssh" / "gpu_gpu-1")
    # a friendly name for a pattern-named machine
    assert main(["hosts", "add", "box", "--hostname", "gpu-7", "--db", str(db_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["name"], doc["hostname"], doc["port"], doc["user"]) == ("box", "gpu-7", 2200, "trainer")
    # negated, and a name only `Host *` covers: not configured, so --hostname is needed
    for name in ("gpu-old", "typo"):
        assert main(["hosts", "add", name, "--db", str(db_path)]) == 2
        assert "--hostname: needed" in capsys.readouterr().err
    assert ssh_config.known("gpu-1") and not ssh_config.known("gpu-old") and not ssh_config.known("gpu")
