"""Launching from the Runs pane (a mixin of :class:`~gpuplanner.ui.runs.runs_pane.RunsPane`): the launch dialog
(prefilled from a plan or the last launch, its pre-launch check on the worker), launching on the
controller's worker thread with a new host key asked about first, and "Measure speed" (``trainer bench``
on the host, its answer on the message line and in the dialog still open)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from PySide6.QtWidgets import QDialog, QWidget

from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog
from gpuplanner.ui.dialogs.trust_dialog import ask_trust, show_changed_key
from gpuplanner.ui.runs.launch_request import LaunchRequest, demo_dir
from gpuplanner.ui.runs.run_controller import RunController
from gpuplanner.ui.runs.run_entry import RunEntry
from gpuplanner.ui.runs.run_status_text import measured_text


class RunLaunching:
    """The Runs pane's launch and measure actions; the pane provides the attributes declared here."""

    services: Any
    controller: RunController
    speedMeasured: Any  # Signal(object) of the pane
    _measure_dialog: LaunchDialog | None
    _launching: str | None

    if TYPE_CHECKING:  # the pane's own

        def _say(self, text: str, error: bool = True) -> None: ...

        def _add_entry(
            self, run_id: int, name: str, host: str, telemetry: Any = None, request: LaunchRequest | None = None
        ) -> RunEntry: ...

        def _update_text(self) -> None: ...

    def _widget(self) -> QWidget:
        """The pane itself, as the parent of the dialogs it opens (the mixin is only mixed into a QWidget)."""
        return cast(QWidget, self)

    def hosts_for_dialog(self) -> list[tuple[str, str, float | None]]:
        from gpuplanner.launch.hosts import list_hosts

        return [(h.name, h.display_name, h.price_usd_per_gpu_hour) for h in list_hosts(self.services.db_path)]

    def make_launch_dialog(self, settings: dict[str, Any]) -> LaunchDialog:
        """The launch dialog for ``settings``. A plan's (they carry its ``plan_id``) get a host with the plan's
        GPUs (:func:`~gpuplanner.ui.plan.plan_launch.with_host`) and no demo corpus; others default to the demo's."""
        from gpuplanner.launch.hosts import list_hosts
        from gpuplanner.ui.plan.plan_launch import with_host

        hosts = list_hosts(self.services.db_path)
        from_plan = settings.get("plan_id") is not None
        if from_plan:
            settings = with_host(settings, hosts, self.services.catalog)
        return LaunchDialog(
            [(h.name, h.display_name, h.price_usd_per_gpu_hour) for h in hosts],
            settings,
            self._widget(),
            on_measure=self.measure,
            defaults={} if from_plan else {"data": [str(demo_dir() / "corpus")]},
            on_check=self.check_launch,
        )

    def check_launch(self, values: dict[str, Any], dialog: LaunchDialog) -> None:
        """The pre-launch checks (``RunManager.preflight``) on the worker thread; the answer goes to ``dialog``."""
        host = values.get("host")

        def job(manager: Any) -> list[str]:
            return list(manager.preflight(str(host), values))

        def answer(problems: list[str], note: str | None = None) -> None:
            try:
                if dialog.isVisible():
                    dialog.check_finished(problems, note)
            except RuntimeError:  # the dialog is gone
                pass

        self.controller.submit(job, answer, lambda exc: answer([], f"Could not check the settings on {host}: {exc}"))

    def open_launch_dialog(self, settings: dict[str, Any]) -> None:
        """The launch dialog prefilled from the Plan pane's settings; launches on OK."""
        dialog = self.make_launch_dialog(settings)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            request = dialog.request()
            if request.planned_cost_usd is None and settings:
                request.planned_cost_usd = settings.get("planned_cost_usd")
            self.launch(request)

    def measure(self, request: LaunchRequest, dialog: LaunchDialog | None = None) -> None:
        """``trainer bench`` of the request's settings on its host, on a thread of its own; the result goes
        to the message line (and to ``dialog`` when it is still open) and to ``speedMeasured`` (the Plan
        pane recalculates with it)."""
        self._measure_dialog = dialog
        self._say(f"Measuring the speed on {request.host_name} (trainer bench, about a minute)…", error=False)
        self.controller.bench(
            request,
            lambda result: self._on_measured(result, request),
            lambda exc: self._on_measure_failed(exc, request),
        )

    def _measurement_answer(self, text: str, error: bool) -> None:
        """A measurement's outcome: on the message line, and in the launch dialog if it is still open."""
        self._say(text, error)
        dialog, self._measure_dialog = self._measure_dialog, None
        if dialog is not None:
            try:
                if dialog.isVisible():
                    dialog.show_measurement(text, error)
            except RuntimeError:  # the dialog is gone
                pass

    def _on_measured(self, result: dict[str, Any], request: LaunchRequest) -> None:
        self._measurement_answer(measured_text(result, request.host_name), error=False)
        self.speedMeasured.emit(result)

    def _on_measure_failed(self, exc: Exception, request: LaunchRequest) -> None:
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        if isinstance(exc, UnknownHostKey):
            self._say("")
            if ask_trust(exc, self._widget()):
                self.measure(request, self._measure_dialog)
            else:
                self._measurement_answer(f"Not measured: the key of {exc.hostname} was not trusted.", error=True)
            return
        if isinstance(exc, ChangedHostKey):
            self._measurement_answer(f"Refused: the host key of {exc.hostname} changed.", error=True)
            show_changed_key(exc, self._widget())
            return
        self._measurement_answer(f"Measuring failed: {exc}", error=True)

    def launch(self, request: LaunchRequest) -> None:
        """Launch on the worker thread; a new host key is asked about here, then the launch is retried."""
        self._say("")  # the title and the plots' place say "Starting on HOST…" (one state, not two)
        self._launching = request.host_name
        self._update_text()
        self.controller.launch(
            request, lambda run_id: self._on_launched(run_id, request), lambda exc: self._on_launch_failed(exc, request)
        )

    def _on_launched(self, run_id: int, request: LaunchRequest) -> None:
        self._say("")
        self._launching = None
        self._add_entry(run_id, request.name or f"Run {run_id}", request.host_name, request=request)
        self._update_text()

    def _on_launch_failed(self, exc: Exception, request: LaunchRequest) -> None:
        self._launching = None
        self._update_text()
        from gpuplanner.launch.hosts import HostError
        from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey

        if isinstance(exc, UnknownHostKey):
            self._say("")
            if ask_trust(exc, self._widget()):
                self.launch(request)
            else:
                self._say(f"Not launched: the key of {exc.hostname} was not trusted.")
            return
        if isinstance(exc, ChangedHostKey):
            self._say(f"Refused: the host key of {exc.hostname} changed.")
            show_changed_key(exc, self._widget())
            return
        prefix = "Host problem" if isinstance(exc, HostError) else "Launch failed"
        self._say(f"{prefix}: {exc}")
