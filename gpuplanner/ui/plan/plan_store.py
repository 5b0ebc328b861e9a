"""The Plan pane's saved plans in the run history: save, list and read back, all on one worker thread.

Every call opens its own connection on the store's one-thread pool (a :class:`BackgroundJob`), so the
GUI thread never waits for SQLite (a database another process holds locked makes the answer late, not
the window frozen); jobs run one at a time in the order they were asked for. Answers come back as
signals on the GUI thread; a caller may also hand a ``then`` callback for one answer.

Signals:
    saved(int): a plan was stored, with its id.
    saveFailed(str): storing failed (nothing was changed), with the reason.
    listed(object): the saved plans as ``[(id, name, updated_at)]``.
    opened(int, object): a saved plan's id and its ``inputs``.
    readFailed(str): listing or reading failed, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot

from gpuplanner.history.db import BUSY_TIMEOUT_MS, open_db
from gpuplanner.history.plans import get_plan, list_plans, save_plan
from gpuplanner.ui.background import BackgroundJob, JobSignals

SavedPlan = tuple[int, str, float]  # id, name, updated at (epoch seconds)


def _save(db_path: Path, name: str, document: dict[str, Any]) -> int:
    db = open_db(db_path)
    try:
        return save_plan(db, name, document)
    finally:
        db.close()


def _list(db_path: Path) -> list[SavedPlan]:
    db = open_db(db_path)
    try:
        return [(p.id, p.name, p.updated_at) for p in list_plans(db)]
    finally:
        db.close()


def _read(db_path: Path, plan_id: int) -> tuple[int, dict[str, Any]]:
    db = open_db(db_path)
    try:
        return plan_id, dict(get_plan(db, plan_id).inputs)
    finally:
        db.close()


class PlanStore(QObject):
    saved = Signal(int)
    saveFailed = Signal(str)
    listed = Signal(object)
    opened = Signal(int, object)
    readFailed = Signal(str)

    def __init__(self, db_path: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.db_path = db_path
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_done)
        self._signals.failed.connect(self._on_failed)
        self._then: dict[int, Callable[[Any], None]] = {}
        self._jobs = 0

    def _start(self, kind: str, work: Callable[[], Any], then: Callable[[Any], None] | None) -> None:
        self._jobs += 1
        if then is not None:
            self._then[self._jobs] = then
        self._pool.start(BackgroundJob(work, self._signals, kind, self._jobs, str))

    def save(self, name: str, document: dict[str, Any], then: Callable[[int], None] | None = None) -> None:
        """Store ``document`` as a plan called ``name``; ``saved(id)`` (and ``then(id)``) or ``saveFailed``."""
        db_path = self.db_path
        self._start("save", lambda: _save(db_path, name, document), then)

    def list_saved(self, then: Callable[[list[SavedPlan]], None] | None = None) -> None:
        """The saved plans, newest first: ``listed(plans)`` (and ``then(plans)``) or ``readFailed``."""
        db_path = self.db_path
        self._start("list", lambda: _list(db_path), then)

    def read(self, plan_id: int) -> None:
        """A saved plan's inputs: ``opened(id, inputs)`` or ``readFailed``."""
        db_path = self.db_path
        self._start("read", lambda: _read(db_path, plan_id), None)

    @Slot(str, int, object)
    def _on_done(self, kind: str, job: int, payload: Any) -> None:
        if kind == "save":
            self.saved.emit(int(payload))
        elif kind == "list":
            self.listed.emit(payload)
        else:
            self.opened.emit(*payload)
        then = self._then.pop(job, None)
        if then is not None:
            then(payload)

    @Slot(str, int, str)
    def _on_failed(self, kind: str, job: int, message: str) -> None:
        self._then.pop(job, None)
        (self.saveFailed if kind == "save" else self.readFailed).emit(message)

    def is_busy(self) -> bool:
        return bool(self._pool.activeThreadCount())

    def shutdown(self) -> None:
        """Wait for the jobs asked for (a plan being saved is not lost)."""
        self._pool.waitForDone(BUSY_TIMEOUT_MS + 5000)
