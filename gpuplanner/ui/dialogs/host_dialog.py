"""The Add / Edit host dialog: an SSH host or a Slurm login node (and this machine's price), with a
**Test connection** button that connects with the fields as they are, before anything is saved.

The test runs through a ``tester`` the Hosts pane gives (its launcher thread: the dialog never blocks):
an unknown host key opens the same trust-on-first-use dialog as a probe and the test is tried again
once trusted; a changed key is refused; any other failure is said in words (authentication, refused,
unreachable, timeout, no torch on the host)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from gpuplanner.launch.host_reports import HostProbe
from gpuplanner.ui.dialogs.trust_dialog import ask_trust, show_changed_key
from gpuplanner.ui.hosts.hosts_model import gpus_text, machine_text
from gpuplanner.ui.palette import BAD, GOOD

KIND_LABELS = {"ssh": "SSH host", "slurm": "Slurm cluster (login node)"}
# (host, on_result, on_error): probe the host off the GUI thread, then call one of the two on it
Tester = Callable[[Any, Callable[[HostProbe], None], Callable[[Exception], None]], None]


def probe_summary(result: HostProbe) -> tuple[bool, str]:
    """A test's probe in one sentence, and whether the host can run training as it is."""
    if not result.get("ok", True) or result.get("error") or result.get("missing"):
        missing = ", ".join(result.get("missing") or [])
        why = result.get("error") or (f"missing {missing}" if missing else "the probe failed")
        return False, f"Connected, but the host cannot train yet: {why}."
    gpus = result.get("gpus") or []
    parts = [gpus_text(gpus) if gpus else "no GPU (CPU only)"]
    if result.get("driver") or result.get("cuda_runtime"):
        parts.append(f"driver {result.get('driver') or '?'}, CUDA {result.get('cuda_runtime') or '?'}")
    parts.append(f"torch {result.get('torch') or 'not installed'}")
    if result.get("python"):
        parts.append(f"Python {result['python']}")
    machine = machine_text(result)
    if machine != "—":
        parts.append(machine)
    return True, "Connected: " + "; ".join(parts) + "."


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, what caused it, and the socket errors a multi-address connect gathered (paramiko's
    NoValidConnectionsError keeps them in ``errors``)."""
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out:
        out.append(seen)
        errors = getattr(seen, "errors", None)
        if isinstance(errors, dict):
            out += [e for e in errors.values() if isinstance(e, BaseException)]
        seen = seen.__cause__ or seen.__context__
    return out


def failure_text(exc: Exception) -> str:
    """Why a connection failed, in words, then the error as it came."""
    from gpuplanner.launch.ssh_connection import AuthenticationFailed

    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    causes = _causes(exc)
    lowered = " ".join(str(c).lower() for c in causes)
    if any(isinstance(c, AuthenticationFailed) for c in causes) or "authentication failed" in lowered:
        why = "the login was refused (no key or agent identity was accepted)"
    elif any(isinstance(c, ConnectionRefusedError) for c in causes) or "unable to connect to port" in lowered:
        why = "the connection was refused (is sshd running on that port?)"
    elif any(isinstance(c, (socket.timeout, TimeoutError)) for c in causes) or "timed out" in lowered:
        why = "no answer in time (the address, the port or a firewall?)"
    elif any(isinstance(c, socket.gaierror) for c in causes) or "name or service not known" in lowered:
        why = "the hostname does not resolve"
    elif any(isinstance(c, OSError) and c.errno in (101, 113) for c in causes):
        why = "the host is unreachable from here"
    else:
        return text
    return f"{why}: {text}"


class HostDialog(QDialog):
    """Add or edit a host. This machine only has a price and pricing; a Slurm login node also has its
    job settings."""

    def __init__(self, host: Any = None, parent: QWidget | None = None, tester: Tester | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.tester = tester
        self.testing = False
        self.closed = False  # set when the dialog is closed: a test's late answer is then dropped
        self.test_result: HostProbe | None = None
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
        self._after_run_fields(host)
        form.addRow("After each run:", self.after_run_edit)
        form.addRow("", self.idle_row)
        self._form = form
        self.kind_combo.currentIndexChanged.connect(self._show_kind)
        self._show_kind()
        self.error_label = QLabel()
        self.error_label.setStyleSheet("color: #b00020")
        self.error_label.setWordWrap(True)
        form.addRow(self.error_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.test_button = QPushButton("Test connection")
        self.test_button.setToolTip(
            "Connect with these settings (nothing is saved), check the host key, log in and probe the GPUs, "
            "driver, CUDA, torch and the machine"
        )
        self.test_button.clicked.connect(self.test_connection)
        self.test_label = QLabel()
        self.test_label.setWordWrap(True)
        self.test_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.test_label.setVisible(False)
        if tester is not None and not local:
            buttons.addButton(self.test_button, QDialogButtonBox.ButtonRole.ActionRole)
            form.addRow(self.test_label)
            self.setMinimumWidth(self.fontMetrics().horizontalAdvance("x") * 72)  # room for the test's answer
        else:
            self.test_button.setVisible(False)
        form.addRow(buttons)

    def _after_run_fields(self, host: Any) -> None:
        """The after-run command (run on this machine once a run on the host ended, e.g. a cloud CLI that
        stops the instance) and stop-when-idle (run it only once the host's GPUs stayed idle)."""
        idle = (host.after_run_idle if host is not None else None) or {}
        self.after_run_edit = QLineEdit((host.after_run_command or "") if host is not None else "")
        self.after_run_edit.setPlaceholderText("optional, runs here: e.g. aws ec2 stop-instances --instance-ids i-0abc")
        self.after_run_edit.setToolTip(
            "A command run on this machine once a run on the host has ended, e.g. the cloud CLI call that stops "
            "the instance; the history bills the host until it has finished (the CLI's hosts set-after-run)"
        )
        self.idle_check = QCheckBox("only once its GPUs stayed under")
        self.idle_check.setChecked(bool(idle))
        self.idle_pct_spin = QDoubleSpinBox()
        self.idle_pct_spin.setRange(1.0, 100.0)
        self.idle_pct_spin.setDecimals(0)
        self.idle_pct_spin.setSuffix(" %")
        self.idle_pct_spin.setValue(float(idle.get("util_pct", 10.0)))
        self.idle_minutes_spin = QDoubleSpinBox()
        self.idle_minutes_spin.setRange(0.5, 24 * 60.0)
        self.idle_minutes_spin.setDecimals(1)
        self.idle_minutes_spin.setSuffix(" min")
        self.idle_minutes_spin.setValue(float(idle.get("minutes", 10.0)))
        self.idle_row = QWidget()
        row = QHBoxLayout(self.idle_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.idle_check)
        row.addWidget(self.idle_pct_spin)
        row.addWidget(QLabel("for"))
        row.addWidget(self.idle_minutes_spin)
        row.addStretch(1)
        self.idle_row.setToolTip(
            "Stop-when-idle: wait until every GPU of the host stayed under this utilisation for this long after "
            "the run ended, then run the command (SSH hosts and this machine)"
        )
        self.after_run_edit.textChanged.connect(self._update_idle)
        self.idle_check.toggled.connect(self._update_idle)
        self._update_idle()

    @Slot()
    def _update_idle(self, *args: Any) -> None:
        has_command = bool(self.after_run_edit.text().strip())
        self.idle_check.setEnabled(has_command)
        for widget in (self.idle_pct_spin, self.idle_minutes_spin):
            widget.setEnabled(has_command and self.idle_check.isChecked())

    def after_run(self) -> tuple[str | None, dict[str, float] | None]:
        command = self.after_run_edit.text().strip() or None
        if command is None or not self.idle_check.isChecked():
            return command, None
        return command, {"util_pct": self.idle_pct_spin.value(), "minutes": self.idle_minutes_spin.value()}

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
        self._form.setRowVisible(self.idle_row, not slurm)  # Slurm frees a job's nodes itself
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
        command, idle = self.after_run()
        if self.kind == "slurm":
            idle = None
        if self.host is not None and self.host.kind == "local":
            return replace(
                self.host,
                price_usd_per_gpu_hour=price,
                pricing=self.pricing_combo.currentText(),
                after_run_command=command,
                after_run_idle=idle,
            )
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
            after_run_command=command,
            after_run_idle=idle,
        )

    def problem(self) -> str | None:
        """What is wrong with the fields (the message the dialog shows), or None."""
        if not self.name_edit.text().strip():
            return "Give the host a name."
        if self.kind != "local" and not self.hostname_edit.text().strip():
            return "Give the hostname or address."
        if self.kind == "slurm":
            from gpuplanner.launch.slurm_settings import SlurmSettingsError, parse_settings

            try:
                parse_settings(self.slurm_settings())
            except SlurmSettingsError as exc:
                return f"Slurm setting {exc}"
        from gpuplanner.launch.hosts import HostError, check_after_run, check_after_run_idle

        try:
            check_after_run(self.after_run()[0])
            check_after_run_idle(self.result_host())
        except HostError as exc:
            return f"After each run: {exc}"
        return None

    def done(self, result: int) -> None:
        self.closed = True
        super().done(result)

    def accept(self) -> None:
        problem = self.problem()
        if problem:
            self.error_label.setText(problem)
            return
        super().accept()

    # -- Test connection ------------------------------------------------------------------------
    @Slot()
    def test_connection(self) -> None:
        """Probe the host as the fields describe it, on the window's launcher thread (never blocking the
        dialog); the answer, or why it failed, shows under the fields."""
        if self.tester is None or self.testing:
            return
        problem = self.problem()
        self.error_label.setText(problem or "")
        if problem:
            return
        host = self.result_host()
        self.testing = True
        self.test_result = None
        self.test_button.setEnabled(False)
        self.test_button.setText("Testing…")
        self._show_test(f"Connecting to {host.hostname}…", None)
        self.tester(host, self._on_tested, self._on_test_failed)

    def _finish_test(self) -> bool:
        """Whether the dialog is still there to show a test's answer (it may have been closed meanwhile)."""
        if self.closed:
            return False
        self.testing = False
        self.test_button.setEnabled(True)
        self.test_button.setText("Test connection")
        return True

    def _on_tested(self, result: HostProbe) -> None:
        if not self._finish_test():
            return
        self.test_result = result
        ok, text = probe_summary(result)
        self._show_test(text, ok)

    def _on_test_failed(self, exc: Exception) -> None:
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        if not self._finish_test():
            return
        if isinstance(exc, UnknownHostKey):
            if ask_trust(exc, self):
                self.test_connection()  # trusted now: connect again
            else:
                self._show_test("Not connected: the host's key was not trusted.", False)
            return
        if isinstance(exc, ChangedHostKey):
            self._show_test("Refused: the host's key changed since it was trusted (see the warning).", False)
            show_changed_key(exc, self)
            return
        self._show_test(f"Could not connect: {failure_text(exc)}", False)

    def _show_test(self, text: str, ok: bool | None) -> None:
        colour = None if ok is None else (GOOD if ok else BAD)
        self.test_label.setStyleSheet(f"color: {colour}" if colour else "")
        self.test_label.setText(text)
        self.test_label.setVisible(True)
        self.adjustSize()  # the answer wraps over a few lines: the dialog grows to show all of it
