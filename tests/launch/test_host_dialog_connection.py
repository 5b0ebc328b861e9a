"""The Add host dialog's Test connection against a real sshd on loopback: it connects with the fields as
typed (nothing saved), asks about an unknown host key and tries again once trusted, refuses a changed
key, says why a connection failed, never blocks the window, and drops a late answer once closed."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QTimer

from gpuplanner.launch.hosts import list_hosts
from gpuplanner.ui.dialogs import host_dialog as module
from gpuplanner.ui.dialogs.host_dialog import HostDialog
from gpuplanner.ui.hosts.hosts_pane import HostsPane
from gpuplanner.ui.services import AppServices
from tests.sshd import SSHServer

pytestmark = pytest.mark.xdist_group("ui_hosts")


@pytest.fixture
def pane(qtbot: Any, tmp_path: Path) -> Any:
    widget = HostsPane(AppServices(db_path=tmp_path / "history.sqlite", config_dir=tmp_path / "config"))
    qtbot.addWidget(widget)
    yield widget
    widget.shutdown()


def filled(pane: HostsPane, server: SSHServer, port: int | None = None) -> HostDialog:
    dialog = pane.make_host_dialog()
    dialog.name_edit.setText("box")
    dialog.hostname_edit.setText(server.address)
    dialog.port_spin.setValue(port or server.port)
    dialog.user_edit.setText("root")
    dialog.identity_edit.setText(str(server.client_key))
    dialog.python_edit.setText(sys.executable)
    dialog.show()
    return dialog


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): a real bench or sshd
def test_unknown_key_is_asked_then_the_probe_reports_this_machine_without_blocking(
    qtbot: Any, pane: HostsPane, sshd: SSHServer, known_hosts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []

    def trust(exc: Any, parent: Any) -> bool:
        asked.append(exc.hostname)
        exc.trust()
        return True

    monkeypatch.setattr(module, "ask_trust", trust)
    dialog = filled(pane, sshd)
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(50)
    dialog.test_button.click()
    assert dialog.testing and not dialog.test_button.isEnabled() and dialog.test_button.text() == "Testing…"
    dialog.test_button.click()  # a second click while testing starts nothing
    qtbot.waitUntil(lambda: dialog.test_result is not None, timeout=120_000)
    timer.stop()
    assert asked == [sshd.address]  # the unknown key was asked about once, then trusted and recorded
    assert sshd.known_hosts_line.split()[2] in known_hosts.read_text()
    text = dialog.test_label.text()
    assert text.startswith("Connected: no GPU (CPU only)") and "torch " in text
    assert f"{os.cpu_count()} CPU" in text and " RAM" in text and " free" in text
    assert dialog.test_button.isEnabled() and dialog.test_button.text() == "Test connection"
    assert len(ticks) >= 5  # the GUI thread kept running while the test connected and probed
    assert [h.name for h in list_hosts(pane.services.db_path)] == ["local"]  # nothing was saved


def test_a_refused_port_says_so_and_invalid_fields_start_nothing(
    qtbot: Any, pane: HostsPane, sshd: SSHServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "ask_trust", lambda exc, parent: pytest.fail("no key to ask about"))
    dialog = filled(pane, sshd, port=free_port())
    dialog.test_button.click()
    qtbot.waitUntil(lambda: not dialog.testing, timeout=60_000)
    assert dialog.test_label.text().startswith("Could not connect: the connection was refused")
    calls = []
    dialog.tester = lambda *args: calls.append(args)
    dialog.hostname_edit.setText("")
    dialog.test_button.click()
    assert calls == [] and dialog.error_label.text() == "Give the hostname or address."


def test_a_changed_key_is_refused(
    qtbot: Any, pane: HostsPane, sshd: SSHServer, known_hosts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known_hosts.write_text(sshd.known_hosts_line)
    sshd.new_host_key()
    sshd.restart()
    shown = []
    monkeypatch.setattr(module, "show_changed_key", lambda exc, parent: shown.append(exc.fingerprint_sha256))
    dialog = filled(pane, sshd)
    dialog.test_button.click()
    qtbot.waitUntil(lambda: not dialog.testing, timeout=60_000)
    assert dialog.test_label.text().startswith("Refused: the host's key changed")
    assert shown == [sshd.host_key_fingerprint] and dialog.test_result is None


def test_closing_mid_test_drops_the_late_answer(qtbot: Any, pane: HostsPane, sshd: SSHServer) -> None:
    dialog = filled(pane, sshd)
    answers: list[Any] = []
    dialog.tester = lambda host, ok, err: answers.append((ok, err))
    dialog.test_button.click()
    dialog.reject()
    ok, _err = answers[0]
    ok({"ok": True, "gpus": [], "torch": "2.5"})  # the answer arrives after the dialog closed
    assert dialog.test_result is None and dialog.test_label.text().startswith("Connecting to")


def test_this_machine_has_no_test_button(qtbot: Any, pane: HostsPane) -> None:
    local = list_hosts(pane.services.db_path)[0]
    dialog = pane.make_host_dialog(local)
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.test_button.isVisibleTo(dialog)


def test_a_key_the_host_does_not_accept_is_a_refused_login(
    qtbot: Any, pane: HostsPane, sshd: SSHServer, known_hosts: Path, tmp_path: Path
) -> None:
    import paramiko

    known_hosts.write_text(sshd.known_hosts_line)
    stranger = tmp_path / "stranger_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(stranger))
    dialog = filled(pane, sshd)
    dialog.identity_edit.setText(str(stranger))
    dialog.test_button.click()
    qtbot.waitUntil(lambda: not dialog.testing, timeout=60_000)
    assert dialog.test_label.text().startswith("Could not connect: the login was refused")


def test_failure_words_for_a_name_that_does_not_resolve() -> None:
    try:
        socket.getaddrinfo("no-such-host.invalid", 22)
    except socket.gaierror as exc:
        assert module.failure_text(exc).startswith("the hostname does not resolve")
    else:
        pytest.fail("a .invalid name resolved")
