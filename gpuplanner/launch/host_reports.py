"""What a host sends back to the launcher, as the launcher hands it on: the probe and the bench result.

The trainer's own documents (``trainer.reports``) plus the launcher's keys; the key names are JSON
contracts (``hosts probe --json``, ``hosts bench --json``, the host's stored probe; docs/json.md).
"""

import json
from typing import Required, TypedDict, cast

from gpuplanner.launch.slurm_settings import SlurmSettingsDoc
from trainer.reports import BenchReport, GpuUtilisation, ProbeReport


class ProbeCheck(TypedDict, total=False):
    """The probe's first step (``probe_check.missing_report``): which modules the payload needs are
    missing on the host, and the command that installs them (only when some are)."""

    python: str  # the host's Python version, as ProbeReport's
    missing: list[str]  # always written by missing_report; a backend's failed probe may write it alone
    missing_optional: list[str]
    install_hint: str


class HostProbe(ProbeReport, ProbeCheck, total=False):
    """A backend's probe: ``ok`` and, when it is True, everything ``trainer probe`` printed; ``missing``,
    ``error`` and ``install_hint`` say why not when it is False. SSH and Slurm hosts add the payload's
    hash and whether this probe uploaded it; Slurm hosts their job settings."""

    ok: Required[bool]
    error: str
    payload: str
    payload_uploaded: bool
    slurm: SlurmSettingsDoc


class BenchResult(BenchReport, total=False):
    """``RunManager.bench``: what ``trainer bench`` printed, and whether the history stored it as a
    calibration measurement (``recorded_id``) or why not (``not_recorded``)."""

    recorded_id: int
    recorded_gpu_type: str  # the GPU the measurement was stored under
    not_recorded: str


def parse_utilisation(text: str) -> GpuUtilisation:
    """The document ``python -m trainer.nvml_sampler`` printed (ValueError when it printed another)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("util_pct"), list):
        raise ValueError(f"not a GPU utilisation reading: {text.strip()[-200:]!r}")
    return cast(GpuUtilisation, doc)  # the trainer's own document, checked for the key that is read
