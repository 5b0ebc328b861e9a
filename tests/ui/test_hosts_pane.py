"""Hosts pane: the table model, add/edit/remove, a real probe of this machine, trust-on-first-use and
the refusal of a changed host key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import paramiko
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox

from gpuplanner.launch.hosts import Host, add_host, get_host, list_hosts
from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey
from gpuplanner.ui.dialogs.host_dialog import HostDialog
from gpuplanner.ui.dialogs.trust_dialog import TrustHostKeyDialog
from gpuplanner.ui.hosts.hosts_model import COLUMNS, HostsTableModel
from gpuplanner.ui.hosts.hosts_pane import HostsPane

pytestmark = pytest.mark.xdist_group("ui_hosts")


@pytest.fixture
def hosts_pane(qtbot: Any, tmp_services: Any) -> Any:
    pane = HostsPane(tmp_services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    yield pane
    pane.shutdown()


def _cell(pane: HostsPane, name: str, column: str) -> str:
    return pane.model.index(pane.model.row_of(name), COLUMNS.index(column)).data()


def test_model_follows_qt_rules(qtmodeltester: Any, tmp_services: Any) -> None:
    add_host(
        tmp_services.db_path,
        Host(
            name="box",
            kind="ssh",
            hostname="10.0.0.5",
            port=2222,
            user="me",
            price_usd_per_gpu_hour=2.5,
            pricing="spot",
        ),
    )
    model = HostsTableModel()
    model.set_hosts(list_hosts(tmp_services.db_path))
    qtmodeltester.check(model, force_py=True)
    model.set_probing("box", True)
    assert model.index(1, COLUMNS.index("Reachable")).data() == "probing…"
    model.set_probing("box", False)
    model.set_error("box", "connection refused")
    assert model.index(1, COLUMNS.index("Reachable")).data() == "no: connection refused"
    # the failure outlives the window (issue 29 item 7): a new session's model does not say "not probed"
    again = HostsTableModel()
    again.set_hosts(list_hosts(tmp_services.db_path))
    assert again.index(1, COLUMNS.index("Reachable")).data() == "no: connection refused"
    again.set_error("box", "box: cannot connect to 10.0.0.5:2222")  # the row names the host already
    assert again.index(1, COLUMNS.index("Reachable")).data() == "no: cannot connect to 10.0.0.5:2222"
    again.set_probing("box", True)  # a new try clears it, here and for the next session
    assert HostsTableModel()._errors == {}
    assert model.index(1, COLUMNS.index("Address")).data() == "me@10.0.0.5:2222"
    assert model.index(1, COLUMNS.index("Price / GPU-h")).data() == "$2.50"
    assert model.index(0, 0).data() == "This machine"


def test_add_edit_remove_hosts(
    qtbot: Any, hosts_pane: HostsPane, tmp_services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fill(dialog: HostDialog) -> int:
        if dialog.host is None:
            dialog.name_edit.setText("gpu-box")
            dialog.hostname_edit.setText("gpu-box.example.org")
            dialog.user_edit.setText("ml")
            dialog.python_edit.setText("~/venv/bin/python")
        dialog.price_spin.setValue(1.75)
        dialog.accept()
        return QDialog.DialogCode.Accepted if dialog.result() == QDialog.DialogCode.Accepted else 0

    monkeypatch.setattr(HostDialog, "exec", fill)
    hosts_pane.add_button.click()
    qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=10_000)  # written off the GUI thread
    assert _cell(hosts_pane, "gpu-box", "Address") == "ml@gpu-box.example.org"
    assert get_host(tmp_services.db_path, "gpu-box").price_usd_per_gpu_hour == 1.75
    assert get_host(tmp_services.db_path, "gpu-box").python == "~/venv/bin/python"  # the CLI's --python
    hosts_pane.select("local")
    assert not hosts_pane.remove_button.isEnabled()  # this machine stays
    hosts_pane.edit_button.click()
    qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=10_000)
    assert get_host(tmp_services.db_path, "local").price_usd_per_gpu_hour == 1.75
    assert _cell(hosts_pane, "local", "Price / GPU-h") == "$1.75"
    hosts_pane.select("gpu-box")
    hosts_pane.remove_button.click()
    qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=10_000)
    assert hosts_pane.model.row_of("gpu-box") == -1
    assert hosts_pane.message_label.text() == "Removed gpu-box."


@pytest.mark.slow
def test_probe_this_machine(qtbot: Any, hosts_pane: HostsPane) -> None:
    hosts_pane.select("local")
    hosts_pane.probe_button.click()
    assert hosts_pane.busy.isVisible() and _cell(hosts_pane, "local", "Reachable") == "probing…"
    qtbot.waitUntil(lambda: not hosts_pane.probing(), timeout=120_000)
    assert _cell(hosts_pane, "local", "Reachable") == "yes", hosts_pane.message_label.text()
    assert _cell(hosts_pane, "local", "torch") not in ("—", None)
    import os

    # the machine beside its GPUs: this machine's real core count, memory and free disk, in words
    machine = _cell(hosts_pane, "local", "Machine")
    assert machine.startswith(f"{os.cpu_count()} CPU") and " RAM · " in machine and machine.endswith(" free")
    ram_gib = float(machine.split(" · ")[1].split()[0])
    assert ram_gib == pytest.approx(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, abs=0.5)
    assert not hosts_pane.busy.isVisible()


class _KeyManager:
    """A RunManager stand-in whose probe raises the launcher's real host-key exceptions."""

    def __init__(self, known_hosts: Path, changed: bool) -> None:
        self.key = paramiko.RSAKey.generate(1024)
        self.known_hosts = known_hosts
        self.changed = changed
        self.calls = 0

    def probe(self, name: str) -> dict:
        self.calls += 1
        if self.changed:
            raise ChangedHostKey("gpu-box.example.org", 2222, self.key, self.known_hosts)
        if not self.known_hosts.exists():
            raise UnknownHostKey("gpu-box.example.org", 2222, self.key, self.known_hosts)
        return {
            "ok": True,
            "gpus": [{"name": "NVIDIA H100", "mem_total_bytes": 80 << 30}],
            "torch": "2.5.0",
            "driver": "550.54",
            "cuda_runtime": "12.4",
        }

    def live_runs(self) -> list[int]:
        return []

    def close(self) -> None:
        pass


