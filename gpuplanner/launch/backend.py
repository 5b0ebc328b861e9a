"""What the run manager needs from a host, whether this machine or one reached over SSH.

A process is started detached through the payload's wrapper (``setsid``: its own session and
process group), writing ``RUN_DIR/TAG.pid`` and, when it ends, ``RUN_DIR/TAG.exit``; so its
outcome is known even if nobody watched it end. Stop and kill signal the whole process group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuplanner.launch.host_reports import HostProbe
from trainer.reports import BenchReport, GpuUtilisation


@dataclass(frozen=True)
class ProcessState:
    alive: bool
    exit_code: int | None = None  # None while alive, or when it died without the wrapper noting it (SIGKILL)


class Backend(Protocol):
    name: str

    def connect(self) -> None: ...

    def is_connected(self) -> bool: ...

    def close(self) -> None: ...

    def run_dir(self, run_id: int) -> str: ...

    def start(self, run_dir: str, tag: str, command: list[str], env: dict[str, str]) -> int:
        """Start ``command`` (argv; ``python`` stands for the host's interpreter) detached; returns the pgid."""
        ...

    def signal(self, pgid: int, signame: str) -> None: ...

    def state(self, run_dir: str, tag: str, pgid: int) -> ProcessState: ...

    def read(self, path: str, offset: int, size: int) -> bytes:
        """Bytes of a file from ``offset`` (b"" at its end or when it does not exist yet)."""
        ...

    def probe(self) -> HostProbe: ...

    def bench(self, args: list[str], timeout_s: float) -> BenchReport:
        """Run ``python -m trainer bench ARGS`` in the foreground; its JSON result (RuntimeError with the
        trainer's last error lines when it fails)."""
        ...

    def gpu_utilisation(self) -> GpuUtilisation:
        """The host's GPUs' utilisation now, ``{"node", "simulated", "util_pct": [...]}`` (``python -m
        trainer.nvml_sampler`` there), for stop-when-idle."""
        ...
