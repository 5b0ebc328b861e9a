"""The typed documents a host sends back (gpuplanner.launch.host_reports, trainer.reports) name what the
code really writes: the Slurm settings, the probe's first step, the GPU utilisation reading."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gpuplanner.launch.host_reports import BenchResult, HostProbe, ProbeCheck, parse_utilisation
from gpuplanner.launch.probe_check import missing_report
from gpuplanner.launch.slurm_settings import SlurmSettings, SlurmSettingsDoc, parse_settings
from trainer.reports import BenchReport, GpuUtilisation, ProbeReport


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def test_slurm_settings_doc_names_every_field() -> None:
    settings = SlurmSettings(partition="gpu", gpus_per_node=4, nodes=2, time_limit="1:00:00", requeue=True)
    doc = settings.to_dict()
    assert set(doc) == _keys(SlurmSettingsDoc) == {f.name for f in dataclasses.fields(SlurmSettings)}
    assert doc["gpus_per_node"] == 4 and doc["requeue"] is True
    assert parse_settings(doc) == settings


def test_a_host_probe_needs_only_ok_and_holds_the_trainers_and_the_launchers_keys() -> None:
    assert HostProbe.__required_keys__ == {"ok"}
    assert _keys(ProbeReport) | _keys(ProbeCheck) <= _keys(HostProbe)
    assert {"error", "payload", "payload_uploaded", "slurm"} <= _keys(HostProbe)
    assert _keys(BenchResult) == _keys(BenchReport) | {"recorded_id", "recorded_gpu_type", "not_recorded"}


def test_missing_report_writes_the_probe_check_keys() -> None:
    out = json.dumps({"python": "3.11.9", "modules": {"torch": True, "transformers": False, "pynvml": False}})
    report = missing_report("login banner\n" + out, "/usr/bin/python3")
    assert set(report) == _keys(ProbeCheck)
    assert report["missing"] == ["transformers"] and "pynvml" in report["missing_optional"]
    assert report["install_hint"].startswith("/usr/bin/python3 -m pip install transformers nvidia-ml-py")
    healthy = missing_report(json.dumps({"python": "3.12.1", "modules": dict.fromkeys(("torch", "transformers",
                             "pynvml", "peft", "safetensors"), True)}), "python3")  # fmt: skip
    assert healthy == {"python": "3.12.1", "missing": [], "missing_optional": []}


def test_parse_utilisation_takes_the_samplers_document_and_refuses_another() -> None:
    reading = parse_utilisation('{"node": "gpu-7", "simulated": false, "util_pct": [3.0, null]}\n')
    assert set(reading) == _keys(GpuUtilisation) and reading["util_pct"] == [3.0, None]
    with pytest.raises(ValueError, match="not a GPU utilisation reading"):
        parse_utilisation('{"node": "gpu-7"}')
    with pytest.raises(ValueError):
        parse_utilisation("Traceback (most recent call last):")
