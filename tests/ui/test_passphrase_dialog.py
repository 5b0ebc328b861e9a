"""The passphrase dialog: asked from a worker thread, answered on the GUI thread; a real probe of a real
sshd through the Hosts pane with an encrypted key."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QInputDialog, QLineEdit, QWidget

from gpuplanner.launch.hosts import Host, add_host
from gpuplanner.launch.ssh_connection import forget_passphrases
from gpuplanner.ui.dialogs.passphrase_dialog import DIALOG_OBJECT_NAME, PassphrasePrompter
from gpuplanner.ui.hosts.hosts_model import COLUMNS
from gpuplanner.ui.hosts.hosts_pane import HostsPane
from tests.sshd import SSHServer, available, keygen

pytestmark = pytest.mark.xdist_group("ui_hosts")
SECRET = "correct horse"


def _open_dialog() -> QInputDialog | None:
    for widget in QApplication.topLevelWidgets():
        if widget.objectName() == DIALOG_OBJECT_NAME and widget.isVisible():
            return widget  # type: ignore[return-value]
    return None


def when_shown(act: Any) -> QTimer:
    """Call ``act(dialog)`` once the dialog is on screen. The dialog runs its own (modal) event loop, so
    this polls from a timer, which fires inside that loop."""
    timer = QTimer()
    timer.setInterval(20)

    def poll() -> None:
        dialog = _open_dialog()
        if dialog is not None:
            timer.stop()
            act(dialog)

    timer.timeout.connect(poll)
    timer.start()
    return timer


class _Asker(threading.Thread):
    """Calls the prompter from a worker thread, as a connection does."""

    def __init__(self, prompter: PassphrasePrompter, prompt: str) -> None:
        super().__init__(daemon=True)
        self.prompter, self.prompt = prompter, prompt
        self.answer: str | None = "not answered"

    def run(self) -> None:
        self.answer = self.prompter(self.prompt)


@pytest.fixture
def window(qtbot: Any) -> QWidget:
    widget = QWidget()
    qtbot.addWidget(widget)
    widget.show()
    return widget


def test_a_worker_thread_gets_what_the_user_types(qtbot: Any, window: QWidget) -> None:
    prompter = PassphrasePrompter(window)
    seen: dict[str, Any] = {}

    def type_secret(dialog: QInputDialog) -> None:
        seen.update(echo=dialog.textEchoMode(), label=dialog.labelText(), waiting=asker.is_alive())
        dialog.setTextValue(SECRET)
        dialog.accept()

    timer = when_shown(type_secret)
    asker = _Asker(prompter, "Passphrase for key /home/me/.ssh/id_ed25519:")
    asker.start()
    qtbot.waitUntil(lambda: not asker.is_alive(), timeout=10_000)
    timer.stop()
    assert asker.answer == SECRET
    assert seen["echo"] == QLineEdit.EchoMode.Password and seen["waiting"]  # the worker waited for the answer
    assert "Passphrase for key /home/me/.ssh/id_ed25519:" in seen["label"]


def test_cancel_answers_none_and_close_frees_a_waiting_worker(qtbot: Any, window: QWidget) -> None:
    prompter = PassphrasePrompter(window)
    timer = when_shown(lambda dialog: dialog.reject())
    asker = _Asker(prompter, "Passphrase for key /k:")
    asker.start()
    qtbot.waitUntil(lambda: not asker.is_alive(), timeout=10_000)
    assert asker.answer is None
    closed: list[bool] = []
    timer = when_shown(lambda dialog: (prompter.close(), closed.append(True)))  # the window goes away
    waiting = _Asker(prompter, "Passphrase for key /k:")
    waiting.start()
    qtbot.waitUntil(lambda: not waiting.is_alive(), timeout=10_000)
    timer.stop()
    assert closed and waiting.answer is None
    qtbot.waitUntil(lambda: _open_dialog() is None, timeout=5_000)
    assert prompter("Passphrase for key /k:") is None  # closed: nothing is asked any more


@pytest.fixture
def encrypted_sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SSHServer, Path]]:
    if not available():
        pytest.fail("the SSH tests need /usr/sbin/sshd and root: install openssh-server (.ci/run does)")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GPUPLANNER_KNOWN_HOSTS", str(home / ".ssh" / "known_hosts"))
    monkeypatch.setenv("GPUPLANNER_REMOTE_ROOT", str(tmp_path / "remote"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    server = SSHServer(tmp_path / "sshd", "127.0.0.1").start()
    key = keygen(tmp_path / "id_encrypted", "encrypted", passphrase=SECRET)
    server.authorize(Path(f"{key}.pub"))
    (home / ".ssh" / "known_hosts").write_text(server.known_hosts_line)
    forget_passphrases()
    yield server, key
    forget_passphrases()
    server.stop()


@pytest.mark.slow
def test_hosts_pane_probe_unlocks_an_encrypted_key(qtbot: Any, tmp_services: Any, encrypted_sshd: Any) -> None:
    server, key = encrypted_sshd
    add_host(
        tmp_services.db_path,
        Host(
            name="box",
            kind="ssh",
            hostname=server.address,
            port=server.port,
            user="root",
            identity_file=str(key),
            python=sys.executable,
        ),
    )
    pane = HostsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.show()
    try:
        pane.reload()
        prompts: list[str] = []

        def answer(dialog: QInputDialog) -> None:
            prompts.append(dialog.labelText())
            dialog.setTextValue(SECRET)
            dialog.accept()

        timer = when_shown(answer)
        pane.probe("box")
        qtbot.waitUntil(lambda: not pane.probing(), timeout=120_000)
        timer.stop()
        reachable = pane.model.index(pane.model.row_of("box"), COLUMNS.index("Reachable")).data()
        assert reachable == "yes", pane.message_label.text()
        assert len(prompts) == 1 and str(key) in prompts[0]
        pane.probe("box")  # unlocked for the rest of the process: no second question
        qtbot.waitUntil(lambda: not pane.probing(), timeout=120_000)
        assert _open_dialog() is None and len(prompts) == 1
    finally:
        pane.shutdown()


def test_both_panes_give_their_connections_the_dialog(qtbot: Any, tmp_services: Any) -> None:
    from gpuplanner.ui.runs.runs_pane import RunsPane

    for pane in (HostsPane(tmp_services), RunsPane(tmp_services)):
        qtbot.addWidget(pane)
        manager = pane._make_manager()
        try:
            assert manager.passphrase_callback is pane.passphrase
        finally:
            manager.close()
            pane.shutdown(False) if isinstance(pane, RunsPane) else pane.shutdown()
        assert pane.passphrase("Passphrase for key /k:") is None  # shut down: nothing is asked


def _open_dialogs() -> list[QInputDialog]:
    return [w for w in QApplication.topLevelWidgets() if w.objectName() == DIALOG_OBJECT_NAME and w.isVisible()]


def test_two_questions_at_once_get_one_dialog_after_the_other(qtbot: Any, window: QWidget) -> None:
    prompter = PassphrasePrompter(window)
    shown: list[tuple[str, int]] = []

    def answer(dialog: QInputDialog) -> None:
        shown.append((dialog.labelText().splitlines()[0], len(_open_dialogs())))
        dialog.setTextValue(dialog.labelText().split()[3].rstrip(":"))  # the key's name as its passphrase
        dialog.accept()
        if len(shown) < 2:
            timers.append(when_shown(answer))

    first, second = _Asker(prompter, "Passphrase for key A:"), _Asker(prompter, "Passphrase for key B:")
    timers = [when_shown(answer)]
    first.start()
    second.start()
    qtbot.waitUntil(lambda: not first.is_alive() and not second.is_alive(), timeout=10_000)
    for timer in timers:
        timer.stop()
    assert (first.answer, second.answer) == ("A", "B")
    assert sorted(p for p, _ in shown) == ["Passphrase for key A:", "Passphrase for key B:"]
    assert all(count == 1 for _, count in shown)  # never two dialogs on screen


def test_close_answers_a_queued_question_too(qtbot: Any, window: QWidget) -> None:
    prompter = PassphrasePrompter(window)
    first = _Asker(prompter, "Passphrase for key A:")
    second = _Asker(prompter, "Passphrase for key B:")

    def close_when_both_asked(dialog: QInputDialog) -> None:
        second.start()
        QTimer.singleShot(300, prompter.close)  # the second question is queued by then

    timer = when_shown(close_when_both_asked)
    first.start()
    qtbot.waitUntil(lambda: not first.is_alive() and second.ident is not None and not second.is_alive(), timeout=10_000)
    timer.stop()
    assert (first.answer, second.answer) == (None, None)
    qtbot.waitUntil(lambda: not _open_dialogs(), timeout=5_000)
