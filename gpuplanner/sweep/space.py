"""The search space of a sweep: a TOML file of parameters, each mapped to a trainer flag.

    [params.lr]                 # flag --lr (underscores become dashes), or set flag = "--name"
    type = "float"              # float | int | categorical
    low = 1e-4
    high = 1e-2
    log = true                  # float/int: sample on a log scale (default false)

    [params.warmup_steps]
    type = "int"
    low = 0
    high = 8
    step = 2                    # int/float: a grid step (not with log)

    [params.micro_batch]
    type = "categorical"
    choices = [2, 4, 8]         # strings, numbers or booleans (true/false become --flag / --no-flag)

    [params.grad_checkpointing]
    type = "categorical"
    choices = ["none", "selective", "full"]   # the planner's names or the trainer's (trainer/settings.py)

Every problem is reported as one line naming the file and the parameter.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplanner.plan.setup import PlanInputError
from trainer.settings import checkpointing_to_trainer, precision_to_trainer

# Flags whose values the planner and the trainer spell differently: a choice in either spelling is passed in the
# trainer's (the settings contract's one vocabulary)
TRAINER_SPELLING = {"--grad-checkpointing": checkpointing_to_trainer, "--precision": precision_to_trainer}

TYPES = ("float", "int", "categorical")
# Flags the search itself sets on every trial (or the launcher does): a space may not search them.
RESERVED_FLAGS = (
    "--run-dir",
    "--price-per-gpu-hour",
    "--budget-usd",
    "--max-gpu-hours",
    "--max-steps",
    "--eval-every-steps",
    "--checkpoint-every-steps",
    "--resume",
    "--no-resume",
)


class SweepInputError(PlanInputError):
    """Bad input of a search, reported as one line that starts with what it is about (``label: message``)."""

    def __init__(self, label: str, message: str) -> None:
        ValueError.__init__(self, f"{label}: {message}")
        self.field = label.lstrip("-")
        self.message = message


class SpaceError(SweepInputError):
    """A search space that cannot be used; the message names the file and the parameter."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"--space: {path}", message)


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    flag: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this parameter's value."""
        if self.low is None or self.high is None:  # a categorical parameter (parse_param gives the others both)
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.type == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return trial.suggest_categorical(self.name, list(self.choices))

    def flags(self, value: Any) -> list[str]:
        """The trainer flags that set ``value`` (checkpointing and precision in the trainer's spelling)."""
        if self.flag in TRAINER_SPELLING:
            return [self.flag, TRAINER_SPELLING[self.flag](str(value))]
        if isinstance(value, bool):
            return [self.flag] if value else ["--no-" + self.flag.removeprefix("--")]
        if isinstance(value, float):
            return [self.flag, repr(value)]
        return [self.flag, str(value)]


@dataclass(frozen=True)
class Space:
    path: str
    params: tuple[Param, ...]

    def suggest(self, trial: Any) -> dict[str, Any]:
        return {p.name: p.suggest(trial) for p in self.params}

    def flags(self, values: dict[str, Any]) -> list[str]:
        out: list[str] = []
        for param in self.params:
            out += param.flags(values[param.name])
        return out


def load_space(path: str | Path) -> Space:
    """Read and check a search space file."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpaceError(where, f"cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpaceError(where, f"not valid TOML: {exc}") from None
    return parse_space(data, where)


def parse_space(data: dict[str, Any], where: str = "space") -> Space:
    unknown = sorted(set(data) - {"params"})
    if unknown:
        raise SpaceError(where, f"unknown top-level key(s) {', '.join(unknown)}; parameters go in [params.NAME] tables")
    params = data.get("params")
    if not isinstance(params, dict) or not params:
        raise SpaceError(where, "no [params.NAME] tables: the search space is empty, nothing to search")
    out = [_param(name, spec, where) for name, spec in params.items()]
    flags = [p.flag for p in out]
    for flag in flags:
        if flags.count(flag) > 1:
            raise SpaceError(where, f"two parameters set the trainer flag {flag}")
    return Space(where, tuple(out))


def _param(name: str, spec: Any, where: str) -> Param:
    def bad(message: str) -> SpaceError:
        return SpaceError(where, f"params.{name}: {message}")

    if not isinstance(spec, dict):
        raise bad("must be a table with a type")
    known = {"type", "low", "high", "log", "step", "choices", "flag"}
    extra = sorted(set(spec) - known)
    if extra:
        raise bad(f"unknown key(s) {', '.join(extra)} (allowed: {', '.join(sorted(known))})")
    kind = spec.get("type")
    if kind not in TYPES:
        raise bad(f"type must be one of {', '.join(TYPES)}, got {kind!r}")
    flag = spec.get("flag", "--" + name.replace("_", "-"))
    if not isinstance(flag, str) or not flag.startswith("--") or len(flag) < 3 or any(c.isspace() for c in flag):
        raise bad(f"flag must look like --name, got {flag!r}")
    if flag in RESERVED_FLAGS:
        raise bad(f"the search sets {flag} itself (or the launcher does); it cannot be searched")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("categorical needs a non-empty list of choices")
        if not all(isinstance(c, (str, int, float, bool)) for c in choices):
            raise bad("choices must be strings, numbers or booleans")
        if len(set(map(repr, choices))) != len(choices):
            raise bad("choices repeat a value")
        if flag in TRAINER_SPELLING:
            try:
                spelled = [TRAINER_SPELLING[flag](str(c)) for c in choices]
            except ValueError as exc:
                raise bad(str(exc)) from None
            if len(set(spelled)) != len(spelled):
                raise bad("choices repeat a setting (in the planner's and the trainer's spelling)")
        for key in ("low", "high", "log", "step"):
            if key in spec:
                raise bad(f"{key} does not apply to a categorical parameter")
        return Param(name, kind, flag, choices=tuple(choices))
    if "choices" in spec:
        raise bad(f"choices apply to categorical parameters, not {kind}")

    def bound(key: str) -> float:
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad(f"{key} must be a finite number, got {value!r}")
        if kind == "int" and value != int(value):
            raise bad(f"{key} of an int parameter must be a whole number, got {value!r}")
        return value

    low, high = bound("low"), bound("high")
    if not low < high:
        raise bad(f"low ({low}) must be below high ({high})")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise bad(f"log must be true or false, got {log!r}")
    if log and low <= 0:
        raise bad(f"a log scale needs low > 0, got {low}")
    step = spec.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not (math.isfinite(step) and step > 0):
            raise bad(f"step must be a positive number, got {step!r}")
        if log:
            raise bad("step and log cannot be combined")
        if kind == "int" and step != int(step):
            raise bad(f"step of an int parameter must be a whole number, got {step!r}")
    return Param(name, kind, flag, float(low), float(high), log, float(step) if step is not None else None)
