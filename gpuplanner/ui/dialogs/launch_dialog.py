"""The launch dialog: host, what runs (the bundled trainer with its settings, prefilled from a plan, or a
command of the user's own with its working directory and environment), budget and spot behaviour.

:class:`LaunchDialog` builds one group box per section (``_build_*``), collects the values and hands back
a :class:`~gpuplanner.ui.runs.launch_request.LaunchRequest` (the values as trainer flags: ``launch_request``;
what it remembers between launches: ``launch_memory``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.history.tags import TagError
from gpuplanner.launch.budget import budget_problem
from gpuplanner.launch.preflight import hf_id_for
from gpuplanner.ui.human import NO_PRICE, human_money
from gpuplanner.ui.palette import WARN
from gpuplanner.ui.runs.launch_memory import merged_settings, remember_values, remembered_values
from gpuplanner.ui.runs.launch_request import LaunchRequest, parse_env, parse_tags_text, trainer_args

PRECISIONS = ("auto", "bf16-mixed", "fp16-mixed", "fp32", "bf16")
METHODS = ("full", "lora", "qlora")
DEVICES = ("auto", "cpu", "cuda")


def _spin(minimum: int, maximum: int, value: int, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setRange(minimum, maximum)
    box.setValue(value)
    box.setToolTip(tip)
    return box


def _money(value: float, tip: str, special: str | None = None) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(0.0, 1e7)
    box.setDecimals(2)
    box.setPrefix("$ ")
    box.setValue(value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    return box


class LaunchDialog(QDialog):
    """Form for one launch. ``hosts`` are ``(name, label, price per GPU-hour or None)``; ``settings`` the
    Plan pane's dict. Ends with ``Accepted`` (launch) or ``Rejected``. "Measure speed" (a short
    ``trainer bench`` of these settings on the host) calls ``on_measure(request, dialog)`` and stays open, so the
    user can launch after seeing the speed (:meth:`show_measurement` puts the answer in the dialog);
    without ``on_measure`` it ends the dialog with ``MEASURE``."""

    MEASURE = 2

    def __init__(
        self,
        hosts: list[tuple[str, str, float | None]],
        settings: dict[str, Any] | None = None,
        parent: QWidget | None = None,
        on_measure: Callable[[LaunchRequest, LaunchDialog], None] | None = None,
        defaults: dict[str, Any] | None = None,
        remember: bool = True,
        on_check: Callable[[dict[str, Any], LaunchDialog], None] | None = None,
    ) -> None:
        super().__init__(parent)
        self._on_measure = on_measure
        self._on_check = on_check
        self._checked_values: dict[str, Any] | None = None  # values whose check answered (launch anyway)
        self._remember = remember
        self.settings = dict(settings or {})
        if self.settings.get("model"):  # a plan's preset short name: the trainer loads by Hugging Face id
            self.settings["model"] = hf_id_for(str(self.settings["model"]))
        settings = merged_settings(remembered_values() if remember else {}, self.settings, defaults or {})
        self.setWindowTitle("Launch a training run")
        self._fitted = False
        outer = QVBoxLayout(self)

        self._build_sections(hosts, settings, outer)
        self._build_footer(outer)
        self._connect_and_sync()

    def _build_sections(
        self, hosts: list[tuple[str, str, float | None]], settings: dict[str, Any], outer: QVBoxLayout
    ) -> None:
        """The form's group boxes in two columns: what runs and where, the command or the model and data;
        the training settings, the budget and spot behaviour."""
        where = self._build_where(hosts, settings)
        what_box = self._build_what(settings)
        self.command_box = self._build_command(settings)
        self.model_box = self._build_model(settings)
        self.train_box = self._build_training(settings)
        money_box = self._build_money(hosts, settings)
        self._build_columns(((what_box, where, self.command_box, self.model_box), (self.train_box, money_box)))
        outer.addWidget(self.scroll_area, 1)

    def _build_where(self, hosts: list[tuple[str, str, float | None]], settings: dict[str, Any]) -> QGroupBox:
        """Run name, host (with a plan's note on its GPUs), GPUs and device."""
        where = QGroupBox("Where")
        form = QFormLayout(where)
        self.name_edit = QLineEdit(str(settings.get("name") or ""))
        self.name_edit.setPlaceholderText("optional: shown in the history")
        self.host_combo = QComboBox()
        self._prices = {name: price for name, _, price in hosts}
        for name, label, _ in hosts:
            self.host_combo.addItem(label, name)
        if settings.get("host"):
            index = self.host_combo.findData(settings["host"])
            if index >= 0:
                self.host_combo.setCurrentIndex(index)
        self.host_combo.setToolTip("The machine the trainer runs on: this machine or an SSH host from the Hosts pane")
        self.host_note_label = QLabel(str(self.settings.get("host_note") or ""))  # a plan's GPUs no host has
        self.host_note_label.setWordWrap(True)
        self.host_note_label.setStyleSheet(f"color: {WARN};")
        self.host_note_label.setVisible(bool(self.settings.get("host_note")))
        self.gpus_spin = _spin(1, 64, int(settings.get("gpus") or 1), "GPUs on the host (more than one runs DDP)")
        self.device_combo = QComboBox()
        self.device_combo.addItems(DEVICES)
        self.device_combo.setCurrentText(str(settings.get("device") or "auto"))
        self.device_combo.setToolTip("auto: the GPU when there is one, else the CPU")
        form.addRow("Run name:", self.name_edit)
        form.addRow("Host:", self.host_combo)
        form.addRow(self.host_note_label)
        form.addRow("GPUs:", self.gpus_spin)
        form.addRow("Device:", self.device_combo)
        return where

    def _build_what(self, settings: dict[str, Any]) -> QGroupBox:
        """The bundled trainer or a command of the user's own."""
        what_box = QGroupBox("What runs")
        what = QVBoxLayout(what_box)
        self.trainer_radio = QRadioButton("The bundled trainer (settings below)")
        self.command_radio = QRadioButton("A command of my own (a training script, torchrun, accelerate…)")
        self.command_radio.setToolTip(
            "Runs watched like the bundled trainer: GPU samples, spend, budget; step records from "
            "gpuplanner_telemetry or its HF/Lightning callbacks (see 'Your own training script' in the guide)"
        )
        (self.command_radio if settings.get("mode") == "command" else self.trainer_radio).setChecked(True)
        what.addWidget(self.trainer_radio)
        what.addWidget(self.command_radio)
        return what_box

    def _build_command(self, settings: dict[str, Any]) -> QGroupBox:
        """A command of the user's own: its command line, working directory and environment."""
        box = QGroupBox("Command")
        form = QFormLayout(box)
        self.command_edit = QLineEdit(str(settings.get("command") or ""))
        self.command_edit.setPlaceholderText("e.g. torchrun --nproc-per-node 8 train.py --config big.yaml")
        self.command_edit.setToolTip("The command line as a shell would split it (quotes work; no pipes or &&)")
        self.workdir_edit = QLineEdit(str(settings.get("workdir") or ""))
        self.workdir_edit.setPlaceholderText("folder on the host (default: the run directory)")
        self.env_edit = QPlainTextEdit(str(settings.get("env") or ""))
        self.env_edit.setPlaceholderText("NAME=VALUE, one a line, e.g.\nHF_HOME=/data/hf\nWANDB_MODE=offline")
        self.env_edit.setToolTip("Environment variables for the command (GPU Planner adds its own GPUPLANNER_*)")
        self.env_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 5)
        for edit in (self.command_edit, self.workdir_edit):
            edit.setMinimumWidth(self.fontMetrics().horizontalAdvance("x") * 44)
        form.addRow("Command:", self.command_edit)
        form.addRow("Working directory:", self.workdir_edit)
        form.addRow("Environment:", self.env_edit)
        return box

    def _build_model(self, settings: dict[str, Any]) -> QGroupBox:
        """The bundled trainer's model, data, method and LoRA rank."""
        model_box = QGroupBox("Model and data")
        form = QFormLayout(model_box)
        self.model_edit = QLineEdit(str(settings.get("model") or ""))
        self.model_edit.setPlaceholderText("Hugging Face id or local directory")
        self.model_config_edit = QLineEdit(str(settings.get("model_config") or ""))
        self.model_config_edit.setPlaceholderText("or a config.json for a randomly initialised model")
        self.data_edit = QLineEdit("; ".join(str(p) for p in settings.get("data") or []))
        self.data_edit.setPlaceholderText(".txt/.jsonl files or folders, separated by ';'")
        self.data_edit.setToolTip("Training text: .txt (blank-line separated documents) or .jsonl files or folders")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_data)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data_edit)
        data_row.addWidget(browse)
        self.method_combo = QComboBox()
        self.method_combo.addItems(METHODS)
        self.method_combo.setCurrentText(str(settings.get("method") or "full"))
        self.method_combo.setToolTip(
            "full: every weight trains; LoRA: only low-rank adapters train "
            "(QLoRA runs as LoRA here: the trainer loads weights in 16 bits)"
        )
        self.lora_spin = _spin(0, 1024, int(settings.get("lora_rank") or 16), "LoRA adapter rank")
        wide = self.fontMetrics().horizontalAdvance("x") * 44  # room for a path or a Hugging Face id
        for edit in (self.model_edit, self.model_config_edit):
            edit.setMinimumWidth(wide)
        form.addRow("Model:", self.model_edit)
        form.addRow("Model config:", self.model_config_edit)
        form.addRow("Data:", data_row)
        form.addRow("Method:", self.method_combo)
        form.addRow("LoRA rank:", self.lora_spin)
        return model_box

    def _build_training(self, settings: dict[str, Any]) -> QGroupBox:
        """The bundled trainer's settings (a plan's fitted ones noted), checkpoints and extra flags."""
        train_box = QGroupBox("Training")
        form = QFormLayout(train_box)
        if self.settings.get("fitted"):
            # the plan's settings do not fit its GPU: compare chose these, and the fields below hold them
            fitted = QLabel("Fitted to this GPU by the comparison: " + ", ".join(self.settings["fitted"]))
            fitted.setWordWrap(True)
            fitted.setObjectName("fittedNote")
            form.addRow(fitted)
        self.precision_combo = QComboBox()
        self.precision_combo.addItems(PRECISIONS)
        self.precision_combo.setCurrentText(str(settings.get("precision") or "auto"))
        self.micro_spin = _spin(1, 4096, int(settings.get("micro_batch") or 8), "sequences per micro-batch per GPU")
        self.accum_spin = _spin(1, 4096, int(settings.get("grad_accum") or 1), "micro-batches per optimizer step")
        self.seq_spin = _spin(8, 1 << 20, int(settings.get("seq_len") or 512), "packed sequence length (tokens)")
        self.gc_combo = QComboBox()
        self.gc_combo.addItems(["none", "full", "every-other", "selective"])
        self.gc_combo.setCurrentText(str(settings.get("grad_checkpointing") or "none"))
        self.gc_combo.setToolTip("Recompute activations in the backward pass to save memory (about a third slower)")
        self.epochs_spin = _spin(1, 10_000, int(settings.get("epochs") or 1), "passes over the data")
        self.steps_spin = _spin(
            0, 100_000_000, int(settings.get("max_steps") or 0), "optimizer steps; 0: run the epochs"
        )
        self.steps_spin.setSpecialValueText("use epochs")
        self.ckpt_spin = QDoubleSpinBox()
        self.ckpt_spin.setRange(0.0, 1440.0)
        every_minutes = settings.get("checkpoint_every_minutes")
        self.ckpt_spin.setValue(float(every_minutes) if every_minutes is not None else 10.0)
        self.ckpt_spin.setSuffix(" min")
        self.ckpt_spin.setToolTip("time-based checkpoints: the safety net on spot hosts")
        form.addRow("Precision:", self.precision_combo)
        form.addRow("Micro-batch:", self.micro_spin)
        form.addRow("Accumulation steps:", self.accum_spin)
        form.addRow("Sequence length (tokens):", self.seq_spin)
        form.addRow("Gradient checkpointing:", self.gc_combo)
        form.addRow("Epochs:", self.epochs_spin)
        form.addRow("Max steps:", self.steps_spin)
        form.addRow("Checkpoint every:", self.ckpt_spin)
        self.extra_edit = QLineEdit(str(settings.get("extra") or ""))
        self.extra_edit.setPlaceholderText("more trainer flags, e.g. --lr 1e-4 --eval-every-steps 100")
        form.addRow("Extra flags:", self.extra_edit)
        return train_box

    def _build_money(self, hosts: list[tuple[str, str, float | None]], settings: dict[str, Any]) -> QGroupBox:
        """The host's price, the budget, tags, resuming after preemptions and the fallback hosts."""
        money_box = QGroupBox("Budget and spot")
        form = QFormLayout(money_box)
        self.price_label = QLabel()
        self.price_label.setWordWrap(True)
        self.price_label.setToolTip("Spend is the host's price x GPUs x time; set the price in the Hosts pane")
        self.budget_spin = _money(
            float(settings.get("budget_usd") or 0.0),
            "the trainer checkpoints and stops (budget_stop) at this spend",
            "no budget",
        )
        self.auto_resume_check = QCheckBox("Resume automatically after a preemption")
        spot = self.settings.get("spot")  # a plan's spot pricing: resume after preemptions
        self.auto_resume_check.setChecked(bool(spot if spot is not None else settings.get("auto_resume")))
        self.max_restarts_spin = _spin(0, 100, int(settings.get("max_restarts") or 3), "restarts before giving up")
        self.fallback_list = QListWidget()
        self.fallback_list.setMaximumHeight(80)
        self.fallback_list.setToolTip("When the host is lost, resume on the first of these that is reachable")
        for name, label, _ in hosts:
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(
                Qt.CheckState.Checked if name in (settings.get("fallback_hosts") or []) else Qt.CheckState.Unchecked
            )
            self.fallback_list.addItem(item)
        self.tags_edit = QLineEdit(str(settings.get("tags") or ""))
        self.tags_edit.setPlaceholderText("project=search owner=ana")
        self.tags_edit.setToolTip(
            "Optional key=value tags, separated by spaces, for summing spend by project, owner, ... in History"
        )
        form.addRow("Price per GPU-hour:", self.price_label)
        form.addRow("Budget:", self.budget_spin)
        form.addRow("Tags:", self.tags_edit)
        form.addRow("", self.auto_resume_check)
        form.addRow("Max restarts:", self.max_restarts_spin)
        form.addRow("Fallback hosts:", self.fallback_list)
        return money_box

    def _build_columns(self, layout: tuple[tuple[QGroupBox, ...], ...]) -> None:
        """The boxes in columns in a scroll area: the buttons stay on screen whatever the screen's size."""
        content = QWidget()
        columns = QHBoxLayout(content)
        columns.setContentsMargins(0, 0, 0, 0)
        for boxes in layout:
            column = QVBoxLayout()
            for box in boxes:
                column.addWidget(box)
            column.addStretch(1)
            columns.addLayout(column, 1)
        self.scroll_area = QScrollArea()  # not ``scroll``: that is QWidget.scroll(dx, dy)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(content)
        self.content = content

    def _build_footer(self, outer: QVBoxLayout) -> None:
        """The error line, the answer of Measure speed, and the buttons."""
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b00020")
        self.error_label.setVisible(False)
        outer.addWidget(self.error_label)
        self.measure_label = QLabel()  # the answer of "Measure speed", while the dialog stays open
        self.measure_label.setWordWrap(True)
        self.measure_label.setVisible(False)
        outer.addWidget(self.measure_label)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.launch_button = self.buttons.addButton("Launch", QDialogButtonBox.ButtonRole.AcceptRole)
        self.launch_button.setDefault(True)
        self.measure_button = self.buttons.addButton("Measure speed", QDialogButtonBox.ButtonRole.ActionRole)
        self.measure_button.setToolTip(
            "Run a short benchmark of these settings on the host (trainer bench: "
            "a few dozen steps, no run is started) and record the measured speed "
            "for the Plan pane"
        )
        self.measure_button.clicked.connect(self.measure)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        outer.addWidget(self.buttons)

    def _connect_and_sync(self) -> None:
        """Follow the method, host and mode choices (and show the current ones)."""
        self.method_combo.currentTextChanged.connect(self._on_method_changed)
        self._on_method_changed(self.method_combo.currentText())
        self.host_combo.currentIndexChanged.connect(self._on_host_changed)
        self._on_host_changed()
        self.command_radio.toggled.connect(self._on_mode_changed)
        self._on_mode_changed()
        for edit in self.findChildren(QLineEdit):  # a long remembered value opens at its start, not its end
            edit.setCursorPosition(0)

    @property
    def command_mode(self) -> bool:
        return self.command_radio.isChecked()

    def _on_mode_changed(self, _checked: bool = False) -> None:
        """A command needs no trainer settings (and cannot be benchmarked): only the fields that apply show."""
        command = self.command_mode
        self.command_box.setVisible(command)
        for widget in (self.model_box, self.train_box, self.device_combo):
            widget.setVisible(not command)
        holder = self.device_combo.parentWidget()
        form = holder.layout() if holder is not None else None
        device_label = form.labelForField(self.device_combo) if isinstance(form, QFormLayout) else None
        if device_label is not None:
            device_label.setVisible(not command)
        self.measure_button.setVisible(not command)
        self.setWindowTitle("Launch a command" if command else "Launch a training run")
        if self._fitted:
            self.fit_to_screen()

    def _on_host_changed(self, _index: int = 0) -> None:
        price = self._prices.get(self.host_combo.currentData())
        text = (
            f"{human_money(price)} (the host's price)" if price is not None else f"{NO_PRICE}: none set for this host"
        )
        planned = self.settings.get("price_per_gpu_hour")
        if planned:
            text += f"; the plan assumed {human_money(float(planned))}"
        self.price_label.setText(text)

    def _on_method_changed(self, method: str) -> None:
        self.lora_spin.setEnabled(method in ("lora", "qlora"))

    def _browse_data(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Training data", "", "Text (*.txt *.jsonl);;All files (*)")
        if path:
            current = [p for p in self.data_edit.text().split(";") if p.strip()]
            self.data_edit.setText("; ".join([*current, path]))

    def values(self) -> dict[str, Any]:
        """The form as a settings dict (the Plan pane's keys plus the dialog's own)."""
        return {
            "mode": "command" if self.command_mode else "trainer",
            "command": self.command_edit.text().strip(),
            "workdir": self.workdir_edit.text().strip() or None,
            "env": self.env_edit.toPlainText().strip(),
            "name": self.name_edit.text().strip() or None,
            "host": self.host_combo.currentData(),
            "gpus": self.gpus_spin.value(),
            "device": self.device_combo.currentText(),
            "model": self.model_edit.text().strip() or None,
            "model_config": self.model_config_edit.text().strip() or None,
            "data": [p.strip() for p in self.data_edit.text().split(";") if p.strip()],
            "method": self.method_combo.currentText(),
            "lora_rank": self.lora_spin.value(),
            "precision": self.precision_combo.currentText(),
            "micro_batch": self.micro_spin.value(),
            "grad_accum": self.accum_spin.value(),
            "seq_len": self.seq_spin.value(),
            "grad_checkpointing": self.gc_combo.currentText(),
            "epochs": self.epochs_spin.value(),
            "max_steps": self.steps_spin.value(),
            "checkpoint_every_minutes": self.ckpt_spin.value(),
            "extra": self.extra_edit.text().strip(),
            "price_per_gpu_hour": self._prices.get(self.host_combo.currentData()),
            "budget_usd": self.budget_spin.value() or None,
            "tags": self.tags_edit.text().strip(),
            "auto_resume": self.auto_resume_check.isChecked(),
            "max_restarts": self.max_restarts_spin.value(),
            "fallback_hosts": [
                self.fallback_list.item(i).data(Qt.ItemDataRole.UserRole)
                for i in range(self.fallback_list.count())
                if self.fallback_list.item(i).checkState() == Qt.CheckState.Checked
            ],
        }

    def validate(self) -> str | None:
        """A message for the first problem in the form, or ``None``."""
        v = self.values()
        if v["host"] is None:
            return "Host: choose one (add SSH hosts in the Hosts pane)."
        if v["mode"] == "command":
            try:
                words = shlex.split(v["command"])
            except ValueError as exc:
                return f"Command: {exc}"
            if not words:
                return "Command: what to run, e.g. python train.py (or choose the bundled trainer)."
            try:
                parse_env(v["env"])
            except ValueError as exc:
                return f"Environment: {exc}"
            return self._common_problem(v)
        if not v["model"] and not v["model_config"]:
            return "Model: needs a Hugging Face id or a model folder, or fill in Model config (a config.json)."
        if not v["data"]:
            return "Data: needs the training data (.txt or .jsonl files or folders)."
        try:
            shlex.split(v["extra"])
        except ValueError as exc:
            return f"Extra flags: {exc}"
        return self._common_problem(v)

    def _common_problem(self, v: dict[str, Any]) -> str | None:
        """What applies to a command and to the bundled trainer alike: the tags and the budget."""
        try:
            parse_tags_text(v["tags"])
        except TagError as exc:
            return f"Tags: {exc}"
        if budget_problem(v["budget_usd"], v["price_per_gpu_hour"]):  # the one rule the CLI and RunManager apply
            return (
                f"Budget: {self.host_combo.currentText()} has no price per GPU-hour, so the spend could never reach "
                "the budget; set the host's price in the Hosts pane, or clear the budget."
            )
        return None

    def accept(self) -> None:
        problem = self.validate()
        if problem:
            self._show_error(problem)
            return
        if self._remember:
            remember_values(self.values())
        values = self.values()
        # The pre-launch check reads the trainer's settings (model, data); a command is the user's own.
        if self._on_check is not None and values != self._checked_values and not self.command_mode:
            self.launch_button.setEnabled(False)
            self._show_error(f"Checking the settings on {self.host_combo.currentText()}…", error=False)
            self._on_check(values, self)
            return
        super().accept()

    def _show_error(self, text: str, error: bool = True) -> None:
        self.error_label.setStyleSheet("color: #b00020" if error else "")
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    def check_finished(self, problems: list[str], note: str | None = None) -> None:
        """The pre-launch check's answer: launch when it found nothing, else list the problems (pressing
        Launch again with the same values launches anyway: a check can be wrong, say about a folder)."""
        self.launch_button.setEnabled(True)
        self._checked_values = self.values()
        if not problems and note is None:
            self._show_error("", error=False)
            super().accept()
            return
        lines = list(problems) + ([note] if note else [])
        self._show_error("\n".join(lines) + "\nFix this, or press Launch again to launch anyway.")

    # -- size ------------------------------------------------------------------------------------
    def preferred_size(self) -> QSize:
        """The size that shows every field without scrolling (the two columns and the buttons)."""
        outer, inner = self.layout(), self.content.layout()
        if outer is None or inner is None:  # not built yet
            return self.sizeHint()
        margins = outer.contentsMargins()
        spacing = max(0, outer.spacing())
        inner.activate()  # fields shown or hidden since (a command or the trainer) count now
        content = self.content.sizeHint()
        width = content.width() + margins.left() + margins.right() + 4
        height = content.height() + margins.top() + margins.bottom() + 4
        for widget in (self.error_label, self.measure_label, self.buttons):
            if not widget.isHidden():
                width = max(width, widget.sizeHint().width() + margins.left() + margins.right())
                height += widget.sizeHint().height() + spacing
        return QSize(width, height)

    def fit_to_screen(self) -> None:
        """Open at the preferred size, or the screen's available area (less a margin) when it is smaller:
        the fields scroll then, the buttons stay visible."""
        parent = self.parentWidget()
        screen = self.screen() if parent is None else parent.screen()
        wanted = self.preferred_size()
        if screen is None:
            self.resize(wanted)
            return
        room = screen.availableGeometry()
        size = QSize(min(wanted.width(), int(room.width() * 0.95)), min(wanted.height(), int(room.height() * 0.92)))
        self.resize(size)
        frame = self.frameGeometry()
        frame.moveCenter(room.center())
        self.move(max(room.left(), frame.left()), max(room.top(), frame.top()))

    def showEvent(self, event: QShowEvent) -> None:
        if not self._fitted:
            self._fitted = True
            self.fit_to_screen()
        super().showEvent(event)

    def measure(self) -> None:
        problem = self.validate()
        if problem:
            self._show_error(problem)
            return
        self.error_label.setVisible(False)
        if self._remember:
            remember_values(self.values())
        if self._on_measure is None:
            self.done(self.MEASURE)
            return
        self.measure_button.setEnabled(False)
        self.show_measurement(
            f"Measuring the speed on {self.host_combo.currentData()} (trainer bench, about a minute)…",
            error=False,
            done=False,
        )
        self._on_measure(self.request(), self)

    def show_measurement(self, text: str, error: bool, done: bool = True) -> None:
        """Show a measurement's progress or answer in the dialog; ``done`` enables "Measure speed" again."""
        self.measure_label.setStyleSheet("color: #b00020" if error else "")
        self.measure_label.setText(text)
        self.measure_label.setVisible(True)
        if done:
            self.measure_button.setEnabled(True)

    def request(self) -> LaunchRequest:
        v = self.values()
        command = shlex.split(v["command"]) if v["mode"] == "command" else []
        return LaunchRequest(
            host_name=v["host"],
            trainer_args=[] if command else trainer_args(v),
            command=command,
            workdir=v["workdir"] if command else None,
            env=parse_env(v["env"]) if command else {},
            name=v["name"],
            plan_id=self.settings.get("plan_id"),
            gpus=v["gpus"],
            auto_resume=v["auto_resume"],
            fallback_hosts=[h for h in v["fallback_hosts"] if h != v["host"]],
            max_restarts=v["max_restarts"],
            budget_usd=v["budget_usd"],
            price_per_gpu_hour=v["price_per_gpu_hour"],
            planned_cost_usd=self.settings.get("planned_cost_usd"),
            tags=parse_tags_text(v["tags"]),
        )
