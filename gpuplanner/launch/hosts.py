"""Hosts a run can go to: "This machine", SSH hosts (added by the user or from ``~/.ssh/config``) and
Slurm clusters (an SSH login node plus the job settings of :mod:`gpuplanner.launch.slurm_settings`).

Hosts are stored in the history database (see :mod:`gpuplanner.history.hosts`) with their price per
GPU-hour (on-demand or spot) and what the last probe found. Every function opens its own short-lived
connection, so they are safe to call from any thread.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.history.hosts import delete_host_row, get_host_row, insert_host_row, list_host_rows, upsert_host_row
from gpuplanner.launch import ssh_config
from gpuplanner.launch.host_reports import HostProbe
from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey
from gpuplanner.launch.slurm_settings import SlurmSettings, SlurmSettingsDoc, SlurmSettingsError, parse_settings

__all__ = [
    "Host",
    "LOCAL_HOST_NAME",
    "HostError",
    "UnknownHostKey",
    "ChangedHostKey",
    "list_hosts",
    "get_host",
    "add_host",
    "update_host",
    "remove_host",
    "ssh_config_hosts",
    "default_ssh_config_path",
    "PRICING_NAMES",
    "check_price",
    "set_price",
    "set_after_run",
]

LOCAL_HOST_NAME = "local"
KINDS = ("local", "ssh", "slurm")
PRICING_NAMES = ("on-demand", "spot")
_DB_PRICING = {"on-demand": "on_demand", "spot": "spot"}


class IdleRule(TypedDict):
    """Stop-when-idle (``Host.after_run_idle``): the after-run command waits until every GPU of the host
    stayed under ``util_pct`` for ``minutes``."""

    util_pct: float
    minutes: float


class HostError(ValueError):
    """A host that cannot be stored or found; the message says why."""


@dataclass(frozen=True)
class Host:
    name: str
    kind: str  # "local" | "ssh" | "slurm" (an SSH login node that submits jobs with sbatch)
    hostname: str | None = None
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None
    price_usd_per_gpu_hour: float | None = None
    pricing: str = "on-demand"  # or "spot"
    gpu_type: str | None = None
    gpu_count: int | None = None
    probe: HostProbe | None = None  # the last probe
    python: str | None = None  # interpreter (default: python3 over SSH; locally the one trainer_python finds)
    remote_root: str | None = None  # SSH: folder for the payload and run dirs (default ~/.gpuplanner)
    slurm: SlurmSettingsDoc | None = None  # Slurm: the job settings (SlurmSettings as a dict)
    # A shell command run on this machine once a run on the host has ended (e.g. a cloud CLI that stops
    # the instance); the history bills the host from launch until it has finished.
    after_run_command: str | None = None
    # Stop-when-idle: run the after-run command only once the host's GPUs stayed under ``util_pct`` for
    # ``minutes`` after the run ended ({"util_pct": ..., "minutes": ...}; None: right after the run).
    after_run_idle: IdleRule | None = None

    @property
    def db_pricing(self) -> str:
        """The pricing name the run history uses (``on_demand`` or ``spot``)."""
        return _DB_PRICING[self.pricing]

    @property
    def display_name(self) -> str:
        return "This machine" if self.kind == "local" else self.name

    @property
    def slurm_settings(self) -> SlurmSettings:
        """The checked Slurm settings (HostError naming the field if they are unusable)."""
        try:
            return parse_settings(self.slurm)
        except SlurmSettingsError as exc:
            raise HostError(f"Slurm host {self.name!r}: {exc}") from None


def local_host() -> Host:
    return Host(name=LOCAL_HOST_NAME, kind="local")


def validate_host(host: Host) -> None:
    if not host.name or host.name != host.name.strip() or "\n" in host.name:
        raise HostError("host name must be non-empty, without surrounding spaces or newlines")
    if host.kind not in KINDS:
        raise HostError(f"host kind must be one of {KINDS}, not {host.kind!r}")
    if (host.kind == "local") != (host.name == LOCAL_HOST_NAME):
        raise HostError(f"only the host named {LOCAL_HOST_NAME!r} is local (this machine)")
    if host.kind in ("ssh", "slurm") and not host.hostname:
        raise HostError(f"{'SSH' if host.kind == 'ssh' else 'Slurm'} host {host.name!r} needs a hostname")
    if host.kind == "slurm":
        host.slurm_settings  # noqa: B018 (raises HostError naming the bad setting)
    elif host.slurm is not None:
        raise HostError(f"only a Slurm host has Slurm settings ({host.name!r} is {host.kind})")
    if not 0 < int(host.port) < 65536:
        raise HostError(f"port must be 1-65535, not {host.port}")
    if host.pricing not in PRICING_NAMES:
        raise HostError(f"pricing must be one of {PRICING_NAMES}, not {host.pricing!r}")
    check_price(host.price_usd_per_gpu_hour)
    check_after_run(host.after_run_command)
    check_after_run_idle(host)


def check_after_run_idle(host: Host) -> None:
    """HostError unless the stop-when-idle setting is absent or valid for this host."""
    idle = host.after_run_idle
    if idle is None:
        return
    if host.kind == "slurm":
        raise HostError("stop-when-idle is for SSH hosts and this machine: Slurm frees a job's nodes itself")
    if not host.after_run_command:
        raise HostError("stop-when-idle needs an after-run command to run")
    util, minutes = idle.get("util_pct") if isinstance(idle, dict) else None, (idle or {}).get("minutes")
    for name, value, low, high in (("idle utilisation %", util, 0.0, 100.0), ("idle minutes", minutes, 0.0, 1e6)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise HostError(f"{name} must be a number, not {value!r}")
        if not low < value <= high:
            raise HostError(f"{name} must be more than {low:g} and at most {high:g}, not {value:g}")


def check_after_run(command: str | None) -> None:
    """HostError unless ``command`` is None or a non-empty shell command line without NUL characters."""
    if command is None:
        return
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise HostError(f"after-run command must be a non-empty shell command, not {command!r}")


def check_price(price: float | None) -> None:
    """HostError unless ``price`` is None or a finite number of dollars per GPU-hour, 0 or more."""
    if price is None:
        return
    if isinstance(price, bool) or not isinstance(price, (int, float)):
        raise HostError(f"price per GPU-hour must be a number, not {price!r}")
    if not math.isfinite(price):
        raise HostError(f"price per GPU-hour must be a finite number of dollars, not {price}")
    if price < 0:
        raise HostError(f"price per GPU-hour must not be negative ({price})")


def _to_row(host: Host) -> dict[str, Any]:
    return dataclasses.asdict(host)


def _from_row(row: dict[str, Any]) -> Host:
    fields = {f.name for f in dataclasses.fields(Host)}
    values = {k: v for k, v in row.items() if k in fields}
    values.setdefault("kind", "local" if row["name"] == LOCAL_HOST_NAME else "ssh")
    if not isinstance(values.get("probe"), dict):  # a stored probe that is no document counts as none
        values["probe"] = None
    return Host(**values)


def set_price(
    db_path: str | os.PathLike[str] | None, name: str, price: float | None, pricing: str | None = None
) -> Host:
    """Set a host's price per GPU-hour (None: no price) and, if given, its pricing; this machine included."""
    check_price(price)
    host = get_host(db_path, name)
    host = dataclasses.replace(host, price_usd_per_gpu_hour=price, pricing=pricing or host.pricing)
    update_host(db_path, host)
    return host


