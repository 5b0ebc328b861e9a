"""The trainer settings a plan and a launch share, and the one planner <-> trainer vocabulary.

:class:`TrainSettings` is what the planner plans and the launcher starts: the model, the data, the
training method (full, LoRA, QLoRA with its rank and targets), precision, gradient checkpointing, the
batch shape, the sequence length, the schedule's length and the speed switches. ``to_argv()`` gives the
``python -m trainer train`` flags and ``from_argv()`` reads them back with the trainer's own parser
(:func:`trainer.config.add_arguments`), so the flags have one definition; ``from_config()`` reads the
resolved config the trainer records in its ``run_start`` record (and older history rows).

Settings are kept in the trainer's spelling. The planner spells two of them differently; these tables
are the only mapping between the two, lossless both ways:

========================  ===============  =============
setting                   planner          trainer
========================  ===============  =============
gradient checkpointing    none             off
                          full             every
                          every-other      every-other
                          selective        selective
precision                 fp32             fp32
                          fp16-mixed       fp16-mixed (``fp16`` is the same setting)
                          bf16-mixed       bf16-mixed
                          bf16             bf16
                          (none: resolved) auto
========================  ===============  =============

Standard library only (the desktop side imports it without torch), and nothing of ``gpuplanner``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

METHODS = ("full", "lora", "qlora")
# --chat-template: auto = the tokenizer's own template; chatml = the named fallback (trainer/chat.py)
CHAT_TEMPLATES = ("auto", "chatml")

# (planner, trainer): the one mapping of each setting the two sides spell differently
CHECKPOINTING_PAIRS: tuple[tuple[str, str], ...] = (
    ("none", "off"),
    ("full", "every"),
    ("every-other", "every-other"),
    ("selective", "selective"),
)
PRECISION_PAIRS: tuple[tuple[str, str], ...] = (
    ("fp32", "fp32"),
    ("fp16-mixed", "fp16-mixed"),
    ("bf16-mixed", "bf16-mixed"),
    ("bf16", "bf16"),
)
PLANNER_CHECKPOINTING = tuple(p for p, _ in CHECKPOINTING_PAIRS)
TRAINER_CHECKPOINTING = tuple(t for _, t in CHECKPOINTING_PAIRS)
PLANNER_PRECISIONS = tuple(p for p, _ in PRECISION_PAIRS)
# auto: the trainer picks (bf16-mixed where supported, else fp16-mixed on CUDA, fp32 on CPU); fp16: fp16-mixed
TRAINER_PRECISIONS = ("auto", "bf16-mixed", "fp16-mixed", "bf16", "fp16", "fp32")
PRECISION_ALIASES = {"fp16": "fp16-mixed", "float32": "fp32"}

_TO_TRAINER_CKPT = dict(CHECKPOINTING_PAIRS)
_TO_PLANNER_CKPT = {t: p for p, t in CHECKPOINTING_PAIRS}
_TO_PLANNER_PRECISION = {t: p for p, t in PRECISION_PAIRS}


def checkpointing_to_trainer(value: str) -> str:
    """The trainer's ``--grad-checkpointing`` for a planner value (a trainer value is returned as is)."""
    if value in _TO_TRAINER_CKPT:
        return _TO_TRAINER_CKPT[value]
    if value in _TO_PLANNER_CKPT:
        return value
    raise ValueError(f"gradient checkpointing {value!r} is not one of {', '.join(PLANNER_CHECKPOINTING)}")


def checkpointing_to_planner(value: str) -> str:
    """The planner's name for a trainer ``--grad-checkpointing`` value (a planner value is returned as is)."""
    if value in _TO_PLANNER_CKPT:
        return _TO_PLANNER_CKPT[value]
    if value in _TO_TRAINER_CKPT:
        return value
    raise ValueError(f"gradient checkpointing {value!r} is not one of {', '.join(TRAINER_CHECKPOINTING)}")


