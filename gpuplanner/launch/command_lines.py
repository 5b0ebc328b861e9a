"""The trainer command line a node runs (as arguments to the host's Python).

One GPU: ``python -m trainer train ...``. Several GPUs on one host: ``torchrun --standalone
--nproc-per-node N``. Several hosts: ``torchrun`` on each with the same c10d rendezvous
(``--nnodes``, ``--node-rank``, ``--rdzv-endpoint first-host:port``, ``--rdzv-id``); the first node
hosts the rendezvous store (``is_host=1``). The launcher adds ``--run-dir``, the host's price and the
budget; the user's flags must not set them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, cast

from trainer.protocol import config_model_name
from trainer.reports import BenchReport
from trainer.settings import TrainSettings

MANAGED_FLAGS = ("--run-dir", "--price-per-gpu-hour", "--budget-usd")


def check_trainer_args(args: Sequence[str]) -> list[str]:
    """The user's trainer flags; ValueError if one the launcher sets is among them."""
    out = [str(a) for a in args]
    for arg in out:
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            raise ValueError(f"{flag} is set by the launcher (run dir, host price, budget); leave it out")
    if out[:1] == ["train"]:  # tolerate "train" given as the first word
        out = out[1:]
    return out


def model_name(args: Sequence[str]) -> str | None:
    """The model a trainer command line trains, named as the history names it (``--flag value`` or
    ``--flag=value``): read by the shared settings contract, or, for flags it does not parse (``trainer
    bench``'s), found by name."""
    try:
        return TrainSettings.from_argv(args).model_name
    except ValueError:
        pass
    args = list(args)
    for flag in ("--model", "--model-config"):
        value = next((a.split("=", 1)[1] for a in args if a.startswith(flag + "=")), None)
        if value is None and flag in args and args.index(flag) + 1 < len(args):
            value = args[args.index(flag) + 1]
        if value:
            return config_model_name(value) if flag == "--model-config" else value
    return None


def check_user_command(
    command: Sequence[str] | None, trainer_flags: Sequence[str], workdir: str | None, max_gpu_hours: float | None
) -> list[str]:
    """The user's own command (empty: the bundled trainer runs); ValueError naming what is wrong."""
    out = [str(a) for a in command or ()]
    if not out:
        if workdir is not None:
            raise ValueError(
                "a working directory is for a command of your own; the bundled trainer runs in its run dir"
            )
        if max_gpu_hours is not None:
            raise ValueError("for the bundled trainer give --max-gpu-hours among the trainer flags")
        return out
    if list(trainer_flags):
        raise ValueError("give either the bundled trainer's flags or a command of your own, not both")
    if not out[0].strip():
        raise ValueError("the command is empty")
    if max_gpu_hours is not None and not (math.isfinite(max_gpu_hours) and max_gpu_hours > 0):
        raise ValueError(f"max GPU-hours: a positive number, not {max_gpu_hours!r}")
    return out


def plan_facts(document: dict[str, Any] | None) -> dict[str, object]:
    """What a run of the user's own command is calibrated and diagnosed under, from the plan it was launched
    against (``inputs`` of ``plan --json``): the model, method (LoRA rank), precision, checkpointing, sequence
    length, micro-batch and accumulation, as trainer config entries (the settings contract's spelling, which
    the history reads for every run)."""
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(inputs, dict):
        return {}
    keys = ("model", "method", "lora_rank", "precision", "grad_checkpointing", "seq_len", "micro_batch", "grad_accum")
    given = {k: inputs[k] for k in keys if inputs.get(k) is not None}
    try:
        return TrainSettings.from_planner(**given).to_config()
    except (ValueError, TypeError):  # a plan document from elsewhere: nothing rather than wrong facts
        return {}


def monitor_args(
    command: Sequence[str],
    run_dir: str,
    *,
    price: float | None,
    gpus: int,
    budget_usd: float | None,
    max_gpu_hours: float | None,
    workdir: str | None,
    nodes: int = 1,
    node_rank: int | None = 0,
    node_name: str | None = None,
) -> list[str]:
    """Python arguments of the monitor that runs the user's ``command`` (:mod:`trainer.command_monitor`).
    ``node_rank`` None: the monitor reads it on the node (``$SLURM_NODEID``)."""
    args = ["-m", "trainer", "exec", "--run-dir", run_dir, "--gpus", str(int(gpus)), "--nodes", str(int(nodes))]
    if node_rank is not None:
        args += ["--node-rank", str(int(node_rank))]
    if node_name:
        args += ["--node-name", node_name]
    if price is not None:
        args += ["--price-per-gpu-hour", repr(float(price))]
    if budget_usd is not None:
        args += ["--budget-usd", repr(float(budget_usd))]
    if max_gpu_hours is not None:
        args += ["--max-gpu-hours", repr(float(max_gpu_hours))]
    if workdir:
        args += ["--cwd", workdir]
    return [*args, "--", *command]


