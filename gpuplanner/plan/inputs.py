"""The planner's inputs: one value per input of `gpuplanner plan` / `compare` and of the Plan form.

:class:`PlanInputs` is what both front ends build (the CLI from its flags, the form from its texts);
it holds the one set of ranges and exclusivity rules, refuses anything else with
:class:`PlanInputError` naming the input (its flag name without dashes), and turns into the engine's
:class:`PlanRequest` with :meth:`PlanInputs.to_request`. No argparse and no Qt here.

The upper limits are far above any real run (a 16M-token sequence, a million GPUs, 10T parameters,
10^15 tokens per epoch), so every figure the engine derives from them stays a finite number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from gpuplanner.plan import example
from gpuplanner.plan.engines import DEFAULT_ENGINE
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.model_spec import from_config_file, from_param_count, from_preset
from gpuplanner.plan.planner import DEFAULT_HEADROOM, MEMORY_SOURCES, PRICINGS, PlanRequest, PricingInputs
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import (
    ATTENTION,
    CHECKPOINTING,
    ENGINES,
    METHODS,
    OPTIMIZERS,
    PRECISIONS,
    SHARDING,
    PlanInputError,
    TrainSetup,
)
from gpuplanner.plan.storage_cost import (
    DATA_PROVIDERS,
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_RETENTION_DAYS,
    LOCATIONS,
    StorageRequest,
)

_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Range:
    """The values one numeric input may take: whole numbers or not, and its bounds."""

    whole: bool
    low: float
    high: float
    low_included: bool = True
    high_included: bool = True
    what: str = ""  # "a share", "minutes" ...: how the message names the value

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.whole and value != int(value):
            return False
        above = value >= self.low if self.low_included else value > self.low
        below = value <= self.high if self.high_included else value < self.high
        return above and below

    def describe(self) -> str:
        low = ("at least " if self.low_included else "above ") + _bound(self.low)
        high = ("at most " if self.high_included else "below ") + _bound(self.high)
        kind = "a whole number" if self.whole else (self.what or "a number")
        return f"must be {kind}, {low} and {high}"


def _bound(value: float) -> str:
    return f"{int(value):,}" if value == int(value) and value < 1e10 else f"{value:g}"


# Every numeric input, by flag name. Lower bounds are the physics (at least one GPU) or, for a positive
# quantity, a floor far below any real one (a checkpoint every 6 seconds, 0.001 tokens/s, a hundredth of
# a cent per GPU-hour); upper bounds are limits a real run never reaches. Within them every figure the
# engine derives (hours, cost, steps, interruptions) is finite.
RANGES: dict[str, Range] = {
    "params": Range(False, 1e5, 1e13, what="a parameter count"),
    "lora-rank": Range(True, 1, 65_536),
    "micro-batch": Range(True, 1, 65_536),
    "grad-accum": Range(True, 1, 1_000_000),
    "seq-len": Range(True, 1, 2**24),
    "gpus": Range(True, 1, 1_000_000),
    "samples": Range(True, 1, 1e13),
    "tokens": Range(True, 1, 1e15),
    "epochs": Range(False, 0.001, 10_000, what="a number of epochs"),
    "tokens-per-s": Range(False, 0.001, 1e12, what="a speed"),
    "samples-per-min": Range(False, 0.001, 1e12, what="a speed"),
    "mfu": Range(False, 0.001, 1, high_included=False, what="a share of the peak (0.4 = 40%)"),
    "headroom": Range(False, 0, 1, low_included=False, what="a share of the GPU memory (0.95 keeps 5% free)"),
    "price": Range(False, 0.0001, 100_000, what="a price in $ per GPU-hour"),
    "spot-price": Range(False, 0.0001, 100_000, what="a price in $ per GPU-hour"),
    "spot-discount": Range(False, 0, 1, high_included=False, what="a share (0.6 = 60% cheaper)"),
    "interruptions-per-hour": Range(False, 0, 1000, what="a rate per hour"),
    "mean-hours-between-interruptions": Range(False, 0.001, 1e6, what="a number of hours"),
    "spot-overhead-pct": Range(False, 0, 10_000, what="a percentage"),
    "restart-minutes": Range(False, 0, 100_000, what="a number of minutes"),
    "checkpoint-minutes": Range(False, 0.1, 100_000, what="a number of minutes"),
    "checkpoint-write-s": Range(False, 0, 1e6, what="a number of seconds"),
    "deadline-hours": Range(False, 0.001, 1e7, what="a number of hours"),
    "budget-usd": Range(False, 0.01, 1e12, what="an amount of dollars"),
    "max-gpu-hours": Range(False, 0.001, 1e9, what="a number of GPU-hours"),
    "run-overhead-pct": Range(False, 0, 1000, what="a percentage of the steady-state hours"),
    "dataset-gb": Range(False, 0.001, 1e9, what="a size in GB"),
    "checkpoints-kept": Range(True, 1, 100_000),
    "retention-days": Range(False, 0, 36_525, what="a number of days"),
}

# Inputs of which at most one may be given (the CLI's mutually exclusive flags); the error names the
# last one given.
EXCLUSIVE: tuple[tuple[str, ...], ...] = (
    ("model", "model-config", "params"),
    ("samples", "tokens"),
    ("tokens-per-s", "samples-per-min"),
    ("spot-discount", "spot-price"),
    ("interruptions-per-hour", "mean-hours-between-interruptions", "spot-overhead-pct"),
)

CHOICES: dict[str, tuple[str, ...]] = {
    "method": METHODS,
    "precision": PRECISIONS,
    "optimizer": OPTIMIZERS,
    "grad-checkpointing": CHECKPOINTING,
    "attention": ATTENTION,
    "sharding": SHARDING,
    "engine": ENGINES,
    "pricing": PRICINGS,
    "memory": MEMORY_SOURCES,
    "data-location": LOCATIONS,
    "data-provider": DATA_PROVIDERS,
}

NAMES = ("model", "model-config", "gpu")  # free-text inputs: None (not given) or a non-empty name


def parse_amount(field: str, text: str) -> float:
    """A finite number with an optional k/M/B/T suffix: ``7B`` -> 7e9, ``100k`` -> 1e5."""
    if not isinstance(text, str):
        raise PlanInputError(field, f"expected a number, got {text!r}")
    cleaned = text.strip().replace("_", "").replace(",", "")
    if not cleaned.isascii():  # float() reads "١" (Arabic-Indic one) as 1: a typed price must be what it shows
        raise PlanInputError(field, f"expected a number written with the digits 0-9, got {text!r}")
    scale = 1.0
    if cleaned and cleaned[-1].lower() in _SUFFIXES:
        scale = _SUFFIXES[cleaned[-1].lower()]
        cleaned = cleaned[:-1]
    try:
        value = float(cleaned) * scale
    except (ValueError, OverflowError):
        raise PlanInputError(field, f"expected a number (suffixes k, M, B, T allowed), got {text!r}") from None
    if not math.isfinite(value):
        raise PlanInputError(field, f"expected a finite number, got {text!r}")
    return value


def parse_value(field: str, text: str) -> int | float:
    """The value of the numeric input ``field`` (a flag name) typed as ``text``, checked against its range."""
    value = parse_amount(field, text)
    check_range(field, value, text)
    return int(value) if RANGES[field].whole else value


def check_range(field: str, value: Any, shown: Any = None) -> None:
    rule = RANGES[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanInputError(field, f"expected a number, got {value!r}")
    try:
        admitted = rule.admits(float(value))
    except OverflowError:  # an int beyond float range
        admitted = False
    if not admitted:
        raise PlanInputError(field, f"{rule.describe()}, got {shown if shown is not None else value!r}")


def split_gpu_count(text: str) -> tuple[str, int]:
    """``H100:8`` (SkyPilot's and dstack's way to ask for GPUs) as ``("H100", 8)``; the count is checked as
    ``--gpus`` is. :class:`PlanInputError` names ``gpu`` when the text is not ``NAME:COUNT``."""
    name, _, count_text = text.rpartition(":")
    if not name.strip() or not count_text.strip():
        raise PlanInputError("gpu", f"expected NAME or NAME:COUNT (for example H100:8), got {text!r}")
    if not count_text.strip().isdigit() or not count_text.strip().isascii():
        raise PlanInputError("gpu", f"the count after ':' must be a whole number of GPUs, got {count_text!r}")
    count = int(count_text)
    if not RANGES["gpus"].admits(count):
        raise PlanInputError("gpu", f"the count after ':' is GPUs: {RANGES['gpus'].describe()}, got {count_text!r}")
    return name.strip(), count


def gpu_and_count(gpu: str | None, gpus: int | None) -> tuple[str | None, int | None]:
    """``--gpu NAME[:N]`` beside ``--gpus N``: the GPU's name and count, which must agree (a conflict is
    one :class:`PlanInputError` naming ``gpu``); ``gpus`` unchanged when ``gpu`` has no count."""
    if gpu is None or ":" not in gpu:
        return gpu, gpus
    name, count = split_gpu_count(gpu)
    if gpus is not None and gpus != count:
        raise PlanInputError("gpu", f"{gpu!r} says {count} GPUs but --gpus says {gpus}; give one")
    return name, count


def split_targets(text: str) -> tuple[str, ...]:
    """LoRA targets typed as comma-separated names."""
    return tuple(t.strip() for t in str(text).split(",") if t.strip())


def _attr(field: str) -> str:
    return field.replace("-", "_")


@dataclass(frozen=True)
class PlanInputs:
    """Every planner input, as given (None: not given). Validates itself on construction."""

    model: str | None = None
    model_config: str | None = None
    params: float | None = None
    method: str = example.METHOD
    lora_rank: int = example.LORA_RANK
    lora_targets: tuple[str, ...] = example.LORA_TARGETS
    precision: str = example.PRECISION
    optimizer: str = example.OPTIMIZER
    micro_batch: int = example.MICRO_BATCH
    grad_accum: int = example.GRAD_ACCUM
    seq_len: int = example.SEQ_LEN
    grad_checkpointing: str = example.GRAD_CHECKPOINTING
    attention: str = example.ATTENTION
    gpu: str | None = None
    gpus: int | None = None
    sharding: str = "ddp"
    tf32: bool = False
    engine: str = DEFAULT_ENGINE
    compile: bool = False
    mfu: float | None = None
    headroom: float = DEFAULT_HEADROOM
    samples: int | None = None
    tokens: int | None = None
    epochs: float = 1.0
    tokens_per_s: float | None = None
    samples_per_min: float | None = None
    price: float | None = None
    spot_price: float | None = None
    spot_discount: float | None = None
    interruptions_per_hour: float | None = None
    mean_hours_between_interruptions: float | None = None
    spot_overhead_pct: float | None = None
    restart_minutes: float = 10.0
    checkpoint_minutes: float = 30.0
    checkpoint_write_s: float | None = None
    pricing: str = "on-demand"
    deadline_hours: float | None = None
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    run_overhead_pct: float | None = None
    memory: str = "formula"
    dataset_gb: float | None = None
    data_location: str = "same-region"
    data_provider: str = "aws"
    checkpoints_kept: int = DEFAULT_CHECKPOINTS_KEPT
    retention_days: float = DEFAULT_RETENTION_DAYS

    def __post_init__(self) -> None:
        if isinstance(self.gpu, str) and ":" in self.gpu:
            name, count = gpu_and_count(self.gpu, self.gpus)
            object.__setattr__(self, "gpu", name)  # frozen: normalised once, here
            object.__setattr__(self, "gpus", count)
        for field in NAMES:
            value = getattr(self, _attr(field))
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise PlanInputError(field, f"needs a name, got {value!r}")
        for field, allowed in CHOICES.items():
            value = getattr(self, _attr(field))
            if value not in allowed:
                raise PlanInputError(field, f"{value!r} is not one of {', '.join(allowed)}")
        optional = {f.name for f in fields(self) if f.default is None}
        for field in RANGES:
            value = getattr(self, _attr(field))
            if value is None:
                if _attr(field) not in optional:
                    raise PlanInputError(field, "needs a value")
                continue
            check_range(field, value)
        targets = self.lora_targets
        if not isinstance(targets, tuple) or not all(isinstance(t, str) and t.strip() for t in targets):
            raise PlanInputError("lora-targets", f"expected module names, got {targets!r}")
        if self.method != "full" and not targets:
            raise PlanInputError("lora-targets", "name at least one module for the adapters")
        for group in EXCLUSIVE:
            given = [f for f in group if getattr(self, _attr(f)) is not None]
            if len(given) > 1:
                others = " or ".join(f"--{f}" for f in given[:-1])
                raise PlanInputError(given[-1], f"give either {others} or --{given[-1]}, not both")

    # ------------------------------------------------------------------------------- the request

    def model_spec(self) -> ModelSpec:
        if self.model_config is not None:
            try:
                return from_config_file(self.model_config)
            except PlanInputError:
                raise
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
                raise PlanInputError("model-config", f"cannot read this model config: {exc}") from None
        if self.params is not None:
            return from_param_count(int(self.params))
        return from_preset(self.model if self.model is not None else example.MODEL)

    def setup(self) -> TrainSetup:
        return TrainSetup(
            method=self.method,
            lora_rank=self.lora_rank,
            lora_targets=self.lora_targets,
            precision=self.precision,
            optimizer=self.optimizer,
            micro_batch=self.micro_batch,
            grad_accum=self.grad_accum,
            seq_len=self.seq_len,
            grad_checkpointing=self.grad_checkpointing,
            attention=self.attention,
            gpus=self.gpus or 1,
            sharding=self.sharding,
            tf32=self.tf32,
            engine=self.engine,
            compile=self.compile,
        )

    def to_request(self, *, default_gpu: str | None) -> PlanRequest:
        """The engine's request. ``default_gpu`` is planned when no GPU is named (``plan``: the example's
        GPU; ``compare``: None, every GPU); a ``price`` without a GPU plans without the catalog."""
        rate = self.interruptions_per_hour
        if self.mean_hours_between_interruptions is not None:
            rate = 1.0 / self.mean_hours_between_interruptions
        samples = self.samples if (self.samples is not None or self.tokens is not None) else example.SAMPLES
        gpu = self.gpu or (None if self.price is not None else default_gpu)
        return PlanRequest(
            model=self.model_spec(),
            setup=self.setup(),
            workload=Workload(
                samples=None if self.tokens is not None else samples, epochs=self.epochs, tokens=self.tokens
            ),
            gpu=gpu,
            pricing=PricingInputs(
                price=self.price,
                spot_price=self.spot_price,
                spot_discount=self.spot_discount,
                interruptions_per_hour=rate,
                restart_minutes=self.restart_minutes,
                checkpoint_minutes=self.checkpoint_minutes,
                checkpoint_write_s=self.checkpoint_write_s,
                spot_overhead_pct=self.spot_overhead_pct,
            ),
            pricing_mode=self.pricing,
            deadline_hours=self.deadline_hours,
            budget_usd=self.budget_usd,
            max_gpu_hours=self.max_gpu_hours,
            run_overhead_pct=self.run_overhead_pct,
            mfu=self.mfu,
            tokens_per_s=self.tokens_per_s,
            samples_per_min=self.samples_per_min,
            headroom=self.headroom,
            memory_source=self.memory,
            storage=self.storage_request(),
        )

    def storage_request(self) -> StorageRequest | None:
        """The storage and transfer inputs; None without a dataset size (the plan is then compute only)."""
        if self.dataset_gb is None:
            return None
        return StorageRequest(
            dataset_gb=self.dataset_gb,
            data_location=self.data_location,
            data_provider=self.data_provider,
            checkpoints_kept=self.checkpoints_kept,
            retention_days=self.retention_days,
        )


INPUT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PlanInputs))


def inputs_document(request: PlanRequest) -> dict[str, Any]:
    """The ``inputs`` of the plan and comparison JSON documents (the CLI's flag names, with underscores)."""
    setup, workload, pricing = request.setup, request.workload, request.pricing
    return {
        "model": request.model.name,
        "params": request.model.n_params,
        "active_params": request.model.active_params,
        "experts": request.model.num_experts or None,
        "experts_per_token": request.model.experts_per_token or None,
        "model_source": request.model.source,
        "method": setup.method,
        "lora_rank": setup.lora_rank if setup.uses_adapters else None,
        "lora_targets": list(setup.lora_targets) if setup.uses_adapters else None,
        "precision": setup.precision,
        "optimizer": setup.optimizer,
        "micro_batch": setup.micro_batch,
        "grad_accum": setup.grad_accum,
        "seq_len": setup.seq_len,
        "grad_checkpointing": setup.grad_checkpointing,
        "attention": setup.attention,
        "gpu": request.gpu,
        "gpus": setup.gpus,
        "sharding": setup.sharding,
        "tf32": setup.tf32,
        "engine": setup.engine,
        "compile": setup.compile,
        "samples": workload.samples,
        "tokens": workload.tokens,
        "epochs": workload.epochs,
        "tokens_per_s": request.tokens_per_s,
        "samples_per_min": request.samples_per_min,
        "mfu": request.mfu,
        "price": pricing.price,
        "spot_price": pricing.spot_price,
        "spot_discount": pricing.spot_discount,
        "interruptions_per_hour": pricing.interruptions_per_hour,
        "restart_minutes": pricing.restart_minutes,
        "checkpoint_minutes": pricing.checkpoint_minutes,
        "checkpoint_write_s": pricing.checkpoint_write_s,
        "spot_overhead_pct": pricing.spot_overhead_pct,
        "pricing": request.pricing_mode,
        "deadline_hours": request.deadline_hours,
        "budget_usd": request.budget_usd,
        "max_gpu_hours": request.max_gpu_hours,
        "run_overhead_pct": request.run_overhead_pct,
        "headroom": request.headroom,
        **_storage_inputs(request),
    }


def _storage_inputs(request: PlanRequest) -> dict[str, Any]:
    """The storage inputs, present only when a dataset size was given (a compute-only plan is unchanged)."""
    storage = request.storage
    if storage is None:
        return {}
    return {
        "dataset_gb": storage.dataset_gb,
        "data_location": storage.data_location,
        "data_provider": storage.data_provider,
        "checkpoints_kept": storage.checkpoints_kept,
        "retention_days": storage.retention_days,
    }