def set_after_run(
    db_path: str | os.PathLike[str] | None, name: str, command: str | None, idle: IdleRule | None = None
) -> Host:
    """Set (or with None remove) the command run on this machine after each run on host ``name`` ends;
    with ``idle`` ({"util_pct", "minutes"}) only once the host's GPUs stayed under it that long."""
    check_after_run(command)
    host = dataclasses.replace(get_host(db_path, name), after_run_command=command, after_run_idle=idle)
    update_host(db_path, host)
    return host


def list_hosts(db_path: str | os.PathLike[str] | None) -> list[Host]:
    """This machine first, then the stored SSH and Slurm hosts by name."""
    with open_db(db_path) as db:
        rows = list_host_rows(db)
    hosts = [_from_row(r) for r in rows]
    local = next((h for h in hosts if h.name == LOCAL_HOST_NAME), local_host())
    return [local] + [h for h in hosts if h.name != LOCAL_HOST_NAME]


def get_host(db_path: str | os.PathLike[str] | None, name: str) -> Host:
    with open_db(db_path) as db:
        row = get_host_row(db, name)
    if row is None:
        if name == LOCAL_HOST_NAME:
            return local_host()
        raise HostError(f"no host named {name!r}")
    return _from_row(row)


def add_host(db_path: str | os.PathLike[str] | None, host: Host) -> None:
    validate_host(host)
    if host.name == LOCAL_HOST_NAME:
        raise HostError("this machine is always there; use update_host to set its price")
    with open_db(db_path) as db:
        try:
            insert_host_row(db, _to_row(host))
        except HistoryError as exc:
            raise HostError(str(exc)) from exc


