"""A Slurm host's job settings: partition, account, QoS, GPUs per node, nodes, time limit, container.

A Slurm host is an SSH login node (the ``Host`` fields say how to reach it) plus these settings,
stored with the host (``Host.slurm``, a plain dict in the history). :func:`parse_settings` checks a
dict and returns :class:`SlurmSettings`; every error is a :class:`SlurmSettingsError` naming the field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, cast

_NAME = re.compile(r"[A-Za-z0-9_.+\-]+\Z")
# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)\Z")
GPU_FLAGS = ("gpus-per-node", "gres")
DEFAULT_SIGNAL_LEAD_S = 120


class SlurmSettingsError(ValueError):
    """A Slurm setting that cannot be used; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def time_limit_seconds(text: str) -> int:
    """Seconds in a Slurm time limit (``90``, ``1:30:00``, ``2-00:00:00``, ...); ValueError if malformed."""
    m = _TIME.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a Slurm time limit (minutes, H:MM:SS or D-HH:MM:SS)")
    d, dh, dm, ds, mins, secs_or_min, secs = m.groups()
    if d is not None:
        return int(d) * 86400 + int(dh) * 3600 + int(dm or 0) * 60 + int(ds or 0)
    if secs is not None:  # H:M:S
        return int(mins) * 3600 + int(secs_or_min) * 60 + int(secs)
    if secs_or_min is not None:  # M:S
        return int(mins) * 60 + int(secs_or_min)
    return int(mins) * 60


class SlurmSettingsDoc(TypedDict, total=False):
    """A Slurm host's job settings as stored with the host (``Host.slurm``) and shown in its probe:
    SlurmSettings' fields by name (``SlurmSettings.to_dict``, ``parse_settings``)."""

    partition: str | None
    account: str | None
    qos: str | None
    gpus_per_node: int
    nodes: int
    time_limit: str | None
    container_image: str | None
    requeue: bool
    signal_lead_s: int
    gpu_flag: str
    setup: str | None


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_node: int = 0  # 0: a CPU job (no GPU request)
    nodes: int = 1
    time_limit: str | None = None  # Slurm's --time; None: the partition's default
    container_image: str | None = None  # srun --container-image (pyxis/enroot)
    requeue: bool = False  # preemptible partition: Slurm may requeue the job; the trainer resumes
    signal_lead_s: int = DEFAULT_SIGNAL_LEAD_S  # SIGTERM to the batch shell this long before the limit
    gpu_flag: str = "gpus-per-node"  # or "gres" (--gres=gpu:N, for clusters without select/cons_tres)
    setup: str | None = None  # shell lines run before the trainer (module load ..., source venv/bin/activate)

    def to_dict(self) -> SlurmSettingsDoc:
        # asdict writes exactly the fields SlurmSettingsDoc names (test_slurm_settings_doc_names_every_field)
        return cast(SlurmSettingsDoc, dataclasses.asdict(self))

    @property
    def processes_per_node(self) -> int:
        return max(1, self.gpus_per_node)

    @property
    def gpus_in_job(self) -> int:
        """Trainer processes (GPUs; one for a CPU job) of the whole job: what spend is counted for."""
        return self.processes_per_node * self.nodes

    def sbatch_options(self) -> list[str]:
        """The resource options of ``sbatch`` (not the output files or the job name)."""
        out: list[str] = []
        for flag, value in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos)):
            if value:
                out.append(f"{flag}={value}")
        out += [f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        if self.gpus_per_node > 0:
            out.append(
                f"--gpus-per-node={self.gpus_per_node}"
                if self.gpu_flag == "gpus-per-node"
                else f"--gres=gpu:{self.gpus_per_node}"
            )
        if self.time_limit:
            out.append(f"--time={self.time_limit}")
        if self.signal_lead_s > 0:
            out.append(f"--signal=B:TERM@{self.signal_lead_s}")
        out.append("--requeue" if self.requeue else "--no-requeue")
        return out


def _int(doc: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            raise SlurmSettingsError(key, f"a whole number, not {value!r}") from None
    if value < low:
        raise SlurmSettingsError(key, f"at least {low}, not {value}")
    return value


def parse_settings(doc: Mapping[str, Any] | None) -> SlurmSettings:
    """Checked settings from a stored or user-given dict (unknown keys are refused)."""
    doc = dict(doc or {})
    known = {f.name for f in dataclasses.fields(SlurmSettings)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise SlurmSettingsError(unknown[0], f"not a Slurm setting (known: {', '.join(sorted(known))})")
    names: dict[str, str | None] = {}
    for key in ("partition", "account", "qos"):
        value = doc.get(key)
        if value in (None, ""):
            names[key] = None
        elif not isinstance(value, str) or not _NAME.match(value):
            raise SlurmSettingsError(key, f"a Slurm name (letters, digits, _ . + -), not {value!r}")
        else:
            names[key] = value
    time_limit = doc.get("time_limit") or None
    if time_limit is not None:
        try:
            if time_limit_seconds(str(time_limit)) <= 0:
                raise ValueError("a time limit must be longer than 0")
        except ValueError as exc:
            raise SlurmSettingsError("time_limit", str(exc)) from None
        time_limit = str(time_limit).strip()
    image = doc.get("container_image") or None
    if image is not None and (not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image)):
        raise SlurmSettingsError("container_image", f"an image name without spaces, not {image!r}")
    gpu_flag = doc.get("gpu_flag") or "gpus-per-node"
    if gpu_flag not in GPU_FLAGS:
        raise SlurmSettingsError("gpu_flag", f"one of {', '.join(GPU_FLAGS)}, not {gpu_flag!r}")
    requeue = doc.get("requeue", False)
    if not isinstance(requeue, bool):
        raise SlurmSettingsError("requeue", f"true or false, not {requeue!r}")
    setup = doc.get("setup") or None
    if setup is not None and not isinstance(setup, str):
        raise SlurmSettingsError("setup", "shell lines as text")
    settings = SlurmSettings(
        partition=names["partition"],
        account=names["account"],
        qos=names["qos"],
        gpus_per_node=_int(doc, "gpus_per_node", 0, 0),
        nodes=_int(doc, "nodes", 1, 1),
        time_limit=time_limit,
        container_image=image,
        requeue=requeue,
        signal_lead_s=_int(doc, "signal_lead_s", DEFAULT_SIGNAL_LEAD_S, 0),
        gpu_flag=gpu_flag,
        setup=setup,
    )
    if settings.time_limit and 0 < time_limit_seconds(settings.time_limit) <= settings.signal_lead_s:
        raise SlurmSettingsError(
            "signal_lead_s",
            f"{settings.signal_lead_s} s is not shorter than the time limit {settings.time_limit}: "
            "the job would be told to checkpoint as it starts",
        )
    return settings
