"""The Plan pane's details of one option (the widgets; the sentences come from :mod:`plan_details`).

From the top, in :attr:`PlanDetailsView.header` (never scrolled away): the headline (the recommendation, or the
selected option's verdict), the input error (red, hidden while the inputs are valid), the memory bar, and small
stacked bars of the step's and the cost's parts with one sentence of verdict (:mod:`parts_bar`); then,
scrolled: what the form's own option needs said when the details show another
(red: it does not fit), which option the details describe, its summary, what to rent, where its speed came
from, and its advice and warnings.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gpuplanner.ui.human import human_money
from gpuplanner.ui.palette import BAD, WARN
from gpuplanner.ui.plan.memory_bar import MemoryBar, memory_view
from gpuplanner.ui.plan.parts_bar import PartsView
from gpuplanner.ui.plan.plan_details import Details
from gpuplanner.ui.plan.plan_parts import cost_parts, step_parts, step_seconds, verdict


def _label(name: str = "", *, selectable: bool = True) -> QLabel:
    label = QLabel()
    if name:
        label.setObjectName(name)
    label.setWordWrap(True)  # one long line would widen the details past their pane
    if selectable:
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class PlanDetailsView(QWidget):
    """The labels and the memory bar of the details; :meth:`show_details` fills them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("plan-details")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 4, 0)
        layout.setSpacing(4)
        self.recommendation_label = _label()
        font = self.recommendation_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.recommendation_label.setFont(font)
        self.status_label = _label(selectable=False)
        self.status_label.setStyleSheet(f"color: {BAD};")
        self.status_label.hide()
        self.form_note_label = _label("plan-form-note")
        self.form_note_label.setStyleSheet(f"color: {BAD};")
        self.form_note_label.setToolTip("The option the form asks for, when the details describe another")
        self.form_note_label.hide()
        self.focus_label = _label("plan-focus", selectable=False)
        self.focus_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.summary_label = _label()
        self.rent_label = _label("plan-rent")
        self.rent_label.setToolTip("What to rent for the option the details describe, and what the price rests on")
        self.sources_label = _label("plan-sources")
        self.sources_label.setToolTip(
            "Where the speed of the option the details describe came from (your figure, runs measured in the "
            "history, or its GPU's step model) and which memory model answered"
        )
        self.memory_bar = MemoryBar()
        self.advice_label = _label(selectable=False)
        self.advice_label.setStyleSheet(f"color: {WARN};")
        # the headline, an input error and the memory bar stay in view above the scrolled sentences
        self.header = QWidget()
        self.header.setObjectName("plan-details-header")
        top = QVBoxLayout(self.header)
        top.setContentsMargins(0, 0, 4, 0)
        top.setSpacing(2)
        self.parts = PartsView(step_seconds, human_money)
        for widget in (self.recommendation_label, self.status_label, self.memory_bar, self.parts):
            top.addWidget(widget)
        for widget in (
            self.form_note_label,
            self.focus_label,
            self.summary_label,
            self.rent_label,
            self.sources_label,
            self.advice_label,
        ):
            layout.addWidget(widget)
        layout.addStretch(1)

    def show_details(self, details: Details) -> None:
        """Every line for the option ``details`` describe, and its memory bar."""
        plan = details.focus.plan
        self.recommendation_label.setText(details.headline)
        self.form_note_label.setText(details.form_note)
        self.form_note_label.setVisible(bool(details.form_note))
        self.focus_label.setText(details.focus_line)
        self.summary_label.setText(details.summary)
        self.rent_label.setText(details.rent)
        self.sources_label.setText(details.sources)
        gpu_name = plan.gpu.name if plan.gpu else "your GPU"
        self.memory_bar.set_view(memory_view(plan.memory, plan.capacity_gib, plan.request.headroom, gpu_name))
        steps, costs = step_parts(plan), cost_parts(details.focus)
        self.parts.show_parts(steps, costs, verdict(details.focus, steps, costs))
        self.advice_label.setText("\n".join(details.advice))
        self.advice_label.setVisible(bool(details.advice))

    def show_input_error(self, text: str) -> None:
        self.status_label.setText(text)
        self.status_label.show()

    def clear_input_error(self) -> None:
        self.status_label.hide()
