"""Opening a fresh study file from several places at once (a search and the window looking at it, or two
searches): Optuna's schema set-up runs once, under the storage lock; before, one of them could fail with
``UNIQUE constraint failed: alembic_version.version_num`` (issue 27 item 4, and a flaky Sweep pane test)."""

from __future__ import annotations

import threading
from pathlib import Path

from gpuplanner.sweep.lookback import study_names
from gpuplanner.sweep.study import open_storage, storage_path


def _open_at_once(history: Path, openers: int) -> list[BaseException]:
    start = threading.Barrier(openers)
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            start.wait(timeout=30)
            open_storage(history)
        except BaseException as exc:  # noqa: BLE001 (collected and asserted by the caller)
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_a_fresh_study_file_opened_at_once_from_four_threads(tmp_path: Path) -> None:
    for attempt in range(3):
        history = tmp_path / f"h{attempt}" / "history.sqlite"
        history.parent.mkdir()
        assert _open_at_once(history, 4) == []
        assert storage_path(history).exists() and study_names(history) == []
