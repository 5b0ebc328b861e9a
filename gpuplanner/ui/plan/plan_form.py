"""The planner form: every input of :mod:`gpuplanner.ui.plan.plan_inputs`, grouped, with units and tooltips.

Signals:
    edited(): the user changed a field (the pane debounces and recalculates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.app.plan_fields import FIELD_BY_FLAG
from gpuplanner.ui.palette import BAD
from gpuplanner.ui.plan.plan_form_fields import (
    ALWAYS_KEPT,
    EXCLUSIVE,
    FIELDS,
    GROUPS,
    KEEP_CHOICES,
    Field,
    default_values,
    widget_key,
)

_ERROR_STYLE = f"color: {BAD};"
# Fields under which the pane writes what answered (memory model, measured speeds).
NOTE_KEYS = ("memory", "calibration")
_INVALID_STYLE = f"border: 2px solid {BAD}; border-radius: 3px;"


_KEEP_TIPS = {
    "micro-batch": "Ticked: the micro-batch and accumulation steps stay as given. ",
    "checkpointing": "Ticked: gradient checkpointing stays as given. ",
    "sharding": "Ticked: the sharding stays as given. ",
    "method": "Ticked: a LoRA stays LoRA. Unticked: a LoRA that nothing else fits may become QLoRA. ",
}


def shown_field(spec: Field) -> Field:
    """The field as the form shows it: a planner input takes its label (with its unit), tooltip, group and
    choices from the shared table (:mod:`gpuplanner.app.plan_fields`, the CLI's help and groups too); the
    form's own fields (model source, data unit, calibration, keep) and its defaults and placeholders are
    :mod:`gpuplanner.ui.plan.plan_inputs`'s."""
    row = FIELD_BY_FLAG.get(spec.key)
    if row is None or not row.shown_in_form:
        return spec
    return replace(
        spec,
        label=row.form_label,
        tooltip=row.help,
        group=row.form_group,
        choices=row.choices or spec.choices,  # presets, GPUs and off/on are the form's own lists
    )


SHOWN_FIELDS: tuple[Field, ...] = tuple(shown_field(spec) for spec in FIELDS)


class KeepList(QWidget):
    """The "Keep as given" check boxes: one per setting the comparison may fit per GPU. Its text is the
    ticked names, comma-separated (as the form's other fields, texts in and out).

    Signals:
        toggled(bool): a box was ticked or cleared.
    """

    toggled = Signal(bool)

    def __init__(self, tooltip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(1)
        self.boxes: dict[str, QCheckBox] = {}
        for name, _field, text in KEEP_CHOICES:
            box = QCheckBox(text)
            box.setObjectName(f"keep-{name}")
            if name in ALWAYS_KEPT:
                box.setChecked(True)
                box.setEnabled(False)
                box.setToolTip("Always kept: the bundled trainer has no 8-bit optimizer states to launch.")
            else:
                box.setToolTip(_KEEP_TIPS.get(name, "") + tooltip)
            box.toggled.connect(self.toggled)
            column.addWidget(box)
            self.boxes[name] = box

    def text(self) -> str:
        return ",".join(name for name, box in self.boxes.items() if box.isChecked() and name not in ALWAYS_KEPT)

    def setText(self, text: str) -> None:  # noqa: N802 (as QLineEdit's)
        names = {name.strip() for name in text.split(",")}
        for name, box in self.boxes.items():
            box.setChecked(name in names or name in ALWAYS_KEPT)


# The sections top to bottom (and in tab order): the deadline and budget right after the model, what most
# plans set; the spot model's many inputs folded until opened.
FORM_ORDER = (GROUPS[0], GROUPS[5], GROUPS[2], GROUPS[3], GROUPS[1], GROUPS[4])
COLLAPSED = (GROUPS[4],)
assert sorted(FORM_ORDER) == sorted(GROUPS), "every group of the form has its place"


class FormSection(QWidget):
    """One group of the form that folds away: its title is a button that shows or hides its fields."""

    def __init__(self, title: str, *, collapsed: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = title
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        self.toggle = QToolButton()
        self.toggle.setObjectName(f"section-{title}")
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setCheckable(True)
        font = self.toggle.font()
        font.setBold(True)
        self.toggle.setFont(font)
        self.toggle.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.toggle.toggled.connect(self._on_toggled)
        outer.addWidget(self.toggle)
        self.content = QFrame()
        self.content.setFrameShape(QFrame.Shape.StyledPanel)
        self.form = QFormLayout(self.content)
        outer.addWidget(self.content)
        self.toggle.setChecked(not collapsed)
        self._on_toggled(not collapsed)

    def count_fields(self) -> None:
        """Word the button for the fields now in the section."""
        self._on_toggled(self.toggle.isChecked())

    @property
    def collapsed(self) -> bool:
        return not self.toggle.isChecked()

    def set_collapsed(self, collapsed: bool) -> None:
        self.toggle.setChecked(not collapsed)

    @Slot(bool)
    def _on_toggled(self, shown: bool) -> None:
        self.content.setVisible(shown)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        count = sum(1 for label in self.content.findChildren(QLabel) if label.buddy() is not None)
        self.toggle.setText(self.name if shown else f"{self.name} ({count} settings)")
        self.toggle.setToolTip(f"{'Hide' if shown else 'Show'} these settings")


class GpuMemoryDelegate(QStyledItemDelegate):
    """The GPU list's rows as "H100 SXM  ·  79.1 GiB": each GPU with its memory (the field keeps the name)."""

    def __init__(self, memory: Mapping[str, float], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.memory = dict(memory)

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:  # noqa: N802
        super().initStyleOption(option, index)
        gib = self.memory.get(option.text)
        if gib is not None:
            option.text = f"{option.text}  ·  {gib:,.1f} GiB"


def show_gpu_memory(combo: QComboBox, memory: Mapping[str, float]) -> None:
    """List each GPU with its memory (the popup; the field and its value stay the name)."""
    combo.setItemDelegate(GpuMemoryDelegate(memory, combo))
    for i in range(combo.count()):
        gib = memory.get(combo.itemText(i))
        if gib is not None:
            combo.setItemData(i, f"{gib:,.1f} GiB of memory", Qt.ItemDataRole.ToolTipRole)


class PlanForm(QWidget):
    """Grouped inputs of one plan. Texts in, texts out: :meth:`values` / :meth:`set_values`."""

    edited = Signal()

    def __init__(
        self, gpu_names: list[str], gpu_memory: Mapping[str, float] | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.editors: dict[str, QLineEdit | QComboBox | KeepList] = {}
        self.error_labels: dict[str, QLabel] = {}
        self.note_labels: dict[str, QLabel] = {}
        self._layouts: dict[str, QFormLayout] = {}
        self._sections: dict[str, FormSection] = {}
        self._loading = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        outer.setSpacing(6)
        self.sections: dict[str, FormSection] = {}
        for group in FORM_ORDER:
            box = FormSection(group, collapsed=group in COLLAPSED)
            self.sections[group] = box
            form = box.form
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            # a long label puts its field on the next line rather than push the form wider than its column
            form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
            form.setVerticalSpacing(3)
            form.setContentsMargins(8, 6, 8, 6)
            for spec in (f for f in SHOWN_FIELDS if f.group == group):
                editor = self._make_editor(spec.key, spec.kind, spec.choices or tuple(gpu_names), spec.placeholder)
                if spec.key == "gpu" and gpu_memory and isinstance(editor, QComboBox):
                    show_gpu_memory(editor, gpu_memory)
                editor.setToolTip(spec.tooltip)
                editor.setAccessibleName(spec.label)
                label = QLabel(spec.label)
                label.setToolTip(spec.tooltip)
                label.setBuddy(editor)
                field_widget: QWidget = editor
                if spec.key == "model-config":
                    field_widget = QWidget()
                    row = QHBoxLayout(field_widget)
                    row.setContentsMargins(0, 0, 0, 0)
                    row.addWidget(editor, 1)
                    self.browse_button = QPushButton("Browse…")
                    self.browse_button.setToolTip("Choose a Hugging Face config.json")
                    self.browse_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
                    self.browse_button.clicked.connect(self._on_browse_clicked)
                    row.addWidget(self.browse_button)
                form.addRow(label, field_widget)
                error = QLabel()
                error.setWordWrap(True)
                error.setStyleSheet(_ERROR_STYLE)
                error.setObjectName(f"error-{spec.key}")
                error.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
                form.addRow("", error)
                form.setRowVisible(error, False)
                if spec.key in NOTE_KEYS:
                    note = QLabel()
                    note.setWordWrap(True)
                    note.setObjectName(f"note-{spec.key}")
                    font = note.font()
                    font.setItalic(True)
                    note.setFont(font)
                    form.addRow("", note)
                    form.setRowVisible(note, False)
                    self.note_labels[spec.key] = note
                self.editors[spec.key] = editor
                self.error_labels[spec.key] = error
                self._layouts[spec.key] = form
                self._sections[spec.key] = box
            box.count_fields()
            outer.addWidget(box)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.hint.setObjectName("form-hint")
        outer.addWidget(self.hint)
        outer.addStretch(1)
        self.set_values(default_values())

    # ------------------------------------------------------------------ editors

    def _make_editor(
        self, key: str, kind: str, choices: tuple[str, ...], placeholder: str
    ) -> QLineEdit | QComboBox | KeepList:
        if kind == "keep":
            keep = KeepList(next(f.tooltip for f in SHOWN_FIELDS if f.key == key))
            keep.setObjectName(key)
            keep.toggled.connect(self._on_changed)
            return keep
        if kind == "choice":
            combo = QComboBox()
            combo.addItems(list(choices))
            # as wide as the column allows, not as wide as the longest choice (the popup shows them whole)
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)
            combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            combo.setObjectName(key)
            combo.currentTextChanged.connect(self._on_changed)
            return combo
        line = QLineEdit()
        line.setMinimumWidth(60)
        line.setObjectName(key)
        line.setPlaceholderText(placeholder)
        line.setClearButtonEnabled(False)
        line.textEdited.connect(self._on_changed)
        return line

    def values(self) -> dict[str, str]:
        return {key: (e.currentText() if isinstance(e, QComboBox) else e.text()) for key, e in self.editors.items()}

    def set_values(self, values: Mapping[str, str]) -> None:
        self._loading = True
        try:
            for key, value in values.items():
                editor = self.editors.get(key)
                if isinstance(editor, QComboBox):
                    index = editor.findText(str(value))
                    if index >= 0:
                        editor.setCurrentIndex(index)
                elif editor is not None:
                    editor.setText(str(value))
        finally:
            self._loading = False
        self._update_visibility()
        self.edited.emit()

    def set_value(self, key: str, value: str) -> None:
        """Set one field as if the user typed it (used by the table's "use this option")."""
        self.set_values({key: value})

    def _update_visibility(self) -> None:
        source = self.values()["model-source"]
        for key, wanted in (("model", "preset"), ("model-config", "config.json"), ("params", "parameter count")):
            editor = self.editors[key]
            target = self.browse_button.parentWidget() if key == "model-config" else editor
            if target is not None:
                self._set_row_visible(key, target, source == wanted)
            if source != wanted:
                self._show_error(key, "")
        values = self.values()
        adapters = values["method"] != "full"
        for key in ("lora-rank", "lora-targets"):
            self.editors[key].setEnabled(adapters)
        # Of mutually exclusive fields, the one filled in greys out the others (a field that holds text
        # stays editable, so a conflict loaded from elsewhere can be cleared).
        for keys in EXCLUSIVE:
            filled = [k for k in keys if values[k].strip()]
            for key in keys:
                self.editors[key].setEnabled(not filled or key in filled)

    # ------------------------------------------------------------------ notes

    def set_note(self, key: str, text: str) -> None:
        """Show (or with "" hide) a note under a field of :data:`NOTE_KEYS`: what answered for it."""
        label = self.note_labels[key]
        if label.text() != text:
            label.setText(text)
            label.setToolTip(text)
            self._fit_note(label)
        self._set_row_visible(key, label, bool(text))

    @staticmethod
    def _fit_note(label: QLabel, field_width: int = 0) -> None:
        """Reserve the height the wrapped note needs at its width (the field column's, ``field_width``, when the
        label has none yet): the form layout sizes a word-wrapped field row from its first text, so a longer
        note was cut at the top and the bottom."""
        width = label.width() if label.width() > 50 else field_width if field_width > 50 else label.sizeHint().width()
        label.setMinimumHeight(label.heightForWidth(width) if label.text() else 0)

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        for label in (*self.note_labels.values(), *self.error_labels.values()):
            if label.text():
                self._fit_note(label)

    def note_text(self, key: str) -> str:
        label = self.note_labels[key]
        return label.text() if self._layouts[key].isRowVisible(label) else ""

    # ------------------------------------------------------------------ errors

    def clear_errors(self) -> None:
        for key in self.editors:
            self._show_error(key, "")

    def show_error(self, engine_field: str, message: str) -> str:
        """Mark the field an engine error names; returns the form key it was shown at."""
        key = widget_key(engine_field)
        self.clear_errors()
        self._show_error(key, message)
        return key

    def _set_row_visible(self, key: str, widget: QWidget, visible: bool) -> None:
        # Only on a change: each call re-lays out (and repaints) the whole form.
        form = self._layouts[key]
        if form.isRowVisible(widget) != visible:
            form.setRowVisible(widget, visible)

    def _show_error(self, key: str, message: str) -> None:
        label, editor = self.error_labels[key], self.editors[key]
        if label.text() == message and bool(editor.property("invalid")) == bool(message):
            return  # nothing changes: no restyle, no relayout
        label.setText(message)
        self._fit_note(label, editor.width())  # a long message wraps: its row as tall as its lines, never half lines
        if message:
            self._sections[key].set_collapsed(False)  # an error is never hidden in a folded section
        self._set_row_visible(key, label, bool(message))
        editor.setStyleSheet(_INVALID_STYLE if message else "")
        editor.setProperty("invalid", bool(message))

    def error_text(self, key: str) -> str:
        label = self.error_labels[key]
        return label.text() if self._layouts[key].isRowVisible(label) else ""

    # ------------------------------------------------------------------ slots

    @Slot(str)
    @Slot(bool)
    def _on_changed(self, _text: object = "") -> None:
        if self._loading:
            return
        self._update_visibility()
        self.edited.emit()

    @Slot()
    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model config.json", "", "Model config (*.json);;All files (*)")
        if path:
            editor = self.editors["model-config"]
            assert isinstance(editor, QLineEdit)
            editor.setText(path)
            self._on_changed()

    def focus_field(self, key: str) -> None:
        self.editors[key].setFocus(Qt.FocusReason.OtherFocusReason)
