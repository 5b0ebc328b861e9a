"""The CLI asks for an encrypted key's passphrase on the terminal, without echo, and never waits for
one without a terminal. Driven through a real pseudo-terminal and a real sshd."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.commands.hosts import terminal_passphrase
from gpuplanner.launch.ssh_connection import forget_passphrases
from tests.conftest import REPO_ROOT
from tests.launch.conftest import add_ssh_host
from tests.sshd import keygen

SECRET = "correct horse"
# Make the pseudo-terminal this child's controlling terminal (getpass reads /dev/tty), then run the CLI.
ON_A_TTY = (
    "import fcntl, runpy, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); sys.argv = ['gpuplanner'] + "
    "sys.argv[1:]; runpy.run_module('gpuplanner', run_name='__main__')"
)


class Terminal:
    """A child process on a pseudo-terminal: read what it prints, type answers."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-c", ON_A_TTY, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = b""

    def read_until(self, text: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while text.encode() not in self.screen:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared; the terminal shows {self.screen.decode()!r}")
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    break
        return self.screen.decode(errors="replace")

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout_s: float = 60.0) -> tuple[int, str]:
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            self._drain()
        code = self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        self._drain()
        os.close(self.master)
        return code, self.screen.decode(errors="replace")

    def _drain(self) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if not ready:
                return
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.screen += chunk


@pytest.fixture(autouse=True)
def _no_remembered_passphrases():
    forget_passphrases()
    yield
    forget_passphrases()


def test_no_terminal_means_no_question(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(SECRET + "\n"))
    assert terminal_passphrase("Passphrase for key /k:") is None  # never reads a pipe as a passphrase


@pytest.mark.slow
def test_cli_probe_asks_for_the_passphrase_on_the_terminal(
    db_path: Path, sshd, known_hosts: Path, tmp_path: Path
) -> None:
    key = keygen(tmp_path / "id_encrypted", "encrypted", passphrase=SECRET)
    sshd.authorize(Path(f"{key}.pub"))
    add_ssh_host(db_path, "box", sshd, trust=known_hosts, identity_file=str(key))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SSH_AUTH_SOCK": ""}
    terminal = Terminal(["hosts", "probe", "box", "--db", str(db_path), "--json"], env)
    terminal.read_until(f"Passphrase for key {key}:")
    terminal.type(SECRET)
    code, screen = terminal.finish()
    assert code == 0, screen
    after_prompt = screen.split(f"Passphrase for key {key}:", 1)[1]
    assert SECRET not in after_prompt  # not echoed
    doc = json.loads(after_prompt[after_prompt.index("{") :])
    assert doc["ok"] is True and doc["torch"]


@pytest.mark.slow
def test_cli_probe_without_a_terminal_says_to_use_ssh_add(
    db_path: Path,
    sshd,
    known_hosts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io

    key = keygen(tmp_path / "id_encrypted", "encrypted", passphrase=SECRET)
    sshd.authorize(Path(f"{key}.pub"))
    add_ssh_host(db_path, "box", sshd, trust=known_hosts, identity_file=str(key))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    assert main(["hosts", "probe", "box", "--db", str(db_path)]) == 1
    err = capsys.readouterr().err
    assert str(key) in err and "ssh-add" in err and "nothing here can ask for its passphrase" in err