def node_env(*, nnodes: int, node_rank: int, rdzv_host: str | None, rdzv_port: int | None, gpus: int) -> dict[str, str]:
    """Variables a user's command gets on each node of the job, to start ``torchrun`` or ``accelerate``
    with (``GPUPLANNER_NNODES``, ``GPUPLANNER_NODE_RANK``, ``GPUPLANNER_GPUS_PER_NODE``, and on several
    nodes ``GPUPLANNER_RDZV_HOST``/``GPUPLANNER_RDZV_PORT``, the first node's address and a free port)."""
    env = {
        "GPUPLANNER_NNODES": str(nnodes),
        "GPUPLANNER_NODE_RANK": str(node_rank),
        "GPUPLANNER_GPUS_PER_NODE": str(gpus),
    }
    if nnodes > 1 and rdzv_host and rdzv_port:
        env.update({"GPUPLANNER_RDZV_HOST": rdzv_host, "GPUPLANNER_RDZV_PORT": str(rdzv_port)})
    return env


def trainer_args(user_args: Sequence[str], run_dir: str, price: float | None, budget_usd: float | None) -> list[str]:
    args = ["-m", "trainer", "train", *user_args, "--run-dir", run_dir]
    if price is not None:
        args += ["--price-per-gpu-hour", repr(float(price))]
    if budget_usd is not None:
        args += ["--budget-usd", repr(float(budget_usd))]
    return args


def node_command(
    train_args: list[str],
    *,
    gpus: int,
    nnodes: int,
    node_rank: int,
    rdzv_host: str | None,
    rdzv_port: int | None,
    run_id: int,
) -> list[str]:
    """Python arguments for node ``node_rank`` of ``nnodes``, each with ``gpus`` processes."""
    if nnodes > 1:
        return [
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nnodes),
            "--node-rank",
            str(node_rank),
            "--nproc-per-node",
            str(gpus),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{rdzv_host}:{rdzv_port}",
            "--rdzv-id",
            f"gpuplanner-run-{run_id}",
            "--rdzv-conf",
            f"is_host={1 if node_rank == 0 else 0}",
            "--max-restarts",
            "0",
            *train_args,
        ]
    if gpus > 1:
        return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus), *train_args]
    return train_args


def bench_result(status: int, stdout: str, stderr: str, limit_s: float | None = None) -> BenchReport:
    """The JSON document ``python -m trainer bench`` printed, or RuntimeError with its last error lines.
    ``limit_s``: the bench ran under the host's ``timeout`` with this limit (exit 124/137: it ran out)."""
    if limit_s is not None and status in (124, 137):
        how = "stopped" if status == 124 else "killed after ignoring SIGTERM for 30 s"
        raise RuntimeError(f"trainer bench did not finish within {limit_s:.0f} s ({how} on the host)")
    if limit_s is not None and status in (126, 127) and "timeout" in stderr:
        raise RuntimeError("the host has no `timeout` command (GNU coreutils), which bounds the bench: install it")
    if status == 0:
        start = 0 if stdout.startswith("{") else stdout.rfind("\n{") + 1  # after anything a login shell printed
        try:
            result = json.loads(stdout[start:]) if start >= 0 else None
        except ValueError:
            result = None
        if isinstance(result, dict):
            return cast(BenchReport, result)  # the document trainer/bench.py printed
        tail = " | ".join(line.strip() for line in stdout.strip().splitlines()[-3:]) or "nothing"
        raise RuntimeError(f"trainer bench printed no JSON result (it printed: {tail})")
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    own = [line.removeprefix("trainer: ") for line in lines if line.startswith("trainer: ")]  # not tracebacks
    reason = " | ".join(own[-2:] if own else lines[-3:]) or "no output"
    raise RuntimeError(f"trainer bench failed (exit {status}): {reason}")
