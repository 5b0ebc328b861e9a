"""The first-start welcome: what the window's places do, a demo run to try, where the data lives.

Shown (not modal) when the window opens until the user ticks "Don't show this again"; Help > Welcome
shows it at any time.

Signals:
    demoRequested(): "Try a demo run" was clicked (the dialog closes).
    guideRequested(): "Open the user guide" was clicked.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QCheckBox, QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from gpuplanner.ui.runs.run_demo import DEMO_PROMISE, DEMO_STEPS

PLACES_TEXT = (
    ("Plan", "fill in the model, data and hardware; see memory, time and cost of every GPU option, ranked"),
    ("Hosts", "this machine and your SSH or Slurm hosts, probed for GPUs, with a price per GPU-hour"),
    ("Runs", "launch the bundled trainer and watch it live: utilisation, memory, loss, spend, preemptions"),
    ("History", "every past run: planned against actual, cost per sample, compare and export"),
    ("Sweep", "a hyperparameter search under a budget: its estimate, its trials as runs, the best so far"),
)


class WelcomeDialog(QDialog):
    demoRequested = Signal()
    guideRequested = Signal()

    def __init__(self, db_path: Path, config_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Welcome to GPU Planner")
        layout = QVBoxLayout(self)
        places = "".join(f"<li><b>{name}</b>: {what}</li>" for name, what in PLACES_TEXT)
        text = QLabel(
            "<p>GPU Planner answers what a training run will need and cost before you pay for it, runs it, and "
            "keeps what it really took.</p>"
            f"<ul>{places}</ul>"
            f"<p>Try a demo run: a tiny model trains {DEMO_STEPS:,} steps on this machine (a simulated GPU if "
            f"there is none), {DEMO_PROMISE} (the Runs pane shows its ETA): long enough to try Stop and Simulate preemption.</p>"
            f"<p>Your runs and plans live in <code>{db_path}</code>; prices you add and your own machines in "
            f"<code>{config_dir}</code>.</p>"
        )
        text.setWordWrap(True)
        text.setTextFormat(Qt.TextFormat.RichText)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(text)
        self.dont_show = QCheckBox("Don't show this again (Help > Welcome shows it)")
        layout.addWidget(self.dont_show)
        buttons = QHBoxLayout()
        self.demo_button = QPushButton("Try a demo run")
        self.demo_button.clicked.connect(self._on_demo_clicked)
        self.guide_button = QPushButton("Open the user guide")
        self.guide_button.clicked.connect(self.guideRequested)
        self.close_button = QPushButton("Close")
        self.close_button.setDefault(True)
        self.close_button.clicked.connect(self.accept)
        buttons.addWidget(self.demo_button)
        buttons.addWidget(self.guide_button)
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        layout.addLayout(buttons)
        self.resize(560, self.sizeHint().height())

    @Slot()
    def _on_demo_clicked(self) -> None:
        self.accept()
        self.demoRequested.emit()
