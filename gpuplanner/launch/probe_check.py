"""The probe's first step: which Python modules the payload needs are missing on a host, and the fix."""

from __future__ import annotations

import json

from gpuplanner.launch.host_reports import ProbeCheck

NEEDED = ("torch", "transformers")
OPTIONAL = ("pynvml", "peft", "safetensors")
PIP_NAMES = {"pynvml": "nvidia-ml-py"}

CHECK_CODE = (
    "import importlib.util, json, sys; print(json.dumps({'python': sys.version.split()[0], 'modules': "
    f"{{m: importlib.util.find_spec(m) is not None for m in {NEEDED + OPTIONAL!r}}}}}))"
)


def missing_report(check_output: str, python: str) -> ProbeCheck:
    """From CHECK_CODE's output: ``python``, ``missing`` (needed modules), ``missing_optional``, ``install_hint``."""
    doc = json.loads(check_output.strip().splitlines()[-1])
    modules = doc.get("modules", {})
    missing = [m for m in NEEDED if not modules.get(m)]
    optional = [m for m in OPTIONAL if not modules.get(m)]
    report: ProbeCheck = {"python": doc.get("python"), "missing": missing, "missing_optional": optional}
    if missing or optional:
        names = " ".join(PIP_NAMES.get(m, m) for m in missing + optional)
        report["install_hint"] = f"{python} -m pip install {names}"
    return report
