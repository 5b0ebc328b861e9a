"""Reading ``nvidia-smi --query-gpu`` (the GPU's own view, to hold the product's NVML sampler against).

:class:`SmiReader` runs one query of the fields it knows work: a field this driver does not offer makes
nvidia-smi refuse the whole query, so after a refusal each field is tried once alone and the ones it
refuses are listed (``unsupported``) and never asked again. :class:`MemoryWatch` polls the used memory
in a thread during a run and keeps the highest reading.

The dry run points ``command`` at ``python3 -m tests.gpu.fake_smi`` (figures of ``tests/fake_nvml.py``'s
Hopper GPU), so this parsing runs in the test suite too.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from typing import Any

# What is compared with the NVML sampler's record field of the same meaning (``trainer/nvml_sampler.py``).
FIELDS = (
    "name",
    "driver_version",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "temperature.gpu",
    "clocks_event_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.width.current",
)
MIB = 1024**2


def default_command() -> list[str] | None:
    path = shutil.which("nvidia-smi")
    return [path] if path else None


def _number(text: str) -> float | int | str | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    if text.lower().startswith("0x"):
        try:
            return int(text, 16)
        except ValueError:
            return text
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


class SmiReader:
    """One GPU's ``--query-gpu`` fields as a dict (numbers parsed, ``memory.*`` in bytes)."""

    def __init__(self, command: list[str] | None, index: int = 0, fields: tuple[str, ...] = FIELDS) -> None:
        self.command, self.index = command, index
        self.fields = list(fields)
        self.unsupported: list[str] = []
        self.error: str | None = None if command else "nvidia-smi not found"

    def _run(self, fields: list[str]) -> tuple[int, str]:
        assert self.command is not None
        args = [
            *self.command,
            f"--query-gpu={','.join(fields)}",
            "--format=csv,noheader,nounits",
            "-i",
            str(self.index),
        ]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, str(exc)
        return done.returncode, done.stdout if done.returncode == 0 else (done.stderr or done.stdout)

    def read(self) -> dict[str, Any] | None:
        """The fields now, or None (``error`` says why)."""
        if self.command is None or not self.fields:
            return None
        code, text = self._run(self.fields)
        if code != 0:  # find the fields this nvidia-smi refuses, once
            keep = []
            for name in self.fields:
                if self._run([name])[0] == 0:
                    keep.append(name)
                else:
                    self.unsupported.append(name)
            self.fields = keep
            if not keep:
                self.error = f"nvidia-smi answered no field: {text.strip()[:200]}"
                return None
            code, text = self._run(self.fields)
            if code != 0:
                self.error = f"nvidia-smi failed: {text.strip()[:200]}"
                return None
        values = [v for v in text.strip().splitlines()[0].split(",")] if text.strip() else []
        if len(values) != len(self.fields):
            self.error = f"nvidia-smi gave {len(values)} values for {len(self.fields)} fields: {text.strip()[:200]}"
            return None
        out: dict[str, Any] = {}
        for name, raw in zip(self.fields, values):
            value = raw.strip() if name in ("name", "driver_version") else _number(raw)
            if name.startswith("memory.") and isinstance(value, (int, float)):
                value = int(value * MIB)
            out[name] = value
        return out


class MemoryWatch:
    """The highest ``memory.used`` nvidia-smi reports while it runs (polled every ``interval_s``)."""

    def __init__(self, command: list[str] | None, interval_s: float = 0.5) -> None:
        self.reader = SmiReader(command, fields=("memory.used",))
        self.interval_s = interval_s
        self.max_bytes: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smi-memory", daemon=True)

    def _run(self) -> None:
        while True:
            got = self.reader.read()
            if got and isinstance(got.get("memory.used"), int):
                self.samples += 1
                self.max_bytes = max(self.max_bytes or 0, got["memory.used"])
            if self.reader.command is None or self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
