"""How a model is trained: method, precision, optimizer, batch, sequence, memory tricks, GPUs.

`TrainSetup` is the shared input of the memory estimator, the throughput model and the planner.
It validates itself on construction and raises :class:`PlanInputError` with a message that names the
field and what is allowed, so command-line flags and form fields can show it as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplanner.plan.engines import DEFAULT_ENGINE, ENGINE_NAMES
from trainer import settings as train_settings

# The planner's names; trainer/settings.py maps each to the trainer's spelling (one vocabulary, both ways)
METHODS = train_settings.METHODS
PRECISIONS = train_settings.PLANNER_PRECISIONS
OPTIMIZERS = ("adamw", "adamw-fused", "adamw-8bit", "sgd", "adafactor")
CHECKPOINTING = train_settings.PLANNER_CHECKPOINTING
ATTENTION = ("eager", "sdpa")
SHARDING = ("ddp", "zero2", "fsdp")
ENGINES = ENGINE_NAMES
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


class PlanInputError(ValueError):
    """An input the engine cannot plan with. ``field`` names the input (a CLI flag without dashes)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"--{field}: {message}")
        self.field = field
        self.message = message


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PlanInputError(name, f"{value!r} is not one of {', '.join(allowed)}")


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanInputError(name, f"must be a whole number of at least 1, got {value!r}")


@dataclass(frozen=True)
class TrainSetup:
    """One training configuration, per data-parallel replica unless said otherwise.

    ``lora_targets`` holds Hugging Face module names (``q_proj``, ``c_attn``, ``query`` ...) or the
    shorthands ``attention`` (every attention projection) and ``all-linear`` (every linear layer in
    the blocks); the model spec maps them to its own modules.
    """

    method: str = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    micro_batch: int = 1
    grad_accum: int = 1
    seq_len: int = 2048
    grad_checkpointing: str = "none"
    attention: str = "sdpa"
    gpus: int = 1
    sharding: str = "ddp"
    # fp32 matmuls on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32; PyTorch's default is off)
    tf32: bool = False
    # the training stack the run uses (gpuplanner/plan/engines.py): what memory and speed assume of it
    engine: str = DEFAULT_ENGINE
    # the model runs under torch.compile (TorchInductor): its element-wise ops are fused into generated
    # kernels, whatever the engine runs eagerly (step model: the fused element-wise traffic)
    compile: bool = False

    def __post_init__(self) -> None:
        _choice("method", self.method, METHODS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("grad-checkpointing", self.grad_checkpointing, CHECKPOINTING)
        _choice("attention", self.attention, ATTENTION)
        _choice("sharding", self.sharding, SHARDING)
        _choice("engine", self.engine, ENGINES)
        for name in ("lora_rank", "micro_batch", "grad_accum", "seq_len", "gpus"):
            _positive_int(name.replace("_", "-"), getattr(self, name))
        if self.method != "full" and not self.lora_targets:
            raise PlanInputError("lora-targets", "name at least one module for the adapters")
        if self.method == "qlora" and self.precision in ("fp32",):
            raise PlanInputError("precision", "QLoRA computes in 16-bit: use bf16-mixed, fp16-mixed or bf16")
        if not isinstance(self.tf32, bool):
            raise PlanInputError("tf32", f"must be true or false, got {self.tf32!r}")
        if self.tf32 and self.precision != "fp32":
            raise PlanInputError("tf32", "TF32 speeds up fp32 matmuls only: use it with --precision fp32")
        if not isinstance(self.compile, bool):
            raise PlanInputError("compile", f"must be true or false, got {self.compile!r}")

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step over all GPUs: micro-batch x accumulation x GPUs."""
        return self.micro_batch * self.grad_accum * self.gpus

    @property
    def uses_adapters(self) -> bool:
        return self.method in ("lora", "qlora")