def precision_to_trainer(value: str) -> str:
    """The trainer's ``--precision`` for a planner precision (the names are the trainer's too)."""
    value = PRECISION_ALIASES.get(value, value)
    if value in _TO_PLANNER_PRECISION or value == "auto":
        return value
    raise ValueError(f"precision {value!r} is not one of {', '.join(PLANNER_PRECISIONS)}")


def precision_to_planner(value: str) -> str | None:
    """The planner's precision for a trainer one; None for ``auto`` (the trainer resolves it on the device:
    its ``run_start`` record's ``precision`` names the result)."""
    value = PRECISION_ALIASES.get(value.strip().lower(), value.strip().lower())
    if value == "auto":
        return None
    if value in _TO_PLANNER_PRECISION:
        return _TO_PLANNER_PRECISION[value]
    raise ValueError(f"precision {value!r} is not one of {', '.join(TRAINER_PRECISIONS)}")


@dataclass(frozen=True)
class TrainSettings:
    """Trainer settings in the trainer's spelling. None (and an empty tuple) means "the trainer's default":
    ``to_argv()`` leaves it out. ``method`` is full, lora (``lora_rank`` adapters) or qlora (the same on a
    4-bit base); ``lora_rank`` is only passed with an adapter method."""

    model: str | None = None
    model_config: str | None = None
    data: tuple[str, ...] = ()
    eval_data: tuple[str, ...] = ()
    chat_template: str | None = None
    train_on_prompt: bool | None = None
    method: str = "full"
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ()
    precision: str | None = None
    grad_checkpointing: str | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    seq_len: int | None = None
    epochs: int | None = None
    max_steps: int | None = None
    lr: float | None = None
    compile: bool | None = None
    attn_implementation: str | None = None
    tf32: str | None = None
    fsdp: bool | None = None
    device: str | None = None
    checkpoint_every_minutes: float | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is not one of {', '.join(METHODS)}")
        if self.method != "full" and not (self.lora_rank and self.lora_rank > 0):
            raise ValueError(f"method {self.method}: give a LoRA rank of at least 1")
        if self.chat_template is not None and self.chat_template not in CHAT_TEMPLATES:
            raise ValueError(f"chat template {self.chat_template!r} is not one of {', '.join(CHAT_TEMPLATES)}")
        if self.precision is not None and self.precision not in TRAINER_PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(TRAINER_PRECISIONS)}")
        if self.grad_checkpointing is not None and self.grad_checkpointing not in TRAINER_CHECKPOINTING:
            raise ValueError(
                f"gradient checkpointing {self.grad_checkpointing!r} is not one of {', '.join(TRAINER_CHECKPOINTING)}"
            )

    # -- the planner's view ------------------------------------------------------------------------------
    @classmethod
    def from_planner(
        cls,
        *,
        method: str = "full",
        lora_rank: int | None = None,
        precision: str | None = None,
        grad_checkpointing: str | None = None,
        **rest: object,
    ) -> TrainSettings:
        """Settings from planner spellings (``PlanInputs``/``TrainSetup`` names and values); ``rest`` are
        fields spelled alike (model, data, micro_batch, seq_len, ...). A precision of ``auto`` or None, and
        checkpointing ``none``, leave the trainer's default."""
        gc = checkpointing_to_trainer(grad_checkpointing) if grad_checkpointing else None
        prec = precision_to_trainer(precision) if precision else None
        values = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in rest.items()}
        return cls(
            method=method,
            lora_rank=lora_rank if method != "full" else None,
            precision=None if prec == "auto" else prec,
            grad_checkpointing=None if gc == "off" else gc,
            **values,  # type: ignore[arg-type]
        )

    @property
    def planner_checkpointing(self) -> str:
        return checkpointing_to_planner(self.grad_checkpointing or "off")

    @property
    def planner_precision(self) -> str | None:
        """None: ``auto`` (the device decides; see ``run_start``'s ``precision``)."""
        return precision_to_planner(self.precision or "auto")

    @property
    def model_name(self) -> str | None:
        """The model as the history and the planner name it (a config file by its folder or file name)."""
        if self.model:
            return self.model
        if self.model_config:
            from trainer.protocol import config_model_name

            return config_model_name(self.model_config)
        return None

    # -- the trainer's flags -----------------------------------------------------------------------------
    def to_argv(self) -> list[str]:
        """``python -m trainer train`` flags for the settings that are set (defaults left out)."""
        out: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "method":
                if value == "qlora":
                    out.append("--qlora")
                continue
            if f.name == "lora_rank" and self.method == "full":
                continue
            if value is None or value == ():
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, tuple):
                for item in value:
                    out += [flag, str(item)]
            elif isinstance(value, float):  # whole numbers without ".0", others exactly (repr)
                out += [flag, str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)]
            else:
                out += [flag, str(value)]
        return out

    def to_config(self) -> dict[str, object]:
        """The settings that are set as trainer config entries (``run_start``'s ``config`` keys: the method as
        ``lora_rank`` and ``qlora``); ``from_config()`` reads them back."""
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "method" or value is None or value == ():
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        if self.method != "full":
            out["qlora"] = self.method == "qlora"
        return out

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> TrainSettings:
        """The shared settings in trainer flags (parsed by the trainer's own parser; its other flags are
        allowed and left out). ValueError for a flag the trainer does not know or a bad value."""
        from trainer import config as trainer_config

        parser = _Parser(add_help=False)
        trainer_config.add_arguments(parser)
        args = list(argv)
        if args[:1] == ["train"]:
            args = args[1:]
        values = vars(parser.parse_args(args))
        values.pop("config", None)
        return cls.from_config(values)

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> TrainSettings:
        """The shared settings in a trainer config (``run_start``'s ``config``, ``config.resolved.json``, or
        parsed flags). History rows written before the settings contract may hold a ``method`` key and
        planner spellings (a user command's plan facts): they are read too. Values of the wrong type are
        left out rather than raising (records come from other machines)."""
        kwargs: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            if f.name in ("method", "lora_rank"):
                continue
            value = config.get(f.name)
            if f.name in ("data", "eval_data", "lora_targets"):
                items = [value] if isinstance(value, str) else value
                if isinstance(items, (list, tuple)):
                    kwargs[f.name] = tuple(t for item in items for t in str(item).split(",") if t)
                continue
            kind = str(f.type)
            if value is None or (isinstance(value, bool) and "bool" not in kind):
                continue
            if "bool" in kind and isinstance(value, bool):
                kwargs[f.name] = value
            elif "int" in kind and isinstance(value, int):
                kwargs[f.name] = value
            elif "float" in kind and isinstance(value, (int, float)):
                kwargs[f.name] = float(value)
            elif "str" in kind and isinstance(value, str):
                kwargs[f.name] = value
        gc = kwargs.get("grad_checkpointing")
        if isinstance(gc, str):
            kwargs["grad_checkpointing"] = checkpointing_to_trainer(gc) if gc in _TO_TRAINER_CKPT else gc
            if kwargs["grad_checkpointing"] not in TRAINER_CHECKPOINTING:
                del kwargs["grad_checkpointing"]
        if isinstance(kwargs.get("chat_template"), str) and kwargs["chat_template"] not in CHAT_TEMPLATES:
            del kwargs["chat_template"]
        if isinstance(kwargs.get("precision"), str) and kwargs["precision"] not in TRAINER_PRECISIONS:
            del kwargs["precision"]
        rank = config.get("lora_rank")
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else None
        method = config.get("method")
        if isinstance(method, str) and method.strip().lower() in METHODS:  # an older row's plan facts
            method = method.strip().lower()
        elif rank is not None:
            method = "qlora" if config.get("qlora") is True else "lora"
        else:
            method = "full"
        if method != "full" and rank is None:
            rank = 16  # the planner's default rank, for plan facts that did not name one
        return cls(method=method, lora_rank=rank if method != "full" else None, **kwargs)  # type: ignore[arg-type]


class _Parser(argparse.ArgumentParser):
    """The trainer's flags, raising ValueError instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(f"trainer flags: {message}")
