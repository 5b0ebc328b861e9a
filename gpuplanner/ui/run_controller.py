"""The Qt adapter over the launcher's :class:`RunManager`.

Blocking manager calls (launch, probe, stop, resume: SSH connects, payload uploads, joins) run one at a
time on a worker thread that this controller owns (a bench, which takes minutes, gets a thread and a
manager of its own); their results come back to the GUI thread as
``callback(result)`` / ``errback(exception)``. The manager's own callbacks arrive on its watcher threads
and are only re-emitted here as queued signals; nothing in this module touches a widget.

Signals:
    recordsArrived(int run_id, object records)  telemetry records (list of dicts), in seq order
    statusChanged(object status)                 a ``RunStatus`` of the launcher
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from gpuplanner.plan.catalog import catalog_gpu

log = logging.getLogger(__name__)


class _Worker(QObject):
    """Runs submitted callables in its thread; reports each outcome with ``finished``."""

    finished = Signal(int, object, object)  # job id, result, exception (or None)

    @Slot(int, object)
    def run_job(self, job_id: int, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except Exception as exc:  # reported to the GUI thread, never raised in the worker
            self.finished.emit(job_id, None, exc)
        else:
            self.finished.emit(job_id, result, None)


class RunController(QObject):
    """See the module docstring. ``manager_factory()`` builds the ``RunManager`` (lazily, on first use)."""

    recordsArrived = Signal(int, object)
    statusChanged = Signal(object)
    _submit = Signal(int, object)
    _detachedFinished = Signal(int, object, object)  # job id, result, exception: from a bench thread

    def __init__(self, manager_factory: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._factory = manager_factory
        self._manager: Any = None
        self._jobs: dict[int, tuple[Callable[[Any], None] | None, Callable[[Exception], None] | None]] = {}
        self._ids = itertools.count(1)
        self._thread = QThread()
        self._thread.setObjectName("run-controller")
        self._worker = _Worker()
        self._worker.moveToThread(self._thread)
        self._submit.connect(self._worker.run_job)
        self._worker.finished.connect(self._on_job_finished)
        self._detachedFinished.connect(self._on_job_finished)  # queued: emitted from other threads
        self._detached: list[Any] = []  # managers of benches in progress
        self._thread.start()
        self._closed = False

    # -- manager --------------------------------------------------------------------------------
    @property
    def manager(self) -> Any:
        if self._manager is None:
            self._manager = self._factory()
        return self._manager

    def on_records(self, run_id: int, records: list[dict[str, Any]]) -> None:
        """The manager's ``on_records`` callback (a watcher thread): re-emit only."""
        self.recordsArrived.emit(run_id, list(records))

    def on_status(self, status: Any) -> None:
        """The manager's ``on_status`` callback (any thread): re-emit only."""
        self.statusChanged.emit(status)

    # -- jobs -----------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def submit(
        self,
        fn: Callable[[Any], Any],
        callback: Callable[[Any], None] | None = None,
        errback: Callable[[Exception], None] | None = None,
    ) -> int:
        """Run ``fn(manager)`` on the worker thread; ``callback``/``errback`` run on the GUI thread."""
        if self._closed:
            raise RuntimeError("the run controller is shut down")
        job_id = next(self._ids)
        self._jobs[job_id] = (callback, errback)
        self._submit.emit(job_id, lambda: fn(self.manager))
        return job_id

    @Slot(int, object, object)
    def _on_job_finished(self, job_id: int, result: Any, exc: Exception | None) -> None:
        callback, errback = self._jobs.pop(job_id, (None, None))
        if exc is not None:
            if errback is not None:
                errback(exc)
            else:
                log.warning("run manager call failed: %s", exc)
        elif callback is not None:
            callback(result)

    def launch(
        self,
        request: Any,
        callback: Callable[[Any], None] | None = None,
        errback: Callable[[Exception], None] | None = None,
    ) -> int:
        def job(manager: Any) -> int:
            return manager.launch(
                request.host_name,
                request.trainer_args,
                name=request.name,
                plan_id=request.plan_id,
                gpus=request.gpus,
                auto_resume=request.auto_resume,
                fallback_hosts=tuple(request.fallback_hosts),
                max_restarts=request.max_restarts,
                budget_usd=request.budget_usd,
                tags=getattr(request, "tags", None) or None,
                on_records=self.on_records,
                on_status=self.on_status,
                command=getattr(request, "command", None) or None,
                workdir=getattr(request, "workdir", None),
                env=dict(getattr(request, "env", None) or {}),
            )

        return self.submit(job, callback, errback)

    def bench(
        self,
        request: Any,
        callback: Callable[[Any], None] | None = None,
        errback: Callable[[Exception], None] | None = None,
    ) -> int:
        """``trainer bench`` of the request's settings on its host (recorded for the planner).

        A bench runs in the foreground for minutes, so it gets its own thread and its own manager instead
        of the serial worker: stop, kill and launch stay responsive meanwhile, and shutdown does not wait
        for it (its manager is closed, which ends an SSH bench; the host's ``timeout`` bounds it too)."""
        if self._closed:
            raise RuntimeError("the run controller is shut down")
        job_id = next(self._ids)
        self._jobs[job_id] = (callback, errback)
        manager = self._factory()
        self._detached.append(manager)

        def run() -> None:
            result, error = None, None
            try:
                result = manager.bench(request.host_name, request.trainer_args)
                if "recorded_gpu_type" in result:  # off the GUI thread: reading the catalog is file work
                    result["catalog_knows_gpu"] = catalog_gpu(result["recorded_gpu_type"]) is not None
            except Exception as exc:  # reported to the GUI thread
                error = exc
            finally:
                if manager in self._detached:
                    self._detached.remove(manager)
                manager.close()
            if not self._closed:  # after shutdown nobody is listening (the pane may be gone)
                try:
                    self._detachedFinished.emit(job_id, result, error)
                except RuntimeError:  # the controller was deleted meanwhile
                    pass

        threading.Thread(target=run, name=f"bench-{job_id}", daemon=True).start()
        return job_id

    def attach(
        self,
        run_id: int,
        callback: Callable[[Any], None] | None = None,
        errback: Callable[[Exception], None] | None = None,
    ) -> int:
        return self.submit(
            lambda m: m.attach(run_id, on_records=self.on_records, on_status=self.on_status), callback, errback
        )

    def live_runs(self) -> list[int]:
        return [] if self._manager is None else list(self._manager.live_runs())

    # -- shutdown -------------------------------------------------------------------------------
    def shutdown(self, stop_runs: bool, timeout_s: float = 30.0) -> None:
        """Stop (gracefully, bounded) or detach every live run, close the manager, end the worker thread.
        Blocks the calling (GUI) thread: meant for closing the window."""
        if self._closed:
            return
        self._closed = True
        for manager in list(self._detached):  # a bench in progress: closing its connections ends it
            try:
                manager.close()
            except Exception as exc:
                log.warning("closing a bench: %s", exc)
        self._thread.quit()
        self._thread.wait()
        manager = self._manager
        if manager is not None:
            if stop_runs:
                live = list(manager.live_runs())
                for run_id in live:
                    try:
                        manager.stop(run_id)
                    except Exception as exc:  # a run that ended meanwhile
                        log.warning("stopping run %s: %s", run_id, exc)
                for run_id in live:
                    try:
                        manager.wait(run_id, timeout_s)
                    except Exception as exc:
                        log.warning("waiting for run %s: %s", run_id, exc)
            manager.close()
        self._jobs.clear()