def _ssh_box(tmp_services: Any) -> None:
    add_host(tmp_services.db_path, Host(name="gpu-box", kind="ssh", hostname="gpu-box.example.org", port=2222))


def test_unknown_key_trusted_then_refused(
    qtbot: Any, hosts_pane: HostsPane, tmp_services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ssh_box(tmp_services)
    hosts_pane.reload()
    manager = _KeyManager(tmp_path / "known_hosts", changed=False)
    monkeypatch.setattr(hosts_pane, "_make_manager", lambda: manager)
    seen: list[str] = []

    def answer(accept: bool) -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, TrustHostKeyDialog)
        seen.append(dialog.fingerprint_label.text())
        dialog.trust_button.click() if accept else dialog.reject()

    monkeypatch.setattr(
        TrustHostKeyDialog,
        "exec",
        lambda self: (QTimer.singleShot(0, lambda: answer(accepts.pop(0))), QDialog.exec(self))[1],
    )
    accepts = [False]
    hosts_pane.probe("gpu-box")
    qtbot.waitUntil(lambda: not hosts_pane.probing(), timeout=10_000)
    assert _cell(hosts_pane, "gpu-box", "Reachable") == "no: host key not trusted"
    assert not (tmp_path / "known_hosts").exists()
    accepts = [True]
    hosts_pane.probe("gpu-box")
    qtbot.waitUntil(lambda: _cell(hosts_pane, "gpu-box", "Reachable") == "yes", timeout=10_000)
    assert seen[0].startswith("SHA256:") and seen[0] == seen[1]
    assert "gpu-box.example.org" in (tmp_path / "known_hosts").read_text()
    assert manager.calls == 3  # refused, asked again, retried after trusting


def test_changed_key_is_refused(
    qtbot: Any, hosts_pane: HostsPane, tmp_services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ssh_box(tmp_services)
    hosts_pane.reload()
    manager = _KeyManager(tmp_path / "known_hosts", changed=True)
    monkeypatch.setattr(hosts_pane, "_make_manager", lambda: manager)
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "exec", lambda self: shown.append(self.text() + self.informativeText()) or 0)
    hosts_pane.probe("gpu-box")
    qtbot.waitUntil(lambda: not hosts_pane.probing(), timeout=10_000)
    assert _cell(hosts_pane, "gpu-box", "Reachable") == "no: REFUSED: host key changed"
    assert len(shown) == 1 and "refuses to connect" in shown[0] and "SHA256:" in shown[0]
    assert manager.calls == 1


