"""The Qt adapter over the launcher's :class:`RunManager`.

Blocking manager calls (launch, probe, stop, resume: SSH connects, payload uploads, joins) run one at a
time, in order, as :class:`BackgroundJob` s on a one-thread pool that this controller owns (a bench,
which takes minutes, gets a thread and a manager of its own); their results come back to the GUI thread as
``callback(result)`` / ``errback(exception)``. The manager's own callbacks arrive on its watcher threads
and are only re-emitted here as queued signals; nothing in this module touches a widget.

The window owns one controller, so one ``RunManager`` (:func:`make_shared_controller`): the Hosts,
Runs and Sweep panes all use it. A run launched by any of them (the Sweep pane's trials go through
:meth:`RunController.reporting_manager`) streams its records and status through this controller and is
announced with ``runLaunched``, so the Runs pane shows it and closing the window asks about it.

Signals:
    recordsArrived(int run_id, object records)  telemetry records (list of dicts), in seq order
    statusChanged(object status)                 a ``RunStatus`` of the launcher
    runLaunched(int run_id, str name, str host)  a run started through this controller (any pane)
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot
from PySide6.QtWidgets import QWidget

from gpuplanner.plan.catalog import catalog_gpu
from gpuplanner.ui.background import BackgroundJob, JobSignals

log = logging.getLogger(__name__)


JOB_KIND = "manager-call"


class _ReportingManager:
    """The shared manager as a search runner sees it: ``launch`` also streams the run's records and status
    through the controller and announces the run; ``close`` leaves the shared manager open (its owner,
    the window, closes it); everything else is the manager's own."""

    def __init__(self, controller: RunController) -> None:
        self._controller = controller

    def launch(self, host_name: str, trainer_args: Any, **kwargs: Any) -> int:
        controller = self._controller
        kwargs.setdefault("on_records", controller.on_records)
        kwargs.setdefault("on_status", controller.on_status)
        run_id = int(controller.manager.launch(host_name, trainer_args, **kwargs))
        controller.runLaunched.emit(run_id, str(kwargs.get("name") or f"Run {run_id}"), str(host_name))
        return run_id

    def attach(self, run_id: int, **kwargs: Any) -> Any:
        manager = self._controller.manager
        if run_id not in manager.live_runs():  # already watched (the Runs pane reattached it): no second feed
            kwargs.setdefault("on_records", self._controller.on_records)
            kwargs.setdefault("on_status", self._controller.on_status)
        return manager.attach(run_id, **kwargs)

    def close(self) -> None:
        """Nothing to close: the runs stay watched by the shared manager."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller.manager, name)


class RunController(QObject):
    """See the module docstring. ``manager_factory()`` builds the ``RunManager`` (lazily, on first use).

    ``passphrase`` (optional) is the prompter the factory's managers ask; :meth:`shutdown` closes it
    first, so no worker waits for a dialog while the window goes away."""

    recordsArrived = Signal(int, object)
    statusChanged = Signal(object)
    runLaunched = Signal(int, str, str)
    _detachedFinished = Signal(int, object, object)  # job id, result, exception: from a bench thread

    def __init__(
        self, manager_factory: Callable[[], Any], parent: QObject | None = None, passphrase: Any = None
    ) -> None:
        super().__init__(parent)
        self._factory = manager_factory
        self.passphrase = passphrase
        self._manager: Any = None
        self._manager_lock = threading.Lock()  # the worker thread and a search's thread may ask at once
        self._jobs: dict[int, tuple[Callable[[Any], None] | None, Callable[[Exception], None] | None]] = {}
        self._ids = itertools.count(1)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)  # one manager call at a time, in the order submitted
        self._pool.setExpiryTimeout(-1)  # keep the thread between calls
        self._signals = JobSignals(self)
        self._signals.done.connect(self._on_job_done)
        self._signals.raised.connect(self._on_job_raised)
        self._detachedFinished.connect(self._on_job_finished)  # queued: emitted from other threads
        self._detached: list[Any] = []  # managers of benches in progress
        self._closed = False

    # -- manager --------------------------------------------------------------------------------
    @property
    def manager(self) -> Any:
        with self._manager_lock:
            if self._manager is None:
                self._manager = self._factory()
            return self._manager

    def reporting_manager(self) -> _ReportingManager:
        """The shared manager for a search runner: its launches show in the Runs pane (``runLaunched``)."""
        return _ReportingManager(self)

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
        self._pool.start(BackgroundJob(lambda: fn(self.manager), self._signals, JOB_KIND, job_id))
        return job_id

    @Slot(str, int, object)
    def _on_job_done(self, _kind: str, job_id: int, result: Any) -> None:
        self._on_job_finished(job_id, result, None)

    @Slot(str, int, object)
    def _on_job_raised(self, _kind: str, job_id: int, exc: Any) -> None:
        self._on_job_finished(job_id, None, exc)

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

        def launched(run_id: int) -> None:  # on the GUI thread: the launching pane first, then the others
            if callback is not None:
                callback(run_id)
            self.runLaunched.emit(run_id, request.name or f"Run {run_id}", request.host_name)

        return self.submit(job, launched, errback)

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
        if self.passphrase is not None:
            self.passphrase.close()  # a connection waiting for a passphrase gets None and ends
        for manager in list(self._detached):  # a bench in progress: closing its connections ends it
            try:
                manager.close()
            except Exception as exc:
                log.warning("closing a bench: %s", exc)
        self._pool.clear()  # calls not started yet are dropped; the one running ends first
        self._pool.waitForDone()
        manager = self._manager
        if manager is not None:
            if stop_runs:
                live = list(manager.live_runs())
                for run_id in live:
                    try:
                        manager.stop(run_id, by="window")
                    except Exception as exc:  # a run that ended meanwhile
                        log.warning("stopping run %s: %s", run_id, exc)
                for run_id in live:
                    try:
                        manager.wait(run_id, timeout_s)
                    except Exception as exc:
                        log.warning("waiting for run %s: %s", run_id, exc)
            manager.close()
        self._jobs.clear()


def make_shared_controller(db_path: Any, window: QWidget) -> RunController:
    """The application's one controller (and so one ``RunManager``), asking passphrases over ``window``.

    The manager itself is built on first use (paramiko loads then, not at start-up)."""
    from gpuplanner.ui.dialogs.passphrase_dialog import PassphrasePrompter

    prompter = PassphrasePrompter(window)

    def factory() -> Any:
        from gpuplanner.launch.manager import RunManager

        return RunManager(db_path, passphrase_callback=prompter)

    return RunController(factory, window, passphrase=prompter)
