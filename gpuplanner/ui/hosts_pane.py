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

from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.history.db import BUSY_TIMEOUT_MS
from gpuplanner.ui.background import BackgroundJob, JobSignals
from gpuplanner.ui.hosts_model import COLUMNS, HostsTableModel
from gpuplanner.ui.passphrase_dialog import PassphrasePrompter
from gpuplanner.ui.run_controller import RunController
from gpuplanner.ui.trust_dialog import ask_trust, show_changed_key

KIND_LABELS = {"ssh": "SSH host", "slurm": "Slurm cluster (login node)"}


class HostDialog(QDialog):
    """Add or edit a host. This machine only has a price and pricing; a Slurm login node also has its
    job settings."""

    def __init__(self, host: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        local = host is not None and host.kind == "local"
        self.setWindowTitle("Edit host" if host else "Add SSH host")
        form = QFormLayout(self)
        self.name_edit = QLineEdit(host.name if host else "")
        self.name_edit.setEnabled(host is None)
        self.hostname_edit = QLineEdit((host.hostname or "") if host else "")
        self.port_spin = QSpinBox()
        self.port_spin.setRange(1, 65535)
        self.port_spin.setValue(host.port if host else 22)
        self.user_edit = QLineEdit((host.user or "") if host else "")
        self.identity_edit = QLineEdit((host.identity_file or "") if host else "")
        self.identity_edit.setPlaceholderText("~/.ssh/id_ed25519 (optional)")
        self.identity_edit.setToolTip("Optional: without it, the SSH agent and the default keys are tried")
        self.jump_edit = QLineEdit((host.proxy_jump or "") if host else "")
        self.jump_edit.setPlaceholderText("bastion host (optional)")
        self.python_edit = QLineEdit((host.python or "") if host else "")
        self.python_edit.setPlaceholderText("python3 (or the interpreter with torch, e.g. ~/venv/bin/python)")
        self.python_edit.setToolTip("The Python the trainer runs with on this host (the CLI's --python)")
        self.price_spin = QDoubleSpinBox()
        self.price_spin.setRange(0.0, 10_000.0)
        self.price_spin.setDecimals(3)
        self.price_spin.setPrefix("$ ")
        self.price_spin.setSpecialValueText("not set")
        self.price_spin.setValue((host.price_usd_per_gpu_hour or 0.0) if host else 0.0)
        self.price_spin.setToolTip("What one GPU of this host costs per hour; runs' spend uses it")
        self.pricing_combo = QComboBox()
        self.pricing_combo.addItems(["on-demand", "spot"])
        self.pricing_combo.setCurrentText(host.pricing if host else "on-demand")
        self.kind_combo = QComboBox()
        for kind, label in KIND_LABELS.items():
            self.kind_combo.addItem(label, kind)
        self.kind_combo.setCurrentIndex(1 if host is not None and host.kind == "slurm" else 0)
        self._slurm_fields(host)
        form.addRow("Name:", self.name_edit)
        if not local:
            form.addRow("Kind:", self.kind_combo)
            form.addRow("Hostname:", self.hostname_edit)
            form.addRow("Port:", self.port_spin)
            form.addRow("User:", self.user_edit)
            form.addRow("Identity file:", self.identity_edit)
            form.addRow("Proxy jump:", self.jump_edit)
            form.addRow("Python:", self.python_edit)
            for label, widget in self.slurm_rows:
                form.addRow(label, widget)
        form.addRow("Price per GPU-hour:", self.price_spin)
        form.addRow("Pricing:", self.pricing_combo)
        self._form = form
        self.kind_combo.currentIndexChanged.connect(self._show_kind)
        self._show_kind()
        self.error_label = QLabel()
        self.error_label.setStyleSheet("color: #b00020")
        form.addRow(self.error_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _slurm_fields(self, host: Any) -> None:
        settings = dict((host.slurm or {}) if host is not None else {})
        self.partition_edit = QLineEdit(settings.get("partition") or "")
        self.account_edit = QLineEdit(settings.get("account") or "")
        self.qos_edit = QLineEdit(settings.get("qos") or "")
        self.gpus_spin = QSpinBox()
        self.gpus_spin.setRange(0, 64)
        self.gpus_spin.setValue(int(settings.get("gpus_per_node") or 0))
        self.gpus_spin.setSpecialValueText("none (CPU job)")
        self.nodes_spin = QSpinBox()
        self.nodes_spin.setRange(1, 4096)
        self.nodes_spin.setValue(int(settings.get("nodes") or 1))
        self.time_edit = QLineEdit(settings.get("time_limit") or "")
        self.time_edit.setPlaceholderText("e.g. 12:00:00 or 2-00:00:00 (empty: the partition's default)")
        self.image_edit = QLineEdit(settings.get("container_image") or "")
        self.image_edit.setPlaceholderText("optional: srun --container-image (pyxis)")
        self.requeue_check = QCheckBox("Preemptible partition: Slurm may requeue the job (it resumes)")
        self.requeue_check.setChecked(bool(settings.get("requeue")))
        self.root_edit = QLineEdit((host.remote_root or "") if host is not None else "")
        self.root_edit.setPlaceholderText("~/.gpuplanner (must be on the shared filesystem)")
        self.slurm_rows = [
            ("Partition:", self.partition_edit),
            ("Account:", self.account_edit),
            ("QoS:", self.qos_edit),
            ("GPUs per node:", self.gpus_spin),
            ("Nodes:", self.nodes_spin),
            ("Time limit:", self.time_edit),
            ("Container image:", self.image_edit),
            ("Requeue:", self.requeue_check),
            ("Run folder:", self.root_edit),
        ]

    @property
    def kind(self) -> str:
        if self.host is not None and self.host.kind == "local":
            return "local"
        return str(self.kind_combo.currentData())

    @Slot()
    def _show_kind(self, *args: Any) -> None:
        slurm = self.kind == "slurm"
        for _, widget in self.slurm_rows:
            if self._form.indexOf(widget) >= 0:
                self._form.setRowVisible(widget, slurm)
        if self.host is None:
            self.setWindowTitle("Add Slurm cluster" if slurm else "Add SSH host")

    def slurm_settings(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "partition": self.partition_edit.text().strip() or None,
            "account": self.account_edit.text().strip() or None,
            "qos": self.qos_edit.text().strip() or None,
            "gpus_per_node": self.gpus_spin.value(),
            "nodes": self.nodes_spin.value(),
            "time_limit": self.time_edit.text().strip() or None,
            "container_image": self.image_edit.text().strip() or None,
            "requeue": self.requeue_check.isChecked(),
        }
        kept = dict((self.host.slurm or {}) if self.host is not None else {})  # settings the dialog does not show
        return {**kept, **values}

    def result_host(self) -> Any:
        from gpuplanner.launch.hosts import Host

        price = self.price_spin.value() or None
        if self.host is not None and self.host.kind == "local":
            return replace(self.host, price_usd_per_gpu_hour=price, pricing=self.pricing_combo.currentText())
        base = self.host or Host(name=self.name_edit.text().strip(), kind="ssh")
        slurm = self.kind == "slurm"
        return replace(
            base,
            kind=self.kind,
            slurm=self.slurm_settings() if slurm else None,
            remote_root=(self.root_edit.text().strip() or None) if slurm else base.remote_root,
            hostname=self.hostname_edit.text().strip() or None,
            port=self.port_spin.value(),
            user=self.user_edit.text().strip() or None,
            identity_file=self.identity_edit.text().strip() or None,
            proxy_jump=self.jump_edit.text().strip() or None,
            python=self.python_edit.text().strip() or None,
            price_usd_per_gpu_hour=price,
            pricing=self.pricing_combo.currentText(),
        )

    def accept(self) -> None:
        if not self.name_edit.text().strip():
            self.error_label.setText("Give the host a name.")
            return
        if self.kind != "local" and not self.hostname_edit.text().strip():
            self.error_label.setText("Give the hostname or address.")
            return
        if self.kind == "slurm":
            from gpuplanner.launch.slurm_settings import SlurmSettingsError, parse_settings

            try:
                parse_settings(self.slurm_settings())
            except SlurmSettingsError as exc:
                self.error_label.setText(f"Slurm setting {exc}")
                return
        super().accept()


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
        return HostDialog(host, self)

    def saving(self) -> bool:
        """True while a host is being written to the history (off the GUI thread)."""
        return self._writes > 0

    def _write(self, what: str, work: Any, select: str | None, message: str) -> None:
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

    def _on_probed(self, name: str, result: dict[str, Any]) -> None:
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
