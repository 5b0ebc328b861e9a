"""A host that cannot be reached is named with the reason in words, never paramiko's "[Errno None] Unable
to connect to port N on ADDRESS" (the Hosts pane and `hosts probe` show this message as it is)."""

from __future__ import annotations

import errno
from pathlib import Path

import paramiko
import pytest

from gpuplanner.launch.hosts import Host
from gpuplanner.launch.ssh_connection import SSHConnection, SSHError, why_not_connected
from tests.sshd import free_port


def test_a_closed_port_says_connection_refused(tmp_path: Path) -> None:
    port = free_port()  # nobody listens here
    host = Host(name="box", kind="ssh", hostname="127.0.0.1", port=port)
    with pytest.raises(SSHError) as raised:
        SSHConnection(host, known_hosts_path=tmp_path / "known_hosts", connect_timeout_s=5).connect()
    assert str(raised.value) == f"box: cannot connect to 127.0.0.1:{port}: connection refused"


def test_each_addresss_reason_is_said_once() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    unreachable = OSError(errno.ENETUNREACH, "Network is unreachable")
    error = paramiko.ssh_exception.NoValidConnectionsError(
        {
            ("::1", 22, 0, 0): refused,
            ("127.0.0.1", 22): ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        }
    )
    assert why_not_connected(error) == "connection refused"
    both = paramiko.ssh_exception.NoValidConnectionsError({("10.0.0.5", 22): unreachable, ("::1", 22, 0, 0): refused})
    assert why_not_connected(both) == "connection refused; network is unreachable"
    assert why_not_connected(TimeoutError("timed out")) == "no answer (timed out)"
    assert why_not_connected(EOFError()) == "the server closed the connection"
