"""Trust on first use: show an SSH host's key type and SHA256 fingerprint and ask; refuse a changed key.

Both dialogs take the launcher's exception (``UnknownHostKey`` / ``ChangedHostKey``) or anything with the
same attributes (``hostname``, ``port``, ``key_type``, ``fingerprint_sha256``; ``trust()`` for the first).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QMessageBox, QVBoxLayout, QWidget


def _address(exc: Any) -> str:
    port = getattr(exc, "port", 22) or 22
    host = getattr(exc, "hostname", "?")
    return host if port == 22 else f"[{host}]:{port}"


def _mono(text: str) -> QLabel:
    label = QLabel(text)
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setWeight(QFont.Weight.Bold)
    label.setFont(font)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class TrustHostKeyDialog(QDialog):
    """ "The authenticity of host ... can't be established": Trust and connect, or Cancel.

    Accepting calls ``exc.trust()`` (the key goes into known_hosts); rejecting leaves everything as is.
    """

    def __init__(self, exc: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.exc = exc
        self.trusted = False
        self.setWindowTitle("Unknown host key")
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"<b>GPU Planner has not connected to {_address(exc)} before.</b><br>"
            "Compare the fingerprint below with the one the host's administrator or cloud console "
            "shows (<code>ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub</code> on the host). "
            "Trust it only if they match."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        form.addRow("Host:", _mono(_address(exc)))
        self.key_type_label = _mono(str(getattr(exc, "key_type", "?")))
        self.fingerprint_label = _mono(str(getattr(exc, "fingerprint_sha256", "?")))
        form.addRow("Key type:", self.key_type_label)
        form.addRow("Fingerprint:", self.fingerprint_label)
        layout.addLayout(form)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.trust_button = self.buttons.addButton("Trust and connect", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setDefault(True)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

    def accept(self) -> None:
        self.exc.trust()
        self.trusted = True
        super().accept()


def ask_trust(exc: Any, parent: QWidget | None = None) -> bool:
    """Ask the user about an unknown host key; returns whether it was trusted (and recorded)."""
    dialog = TrustHostKeyDialog(exc, parent)
    dialog.exec()
    return dialog.trusted


def changed_key_box(exc: Any, parent: QWidget | None = None) -> QMessageBox:
    """The refusal for a host whose key changed: no button connects anyway."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Critical)
    box.setWindowTitle("Host key changed: connection refused")
    name = _address(exc)
    box.setText(f"<b>The host key of {name} has changed. GPU Planner refuses to connect.</b>")
    box.setInformativeText(
        f"The host now offers a {getattr(exc, 'key_type', '?')} key with fingerprint "
        f"<code>{getattr(exc, 'fingerprint_sha256', '?')}</code>, which differs from the key recorded "
        "in known_hosts. Someone may be intercepting the connection, or the host was reinstalled. "
        f"If the change is expected, remove the old entry (<code>ssh-keygen -R '{name}'</code>) and try again."
    )
    if getattr(exc, "revoked", False):
        box.setWindowTitle("Host key revoked: connection refused")
        box.setText(f"<b>The key {name} offers is marked revoked. GPU Planner refuses to connect.</b>")
        box.setInformativeText(
            f"The host offers a {getattr(exc, 'key_type', '?')} key with fingerprint "
            f"<code>{getattr(exc, 'fingerprint_sha256', '?')}</code>, which a <code>@revoked</code> line in "
            "known_hosts lists: its owner withdrew it, so it may be stolen. Ask the host's administrator for "
            "the host's new key."
        )
    box.setStandardButtons(QMessageBox.StandardButton.Close)
    return box


def show_changed_key(exc: Any, parent: QWidget | None = None) -> None:
    changed_key_box(exc, parent).exec()