_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")  # the write lock, as another gpuplanner writing a long batch holds it
print("locked", flush=True)
sys.stdin.readline()  # held until the test releases it (a barrier, not a clock)
conn.execute("COMMIT")
"""


def test_saving_a_host_while_another_process_writes_keeps_the_window_responsive(
    qtbot: Any, hosts_pane: HostsPane, tmp_services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    from PySide6.QtCore import QTimer

    def fill(dialog: HostDialog) -> int:
        dialog.name_edit.setText("locked-box")
        dialog.hostname_edit.setText("locked-box.example.org")
        dialog.price_spin.setValue(3.25)
        dialog.accept()
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(HostDialog, "exec", fill)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(tmp_services.db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        ticks: list[int] = []
        timer = QTimer()
        timer.setInterval(50)
        timer.timeout.connect(lambda: ticks.append(1))
        timer.start()
        hosts_pane.add_button.click()  # returns while the other process holds the lock: it did not wait for it
        assert hosts_pane.saving() and "Saving host locked-box" in hosts_pane.message_label.text()
        qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=30_000)  # the event loop runs the timer meanwhile ...
        assert hosts_pane.saving()  # ... while the write still waits for the other process's lock
        holder.stdin.write("release\n")
        holder.stdin.flush()
        qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=30_000)
        timer.stop()
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    assert get_host(tmp_services.db_path, "locked-box").price_usd_per_gpu_hour == 3.25  # landed afterwards
    assert _cell(hosts_pane, "locked-box", "Price / GPU-h") == "$3.25"
    assert hosts_pane.selected_name() == "locked-box"


def test_a_failed_host_write_is_shown(qtbot: Any, hosts_pane: HostsPane, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplanner.launch.hosts as hosts_module

    def locked(*_args: Any) -> None:
        raise hosts_module.HistoryError("database is locked")

    monkeypatch.setattr(hosts_module, "remove_host", locked)
    add_host(hosts_pane.services.db_path, Host(name="keep-me", kind="ssh", hostname="keep.example.org"))
    hosts_pane.reload()
    failures: list[tuple[str, str]] = []
    hosts_pane.hostsSaveFailed.connect(lambda what, error: failures.append((what, error)))
    hosts_pane.select("keep-me")
    hosts_pane.remove_button.click()
    qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=10_000)
    assert failures and "database is locked" in failures[0][1]
    assert "Could not save the removal of keep-me: database is locked" in hosts_pane.message_label.text()
    assert hosts_pane.model.row_of("keep-me") >= 0


def test_machine_column_of_a_probe() -> None:
    from gpuplanner.ui.hosts.hosts_model import machine_text

    probe = {"ok": True, "cpu_cores": 16, "ram_bytes": 125 * 2**30, "disk_free_bytes": 40.4 * 2**30}
    assert machine_text(probe) == "16 CPUs · 125 GiB RAM · 40 GiB free"
    big = {"ok": True, "cpu_cores": 208, "ram_bytes": 1800 * 2**30, "disk_free_bytes": 2.5 * 2**30}
    assert machine_text(big) == "208 CPUs · 1.8 TiB RAM · 2.5 GiB free"
    assert machine_text({"ok": True, "cpu_count": 1}) == "1 CPU"
    assert machine_text({"ok": False, "cpu_cores": 8}) == "—" and machine_text(None) == "—"


def test_after_run_command_and_stop_when_idle_are_set_in_the_dialog(
    qtbot: Any, hosts_pane: HostsPane, tmp_services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fill(dialog: HostDialog) -> int:
        dialog.name_edit.setText("spot-box")
        dialog.hostname_edit.setText("203.0.113.9")
        assert not dialog.idle_check.isEnabled()  # no command yet: nothing to wait for
        dialog.after_run_edit.setText("aws ec2 stop-instances --instance-ids i-0abc")
        dialog.idle_check.setChecked(True)
        dialog.idle_pct_spin.setValue(5)
        dialog.idle_minutes_spin.setValue(15)
        dialog.accept()
        return QDialog.DialogCode.Accepted if dialog.result() == QDialog.DialogCode.Accepted else 0

    monkeypatch.setattr(HostDialog, "exec", fill)
    hosts_pane.add_button.click()
    qtbot.waitUntil(lambda: not hosts_pane.saving(), timeout=10_000)
    host = get_host(tmp_services.db_path, "spot-box")
    assert host.after_run_command == "aws ec2 stop-instances --instance-ids i-0abc"
    assert host.after_run_idle == {"util_pct": 5.0, "minutes": 15.0}
    again = HostDialog(host)
    qtbot.addWidget(again)
    assert again.after_run_edit.text() == host.after_run_command and again.idle_check.isChecked()
    assert (again.idle_pct_spin.value(), again.idle_minutes_spin.value()) == (5.0, 15.0)
    again.after_run_edit.setText("   ")  # cleared: no command, no idle wait
    assert again.result_host().after_run_command is None and again.result_host().after_run_idle is None
    again.kind_combo.setCurrentIndex(again.kind_combo.findData("slurm"))
    again.after_run_edit.setText("echo done")
    assert again.result_host().after_run_idle is None  # Slurm frees its nodes itself: no idle wait
