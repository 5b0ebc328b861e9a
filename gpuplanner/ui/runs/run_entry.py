"""What the Runs pane knows about one run it shows (:class:`RunEntry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtWidgets import QListWidgetItem

from gpuplanner.ui.runs.launch_request import LaunchRequest
from gpuplanner.ui.runs.run_telemetry import RunTelemetry


@dataclass
class RunEntry:
    """What the pane knows about one run it shows."""

    run_id: int
    telemetry: RunTelemetry
    name: str
    host: str
    item: QListWidgetItem
    state: str = "starting"
    status: Any = None
    request: LaunchRequest | None = None
    run_dir: str | None = None
    exit_code: int | None = None
    finished_emitted: bool = False
    alerts: list[tuple[str, ...]] = field(default_factory=list)
    alerts_checked: float = 0.0
    failure: dict[str, Any] | None = None  # error and stderr tail of a failed run (history/failures.py)
    time_breakdown: Any = None  # where the billed time went (history/time_breakdown.py), from the history
    failure_requested: bool = False
