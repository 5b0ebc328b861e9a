"""The hosts table: one row per host (this machine first), with what its last probe found."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

from gpuplanner.export.human import human_bytes, human_money
from gpuplanner.launch.host_reports import HostProbe
from trainer.reports import GpuProbe

COLUMNS = ("Host", "Address", "Reachable", "GPUs", "Machine", "Driver / CUDA", "torch", "Price / GPU-h", "Pricing")
_Index = QModelIndex | QPersistentModelIndex


def gpus_text(gpus: Sequence[GpuProbe]) -> str:
    """A probe's GPUs: "8 × NVIDIA H100 80GB HBM3 80 GiB" (count, names, the first one's memory)."""
    names = sorted({str(g.get("name", "?")) for g in gpus})
    mem = gpus[0].get("mem_total_bytes") if gpus else None
    size = f" {mem / (1 << 30):.0f} GiB" if isinstance(mem, (int, float)) else ""
    return f"{len(gpus)} × {', '.join(names)}{size}"


def _gpus(probe: HostProbe | None, host: Any) -> str:
    if probe and probe.get("ok"):
        gpus = probe.get("gpus") or []
        return gpus_text(gpus) if gpus else "none (CPU only)"
    if host.gpu_type:
        return f"{host.gpu_count or '?'} × {host.gpu_type}"
    return "—"


def _size(count: float) -> str:
    """A machine's memory or disk, short: "64 GiB", "1.8 TiB" (below 10 GiB as ``human_bytes`` writes it)."""
    gib = count / 2**30
    if gib >= 1024:
        return f"{gib / 1024:.1f} TiB"
    return f"{gib:.0f} GiB" if gib >= 10 else human_bytes(count)


def machine_text(probe: HostProbe | None) -> str:
    """CPU cores, memory and free disk (in the run folder) of a probed host: "16 CPUs · 125 GiB RAM · 40 GiB free"."""
    if not probe or not probe.get("ok"):
        return "—"
    parts = []
    cores = probe.get("cpu_cores") or probe.get("cpu_count")
    if isinstance(cores, int) and cores > 0:
        parts.append(f"{cores} CPU{'s' if cores != 1 else ''}")
    ram = probe.get("ram_bytes")
    if isinstance(ram, (int, float)) and ram > 0:
        parts.append(f"{_size(ram)} RAM")
    free = probe.get("disk_free_bytes")
    if isinstance(free, (int, float)) and free >= 0:
        parts.append(f"{_size(free)} free")
    return " · ".join(parts) or "—"


PROBE_ERRORS_KEY = "hosts/probe_errors"  # {host name: why its last probe in the window failed}, as JSON


def _stored_errors() -> dict[str, str]:
    """The probe failures a previous session recorded (so a failed host does not read "not probed" again)."""
    from gpuplanner.ui.settings import app_settings

    try:
        value = json.loads(str(app_settings().value(PROBE_ERRORS_KEY, "{}")))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _store_errors(errors: dict[str, str]) -> None:
    from gpuplanner.ui.settings import app_settings

    app_settings().setValue(PROBE_ERRORS_KEY, json.dumps(errors))


class HostsTableModel(QAbstractTableModel):
    """Rows are launcher ``Host`` objects; probing state and errors are kept per host name."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._hosts: list[Any] = []
        self._probing: set[str] = set()
        self._errors: dict[str, str] = _stored_errors()  # a failed probe is remembered across restarts

    # -- data -----------------------------------------------------------------------------------
    def set_hosts(self, hosts: list[Any]) -> None:
        self.beginResetModel()
        self._hosts = list(hosts)
        self.endResetModel()

    def host(self, row: int) -> Any:
        return self._hosts[row]

    def row_of(self, name: str) -> int:
        for row, host in enumerate(self._hosts):
            if host.name == name:
                return row
        return -1

    def _changed(self, name: str) -> None:
        row = self.row_of(name)
        if row >= 0:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def set_probing(self, name: str, probing: bool) -> None:
        if probing:
            self._probing.add(name)
            if self._errors.pop(name, None) is not None:
                _store_errors(self._errors)
        else:
            self._probing.discard(name)
        self._changed(name)

    def set_error(self, name: str, message: str | None) -> None:
        if message:
            self._errors[name] = message
        else:
            self._errors.pop(name, None)
        _store_errors(self._errors)
        self._changed(name)

    def update_host(self, host: Any) -> None:
        row = self.row_of(host.name)
        if row >= 0:
            self._hosts[row] = host
            self._changed(host.name)

    # -- Qt model API ---------------------------------------------------------------------------
    def rowCount(self, parent: _Index | None = None) -> int:  # noqa: N802
        return 0 if parent is not None and parent.isValid() else len(self._hosts)

    def columnCount(self, parent: _Index | None = None) -> int:  # noqa: N802
        return 0 if parent is not None and parent.isValid() else len(COLUMNS)

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,  # noqa: N802
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> Any:
        if (
            role == Qt.ItemDataRole.DisplayRole
            and orientation == Qt.Orientation.Horizontal
            and 0 <= section < len(COLUMNS)
        ):
            return COLUMNS[section]
        return None

    def reachable_text(self, host: Any) -> str:
        if host.name in self._probing:
            return "probing…"
        if host.name in self._errors:  # the host's name is the row's: not repeated in its narrow cell
            return f"no: {self._errors[host.name].removeprefix(host.name + ': ')}"
        probe = host.probe
        if probe is None:
            return "not probed"
        if probe.get("ok"):
            return "yes"
        missing = probe.get("missing")
        return f"yes, but missing {', '.join(missing)}" if missing else f"no: {probe.get('error', 'probe failed')}"

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not (0 <= index.row() < len(self._hosts)) or not (0 <= index.column() < len(COLUMNS)):
            return None
        host = self._hosts[index.row()]
        probe = host.probe
        column = COLUMNS[index.column()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            if column == "Host":
                return host.display_name
            if column == "Address":
                if host.kind == "local":
                    return "local"
                user = f"{host.user}@" if host.user else ""
                port = f":{host.port}" if host.port and host.port != 22 else ""
                return f"{user}{host.hostname or host.name}{port}"
            if column == "Reachable":
                return self.reachable_text(host)
            if column == "GPUs":
                return _gpus(probe, host)
            if column == "Machine":
                return machine_text(probe)
            if column == "Driver / CUDA":
                driver, cuda = (probe or {}).get("driver"), (probe or {}).get("cuda_runtime")
                return f"{driver or '—'} / {cuda or '—'}" if driver or cuda else "—"
            if column == "torch":
                return (probe or {}).get("torch") or "—"
            if column == "Price / GPU-h":
                return "—" if host.price_usd_per_gpu_hour is None else f"{human_money(host.price_usd_per_gpu_hour)}"
            if column == "Pricing":
                return host.pricing
        if role == Qt.ItemDataRole.ForegroundRole and column == "Reachable":
            text = self.reachable_text(host)
            if text.startswith("no"):
                return QColor("#b00020")
            if text == "yes":
                return QColor("#1b7f3b")
        if role == Qt.ItemDataRole.TextAlignmentRole and column == "Price / GPU-h":
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return host.name
        return None
