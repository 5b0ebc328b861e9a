"""The Hosts pane: this machine, SSH hosts and Slurm login nodes, probed for GPUs, driver, CUDA and
torch; prices per host. The add/edit dialog has the Slurm settings (partition, account, QoS, GPUs per
node, nodes, time limit, container image, requeue, shared run folder) for a Slurm login node.

Probes run on the window's shared :class:`RunController` (standalone, one of the pane's own, created on
the first probe); an unknown host key opens the trust-on-first-use dialog and the probe is retried once
trusted; a changed key is refused. Adding, editing, removing and importing hosts write the history on
the pane's write thread (a :class:`BackgroundJob`, one write at a time, in order): the GUI thread never
waits for a database another process holds locked; the table follows when the write is done, and a
failed write is shown in the message line.

Signals:
    hostsSaved(str what)                 a write finished and the table shows its result
    hostsSaveFailed(str what, str error) a write failed (the message line says why)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.history.db import BUSY_TIMEOUT_MS
from gpuplanner.launch.host_reports import HostProbe
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.dialogs.host_dialog import HostDialog
from gpuplanner.ui.dialogs.passphrase_dialog import PassphrasePrompter
from gpuplanner.ui.dialogs.trust_dialog import ask_trust, show_changed_key
from gpuplanner.ui.hosts.hosts_model import COLUMNS, HostsTableModel
from gpuplanner.ui.runs.run_controller import RunController


def _describe_write_error(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{text} (nothing was changed)"


class HostsPane(QWidget):
    """See the module docstring."""

    hostsSaved = Signal(str)
    hostsSaveFailed = Signal(str, str)

    def __init__(self, services: Any, parent: QWidget | None = None, controller: RunController | None = None) -> None:
        super().__init__(parent)
        self.services = services
        # The window's shared controller (one RunManager for every pane), else one of its own, built on
        # the first probe (standalone).
        self._controller: RunController | None = controller
        self._owns_controller = controller is None
        self._in_flight = 0
        self._writes = 0
        self._write_ids = 0
        self._pending_writes: dict[int, tuple[str | None, Any]] = {}
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)  # writes in the order they were asked for
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_write_done)
        self._signals.failed.connect(self._on_write_failed)
        if controller is not None and controller.passphrase is not None:
            self.passphrase = controller.passphrase
        else:
            self.passphrase = PassphrasePrompter(self)  # asks for encrypted keys' passphrases (worker thread)
        self.model = HostsTableModel(self)
        layout = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.edit_button = QPushButton("Edit…")
        self.remove_button = QPushButton("Remove")
        self.import_button = QPushButton("Import from ~/.ssh/config")
        self.probe_button = QPushButton("Probe")
        self.probe_button.setToolTip("Connect, upload the trainer if needed, and report GPUs, driver, CUDA and torch")
        self.probe_all_button = QPushButton("Probe all")
        for b in (
            self.add_button,
            self.edit_button,
            self.remove_button,
            self.import_button,
            self.probe_button,
            self.probe_all_button,
        ):
            bar.addWidget(b)
        bar.addStretch(1)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate while probing
        self.busy.setMaximumWidth(160)
        self.busy.setVisible(False)
        bar.addWidget(self.busy)
        layout.addLayout(bar)
        self.message_label = QLabel()
        self.message_label.setWordWrap(True)
        layout.addWidget(self.message_label)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # long cloud addresses and probe errors would push the right-hand columns off screen at 1280x800:
        # those columns are as wide as they are given, elided in the middle (their tooltips have them whole)
        for column, width in (("Address", 170), ("Reachable", 145)):
            header.setSectionResizeMode(COLUMNS.index(column), QHeaderView.ResizeMode.Interactive)
            header.resizeSection(COLUMNS.index(column), width)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(False)
        header.setStretchLastSection(True)
        self.table.verticalHeader().setVisible(False)
        self.table.doubleClicked.connect(self._on_edit_clicked)
        layout.addWidget(self.table, 1)
        self.add_button.clicked.connect(self._on_add_clicked)
        self.edit_button.clicked.connect(self._on_edit_clicked)
        self.remove_button.clicked.connect(self._on_remove_clicked)
        self.import_button.clicked.connect(self._on_import_clicked)
        self.probe_button.clicked.connect(self._on_probe_clicked)
        self.probe_all_button.clicked.connect(self._on_probe_all_clicked)
        self.table.selectionModel().selectionChanged.connect(self._update_buttons)
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)
        self.reload()

    # -- data -----------------------------------------------------------------------------------
    def reload(self) -> None:
        from gpuplanner.launch.hosts import list_hosts

        selected = self.selected_name()
        self.model.set_hosts(list_hosts(self.services.db_path))
        row = self.model.row_of(selected) if selected else 0
        if row >= 0 and self.model.rowCount():
            self.table.selectRow(row)
        self._update_buttons()

    def selected_name(self) -> str | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.model.host(rows[0].row()).name if rows else None

    def select(self, name: str) -> None:
        row = self.model.row_of(name)
        if row >= 0:
            self.table.selectRow(row)

    @Slot()
    def _update_buttons(self, *args: Any) -> None:
        name = self.selected_name()
        local = name == "local"
        self.edit_button.setEnabled(name is not None)
        self.remove_button.setEnabled(name is not None and not local)
        self.probe_button.setEnabled(name is not None)

    def _say(self, text: str, error: bool = False) -> None:
        self.message_label.setStyleSheet("color: #b00020" if error else "")
        self.message_label.setText(text)

    # -- add / edit / remove / import -----------------------------------------------------------
    def make_host_dialog(self, host: Any = None) -> HostDialog:
        return HostDialog(host, self, tester=self.test_host)

    def test_host(self, host: Any, on_result: Any, on_error: Any) -> None:
        """Connect to and probe an unsaved ``host`` on the launcher thread (the dialog's Test connection);
        ``on_result(probe)`` or ``on_error(exception)`` follow on the GUI thread."""
        self.controller.submit(lambda m: m.test_host(host), on_result, on_error)

    def saving(self) -> bool:
        """True while a host is being written to the history (off the GUI thread)."""
        return self._writes > 0

    def _write(self, what: str, work: Any, select: str | None, message: str | Callable[[Any], str]) -> None:
        """Run ``work()`` (history writes) on the pane's write thread, then reread the hosts there too;
        the table, the selection and ``message`` follow on the GUI thread, an error is shown instead."""
        from gpuplanner.launch.hosts import list_hosts

        db_path = self.services.db_path

        def job() -> tuple[Any, list[Any]]:
            result = work()
            return result, list_hosts(db_path)

        self._writes += 1
        self._write_ids += 1
        self._pending_writes[self._write_ids] = (select, message)
        self._say(f"Saving {what}…")
        self._pool.start(BackgroundJob(job, self._signals, what, self._write_ids, describe=_describe_write_error))

    @Slot(str, int, object)
    def _on_write_done(self, what: str, write_id: int, payload: Any) -> None:
        self._writes -= 1
        select, message = self._pending_writes.pop(write_id, (None, ""))
        result, hosts = payload
        self.model.set_hosts(hosts)
        row = self.model.row_of(select or self.selected_name() or "")
        if row >= 0:
            self.table.selectRow(row)
        self._update_buttons()
        self._say(message(result) if callable(message) else message)
        self.hostsSaved.emit(what)

    @Slot(str, int, str)
    def _on_write_failed(self, what: str, write_id: int, error: str) -> None:
        self._writes -= 1
        self._pending_writes.pop(write_id, None)
        self._say(f"Could not save {what}: {error}", error=True)
        self.hostsSaveFailed.emit(what, error)

    @Slot()
    def _on_add_clicked(self) -> None:
        from gpuplanner.launch.hosts import HostError, add_host, validate_host

        dialog = self.make_host_dialog()
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        host = dialog.result_host()
        try:
            validate_host(host)  # a field error is known before anything is written
        except HostError as exc:
            self._say(f"Could not add the host: {exc}", error=True)
            return
        db_path = self.services.db_path
        self._write(
            f"host {host.name}",
            lambda: add_host(db_path, host),
            host.name,
            f"Added {host.name}. Probe it to see its GPUs.",
        )

    @Slot()
    def _on_edit_clicked(self, *args: Any) -> None:
        from gpuplanner.launch.hosts import HostError, update_host, validate_host

        name = self.selected_name()
        if name is None:
            return
        dialog = self.make_host_dialog(self.model.host(self.model.row_of(name)))
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        host = dialog.result_host()
        try:
            validate_host(host)
        except HostError as exc:
            self._say(f"Could not save the host: {exc}", error=True)
            return
        db_path = self.services.db_path
        self._write(f"host {host.name}", lambda: update_host(db_path, host), host.name, f"Saved {host.name}.")

    @Slot()
    def _on_remove_clicked(self) -> None:
        from gpuplanner.launch.hosts import remove_host

        name = self.selected_name()
        if name is None or name == "local":
            return
        db_path = self.services.db_path
        self._write(f"the removal of {name}", lambda: remove_host(db_path, name), None, f"Removed {name}.")

    @Slot()
    def _on_import_clicked(self) -> None:
        from gpuplanner.launch.hosts import HostError, add_host, ssh_config_hosts

        known = {self.model.host(r).name for r in range(self.model.rowCount())}
        try:
            hosts = ssh_config_hosts()
        except HostError as exc:
            self._say(str(exc), error=True)
            return
        db_path = self.services.db_path

        def work() -> list[str]:
            added = []
            for host in hosts:
                if host.name in known:
                    continue
                try:
                    add_host(db_path, host)
                    added.append(host.name)
                except HostError:
                    continue
            return added

        def message(added: list[str]) -> str:
            if not added:
                return "No new hosts in ~/.ssh/config."
            return f"Imported {len(added)} host(s) from ~/.ssh/config: {', '.join(added)}"

        self._write("imported hosts", work, None, message)

    # -- probing --------------------------------------------------------------------------------
    @property
    def controller(self) -> RunController:
        if self._controller is None:
            self._controller = RunController(self._make_manager, self, passphrase=self.passphrase)
        return self._controller

    def _make_manager(self) -> Any:
        from gpuplanner.launch.manager import RunManager

        return RunManager(self.services.db_path, passphrase_callback=self.passphrase)

    def probing(self) -> bool:
        return self._in_flight > 0

    @Slot()
    def _on_probe_clicked(self) -> None:
        name = self.selected_name()
        if name:
            self.probe(name)

    @Slot()
    def _on_probe_all_clicked(self) -> None:
        for row in range(self.model.rowCount()):
            self.probe(self.model.host(row).name)

    def probe(self, name: str) -> None:
        """Probe one host on the worker thread; the table shows "probing…" until it answers."""
        self._in_flight += 1
        self.model.set_probing(name, True)
        self.busy.setVisible(True)
        self._say(f"Probing {name}…")
        self.controller.submit(
            lambda m: m.probe(name),
            lambda result: self._on_probed(name, result),
            lambda exc: self._on_probe_failed(name, exc),
        )

    def _done(self, name: str) -> None:
        self._in_flight -= 1
        self.model.set_probing(name, False)
        self.busy.setVisible(self._in_flight > 0)

    def _on_probed(self, name: str, result: HostProbe) -> None:
        self._done(name)
        self.reload()
        row = self.model.row_of(name)
        if row >= 0:  # the manager stores a good probe with the host; show a failed one too
            host = self.model.host(row)
            self.model.update_host(replace(host, probe=result))
        if result.get("ok"):
            self._say(f"{name}: {len(result.get('gpus') or [])} GPU(s), torch {result.get('torch')}.")
        else:
            self._say(
                f"{name} answered, but: {result.get('error') or 'missing ' + ', '.join(result.get('missing') or [])}",
                error=True,
            )

    def _on_probe_failed(self, name: str, exc: Exception) -> None:
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        self._done(name)
        if isinstance(exc, UnknownHostKey):
            if ask_trust(exc, self):
                self.probe(name)
            else:
                self.model.set_error(name, "host key not trusted")
                self._say(f"Did not connect to {name}: its key was not trusted.")
            return
        if isinstance(exc, ChangedHostKey):
            self.model.set_error(name, "REFUSED: host key changed")
            self._say(f"Refused to connect to {name}: its host key changed.", error=True)
            show_changed_key(exc, self)
            return
        self.model.set_error(name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        self._say(f"Probing {name} failed: {exc}", error=True)

    @Slot()
    def shutdown(self) -> None:
        """Let a host write in progress finish (bounded by the history's busy timeout), end the probe
        worker thread (waits for a probe in progress); a shared controller is the window's to shut down."""
        self._pool.waitForDone(BUSY_TIMEOUT_MS + 5000)
        if not self._owns_controller:
            return
        self.passphrase.close()  # a probe waiting for a passphrase gets None and ends
        if self._controller is not None:
            self._controller.shutdown(stop_runs=False)
            self._controller = None