def update_host(db_path: str | os.PathLike[str] | None, host: Host) -> None:
    validate_host(host)
    with open_db(db_path) as db:
        if host.name != LOCAL_HOST_NAME and get_host_row(db, host.name) is None:
            raise HostError(f"no host named {host.name!r}")
        upsert_host_row(db, _to_row(host))


def remove_host(db_path: str | os.PathLike[str] | None, name: str) -> None:
    if name == LOCAL_HOST_NAME:
        raise HostError("this machine cannot be removed")
    with open_db(db_path) as db:
        try:
            delete_host_row(db, name)
        except HistoryError as exc:
            raise HostError(str(exc)) from exc


def default_ssh_config_path() -> Path:
    """``$GPUPLANNER_SSH_CONFIG`` (tests) or ``~/.ssh/config``."""
    return ssh_config.default_path()


def _config_host(resolved: ssh_config.Resolved) -> Host:
    return Host(
        name=resolved.alias,
        kind="ssh",
        hostname=resolved.hostname,
        port=resolved.port,
        user=resolved.user,
        identity_file=resolved.identity_file,
        proxy_jump=resolved.proxy_jump,
    )


def _config_file(path: str | os.PathLike[str] | None) -> Path:
    if not path or str(path) == "~/.ssh/config":
        return default_ssh_config_path()
    return Path(os.path.expanduser(str(path)))


def ssh_config_hosts(path: str | os.PathLike[str] | None = "~/.ssh/config") -> list[Host]:
    """The concrete ``Host`` aliases of an OpenSSH config and its ``Include`` files (no patterns), each
    resolved as ``ssh -G`` resolves it (paramiko's parser without OpenSSH's client). An alias that cannot
    be resolved raises HostError naming the file."""
    file = _config_file(path)
    try:
        return [_config_host(ssh_config.resolve(alias, file)) for alias in ssh_config.aliases(file)]
    except ssh_config.SSHConfigError as exc:
        raise HostError(f"SSH config: {exc}") from None


def ssh_config_host(alias: str, path: str | os.PathLike[str] | None = None) -> Host | None:
    """A name the SSH config knows (a ``Host`` alias, or a name a ``Host`` pattern such as ``gpu-*`` applies
    to, in the file and its includes), resolved as ``ssh NAME`` would resolve it; or None."""
    file = _config_file(path)
    try:
        if alias not in ssh_config.aliases(file) and not ssh_config.known(alias, file):
            return None
        return _config_host(ssh_config.resolve(alias, file))
    except ssh_config.SSHConfigError as exc:
        raise HostError(f"SSH config: {exc}") from None
