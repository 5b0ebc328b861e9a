"""What a launch is, without Qt: :class:`LaunchRequest` (what the Runs pane hands ``RunManager.launch``),
:func:`trainer_args` (the launch dialog's values as ``python -m trainer train`` flags, docs/trainer.md,
through the settings contract), :func:`parse_env` and :func:`parse_tags_text` (the dialog's text boxes)
and :func:`demo_dir` (the shipped demo's files)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplanner.history.tags import parse_tags
from gpuplanner.resources import resources_dir
from trainer.settings import TrainSettings


def demo_dir() -> Path:
    """The shipped demo files (tiny GPT-2 config and corpus), installed or from a checkout."""
    return resources_dir() / "demo"


@dataclass
class LaunchRequest:
    """What the Runs pane passes to ``RunManager.launch`` (plus what it shows next to the run)."""

    host_name: str
    trainer_args: list[str]
    name: str | None = None
    plan_id: int | None = None
    gpus: int = 1
    auto_resume: bool = False
    fallback_hosts: list[str] = field(default_factory=list)
    max_restarts: int = 3
    budget_usd: float | None = None
    price_per_gpu_hour: float | None = None
    planned_cost_usd: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)  # a command of the user's own (empty: the bundled trainer)
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def parse_tags_text(text: str) -> dict[str, str]:
    """The Tags field: ``key=value`` pairs separated by spaces or commas (the rules of ``--tag``)."""
    return parse_tags(t for t in re.split(r"[\s,]+", text.strip()) if t)


def parse_env(text: str) -> dict[str, str]:
    """``NAME=VALUE`` lines (blank lines and ``#`` comments skipped); ValueError naming the bad line."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit() or not name.isascii():
            raise ValueError(f"line {number}: NAME=VALUE with a name of letters, digits and _, not {line!r}")
        env[name] = value
    return env


def trainer_args(values: dict[str, Any]) -> list[str]:
    """Trainer flags for the form's values (keys as in the Plan pane's settings, planner spellings, plus the
    dialog's own: ``data`` (list of paths), ``max_steps``, ``device``, ``checkpoint_every_minutes``,
    ``extra``), without the flags the launcher sets itself (run dir, the host's price, the budget). The
    planner -> trainer mapping is the settings contract's (:class:`trainer.settings.TrainSettings`)."""

    def whole(key: str) -> int | None:
        return int(values[key]) if values.get(key) else None

    method = str(values.get("method") or "full")
    rank = int(values.get("lora_rank") or 0)
    minutes = values.get("checkpoint_every_minutes")
    settings = TrainSettings.from_planner(
        model_config=str(values["model_config"]) if values.get("model_config") else None,
        model=str(values["model"]) if values.get("model") and not values.get("model_config") else None,
        data=tuple(str(p) for p in values.get("data") or ()),
        method=method if method in ("lora", "qlora") and rank > 0 else "full",
        lora_rank=rank or None,
        precision=str(values.get("precision") or "auto"),
        grad_checkpointing=str(values.get("grad_checkpointing") or "none"),
        micro_batch=whole("micro_batch"),
        grad_accum=whole("grad_accum"),
        seq_len=whole("seq_len"),
        epochs=whole("epochs"),
        max_steps=whole("max_steps") if int(values.get("max_steps") or 0) > 0 else None,
        device=str(values["device"]) if values.get("device") and values["device"] != "auto" else None,
        checkpoint_every_minutes=float(minutes) if minutes is not None else None,
    )
    args = settings.to_argv()
    extra = values.get("extra")
    if extra:
        args += shlex.split(extra) if isinstance(extra, str) else [str(a) for a in extra]
    return args
