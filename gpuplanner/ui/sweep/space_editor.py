"""The Sweep pane's search-space editor: one row per parameter (name, kind, low and high or choices, log
scale), written as the TOML file `gpuplanner sweep run --space` reads (:mod:`gpuplanner.sweep.space`
checks it, so the editor and a hand-written file obey the same rules).

:func:`space_toml` (rows to TOML text) is Qt-free; :class:`SpaceEditor` is the table with Add and Remove.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuplanner.sweep.space import TYPES, Space, SpaceError, parse_space

WHERE = "Search space"  # how errors name the editor (a file's errors name the file)
HEADERS = ("Parameter", "Kind", "Low", "High", "Choices", "Log scale")
NAME, KIND, LOW, HIGH, CHOICES, LOG = range(len(HEADERS))
# a first row a new user can start from: the learning rate on a log scale
STARTER = ("lr", "float", "1e-4", "1e-2", "", True)


@dataclass(frozen=True)
class SpaceRow:
    """One parameter as typed: ``low``/``high`` for int and float, ``choices`` (comma-separated) for categorical."""

    name: str
    kind: str
    low: str = ""
    high: str = ""
    choices: str = ""
    log: bool = False


def _number(row: SpaceRow, key: str, text: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise SpaceError(WHERE, f"params.{row.name}: {key} must be a number, got {text!r}") from None
    if row.kind == "int" and math.isfinite(value) and value == int(value):
        return int(value)
    return value


def _choice(text: str) -> str | int | float | bool:
    """A typed choice as TOML would hold it: true/false, a whole number, a number, else a string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)  # a TOML basic string


def space_toml(rows: list[SpaceRow]) -> str:
    """The TOML text of ``rows``, checked by the same rules as a file (:func:`parse_space`); a problem
    raises :class:`SpaceError` naming the editor and the parameter."""
    if not rows:
        raise SpaceError(WHERE, "add at least one parameter (or give a .toml file)")
    names = [row.name for row in rows]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SpaceError(WHERE, f"params.{twice[0]}: the parameter is in two rows; keep one")
    lines: list[str] = []
    for row in rows:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", row.name):
            raise SpaceError(
                WHERE, f"parameter name must be a trainer flag's name like lr or warmup_steps, got {row.name!r}"
            )
        lines += [f"[params.{row.name}]", f"type = {json.dumps(row.kind)}"]
        if row.kind == "categorical":
            choices = [_choice(c.strip()) for c in row.choices.split(",") if c.strip()]
            lines.append("choices = [" + ", ".join(_toml_value(c) for c in choices) + "]")
        else:
            lines.append(f"low = {_toml_value(_number(row, 'low', row.low.strip()))}")
            lines.append(f"high = {_toml_value(_number(row, 'high', row.high.strip()))}")
            if row.log:
                lines.append("log = true")
        lines.append("")
    text = "\n".join(lines)
    parse_space(tomllib.loads(text), where=WHERE)  # the file's own rules: one truth for editor and CLI
    return text


def write_space(rows: list[SpaceRow], path: Path) -> Space:
    """Write the rows' TOML to ``path`` (its folder made) and return the space as the CLI reads it."""
    text = space_toml(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return parse_space(tomllib.loads(text), where=str(path))


class SpaceEditor(QWidget):
    """Rows of parameters with Add and Remove; :meth:`rows` reads them back."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        for column in (KIND, LOG):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setToolTip(
            "One row per trainer flag to search. int and float: low and high (log scale samples evenly in "
            "orders of magnitude); categorical: choices separated by commas, e.g. 4, 8, 16"
        )
        self.add_button = QPushButton("Add parameter")
        self.add_button.clicked.connect(lambda: self.add_row())
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._on_remove)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        layout.addLayout(buttons)
        self.add_row(*STARTER)
        self.table.setMinimumHeight(self.table.horizontalHeader().sizeHint().height() + 3 * 26)

    def add_row(
        self, name: str = "", kind: str = "float", low: str = "", high: str = "", choices: str = "", log: bool = False
    ) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        for column, text in ((NAME, name), (LOW, low), (HIGH, high), (CHOICES, choices)):
            self.table.setItem(row, column, QTableWidgetItem(text))
        combo = QComboBox()
        combo.addItems(list(TYPES))
        combo.setCurrentText(kind)
        combo.currentTextChanged.connect(lambda _text, c=combo: self._fit_row(c))
        self.table.setCellWidget(row, KIND, combo)
        box = QCheckBox()
        box.setChecked(log)
        self.table.setCellWidget(row, LOG, box)
        self._fit_row(combo)

    def _fit_row(self, combo: QComboBox) -> None:
        """A categorical row takes choices, the others low, high and log: the cells that do not apply are off."""
        for row in range(self.table.rowCount()):
            if self.table.cellWidget(row, KIND) is combo:
                categorical = combo.currentText() == "categorical"
                for column in (LOW, HIGH, CHOICES):
                    item = self.table.item(row, column)
                    if item is not None:
                        on = (column == CHOICES) == categorical
                        flags = item.flags() | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsEditable
                        item.setFlags(flags if on else flags & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsEditable)
                log = self.table.cellWidget(row, LOG)
                if log is not None:
                    log.setEnabled(not categorical)

    @Slot()
    def _on_remove(self) -> None:
        rows = sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True)
        for row in rows or [self.table.rowCount() - 1]:
            if row >= 0:
                self.table.removeRow(row)

    def _text(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text().strip() if item is not None else ""

    def rows(self) -> list[SpaceRow]:
        """The filled-in rows (a row without a name is skipped)."""
        out = []
        for row in range(self.table.rowCount()):
            combo, log = self.table.cellWidget(row, KIND), self.table.cellWidget(row, LOG)
            name = self._text(row, NAME)
            if not name:
                continue
            kind = combo.currentText() if isinstance(combo, QComboBox) else "float"
            checked = isinstance(log, QCheckBox) and log.isChecked() and kind != "categorical"
            out.append(
                SpaceRow(name, kind, self._text(row, LOW), self._text(row, HIGH), self._text(row, CHOICES), checked)
            )
        return out
