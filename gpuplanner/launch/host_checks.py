"""What the run manager asks of a host besides running jobs on it: a probe (``python -m trainer probe``,
of a stored host or of one not yet saved), the pre-flight check of a launch on it
(:mod:`~gpuplanner.launch.preflight`) and a benchmark (``python -m trainer bench`` in the foreground,
recorded as the planner's calibration). Each goes through the host's connection in ``connections``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpuplanner.history.calibration import record_bench
from gpuplanner.history.db import connect
from gpuplanner.launch import command_lines, preflight
from gpuplanner.launch.connections import Connections
from gpuplanner.launch.host_reports import BenchResult, HostProbe
from gpuplanner.launch.hosts import Host, get_host, update_host, validate_host
from gpuplanner.launch.local_backend import TrainerPythonMissing
from gpuplanner.launch.run_state import RunError


def test_host(connections: Connections, host: Host) -> HostProbe:
    """Connect to ``host`` as it is (not yet saved: the Add host dialog's Test connection), probe it as
    :func:`probe` does, close the connection and return the probe; the history is not touched. An
    invalid host raises HostError; an unknown or changed host key, a refused login or an unreachable
    address raise as for a saved host."""
    validate_host(host)
    backend = connections.make(host)
    try:
        backend.connect()
        return backend.probe().copy()
    finally:
        backend.close()


def probe(connections: Connections, host_name: str) -> HostProbe:
    """Upload the payload if needed, run ``python -m trainer probe``; store GPU type/count on the host."""
    host = get_host(connections.db_path, host_name)
    result = connections.get(host_name).probe()
    gpus = result.get("gpus") or []
    gpu_type = gpus[0]["name"] if gpus else None
    if result.get("ok"):
        update_host(connections.db_path, replace(host, gpu_type=gpu_type, gpu_count=len(gpus), probe=result))
    return result


def check_launch(connections: Connections, host_name: str, values: Mapping[str, Any]) -> list[str]:
    """The pre-flight check (:func:`gpuplanner.launch.preflight.check_launch`) of the launch dialog's
    ``values`` on a stored host: this machine's files, or an SSH host's through its connection."""
    host = get_host(connections.db_path, host_name)
    backend = None if host.kind == "local" else connections.get(host_name)
    return preflight.check_on_host(host, backend, dict(values))


def preflight_event(
    connections: Connections, host_name: str, args: Sequence[str], user_command: Sequence[str]
) -> dict[str, Any]:
    """What a launch records as the run's ``preflight`` event: the problems the check found (it never
    refuses a launch; the launch dialog shows them before), or why nothing was checked."""
    if user_command:
        return {
            "problems": [],
            "not_checked": "a command of your own (only the bundled trainer's flags are checked)",
        }
    try:
        return {"problems": check_launch(connections, host_name, preflight.values_from_args(args))}
    except Exception as exc:  # noqa: BLE001 - a check that cannot run does not stop the launch
        return {"problems": [], "not_checked": f"{type(exc).__name__}: {exc}"}


def bench(
    connections: Connections,
    host_name: str,
    trainer_args: Sequence[str],
    *,
    warmup_steps: int = 5,
    steps: int = 30,
    gpu_type: str | None = None,
    record: bool = True,
    timeout_s: float = 3600.0,
) -> BenchResult:
    """Run ``python -m trainer bench`` with ``trainer_args`` on the host (in the foreground) and return its
    JSON result. With ``record``, a GPU measurement is stored in the history's bench results (the
    planner's calibration; ``recorded_id`` in the result): under ``gpu_type`` when given (the catalog
    GPU it stands for), else under the GPU the trainer ran on. A CPU measurement is only stored under
    an explicit ``gpu_type``; ``not_recorded`` says why nothing was stored."""
    args = command_lines.check_trainer_args(trainer_args)
    if warmup_steps < 0 or steps < 1:
        raise ValueError("bench needs at least 1 measured step and no negative warm-up")
    bench_args = [*args, "--bench-warmup-steps", str(warmup_steps), "--bench-steps", str(steps)]
    try:
        result = BenchResult(**connections.get(host_name).bench(bench_args, timeout_s))
    except (RuntimeError, TrainerPythonMissing) as exc:  # a failed bench; no Python that can run it
        raise RunError(f"{host_name}: {exc}") from exc
    device = result.get("device")
    where = gpu_type or (device if isinstance(device, str) and device != "cpu" else None)
    if not record:
        result["not_recorded"] = "not asked to record"
    elif where is None:
        result["not_recorded"] = "measured on the CPU, not a GPU"
    else:
        db = connect(connections.db_path)
        try:
            result["recorded_id"] = record_bench(
                db,
                gpu_type=where,
                model_name=command_lines.model_name(args) or "unknown",
                result=result,
                host=host_name,
            )
        finally:
            db.close()
        result["recorded_gpu_type"] = where
    return result
