"""The planner form's fields: each input with its label, group, tooltip, default and choices, keyed by the
``gpuplanner plan`` flag it stands for, and the rules between them (keep-as-given choices, exclusive fields).
How their texts become a request is :mod:`gpuplanner.ui.plan.plan_inputs`. No Qt here."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplanner.app.plan_fields import PLAN_FIELDS
from gpuplanner.plan import example
from gpuplanner.plan.engines import DEFAULT_ENGINE
from gpuplanner.plan.inputs import EXCLUSIVE as INPUT_EXCLUSIVE
from gpuplanner.plan.inputs import RANGES
from gpuplanner.plan.model_spec import list_presets
from gpuplanner.plan.planner import DEFAULT_HEADROOM
from gpuplanner.plan.setup import ATTENTION, CHECKPOINTING, ENGINES, METHODS, OPTIMIZERS, PRECISIONS, SHARDING
from gpuplanner.plan.storage_cost import DATA_PROVIDERS, DEFAULT_CHECKPOINTS_KEPT, DEFAULT_RETENTION_DAYS, LOCATIONS

FIELD_HELP = {row.flag: row.help for row in PLAN_FIELDS}
MODEL_SOURCES = ("preset", "config.json", "parameter count")
MEMORY_SOURCES = ("formula", "trace")
CALIBRATION = ("use measured speeds", "ignore the history")
PRICING_MODES = ("on-demand", "spot")
DATA_UNITS = ("samples", "tokens")
_HELP = {row.flag: row.help for row in PLAN_FIELDS}  # the one help text of a planner input (app/plan_fields.py)


@dataclass(frozen=True)
class Field:
    """One input of the form: ``kind`` is "choice" (a combo box), "text" (a line edit) or "keep" (the check
    boxes of :data:`KEEP_CHOICES`, its text their names, comma-separated)."""

    key: str
    label: str
    group: str
    tooltip: str
    default: str = ""
    kind: str = "text"
    choices: tuple[str, ...] = ()
    optional: bool = False
    placeholder: str = ""

    @property
    def numeric(self) -> bool:
        """A number, parsed by the input layer (``gpuplanner.plan.inputs``) under its range."""
        return self.key in RANGES


GROUPS = (
    "Model and method",
    "Batch and sequence",
    "Data and epochs",
    "Hardware and pricing",
    "Spot",
    "Deadline and budget",
)

# The form's fields in its order. For a planner input the form shows the label, tooltip, group and choices of
# the shared table (gpuplanner/app/plan_fields.py, see ui/plan_form.py's shown_field), not the texts here.
FIELDS: tuple[Field, ...] = (
    # --- model and method
    Field(
        "model-source",
        "Model from",
        GROUPS[0],
        "Pick a preset, load a Hugging Face config.json (exact "
        "parameter count), or give a bare parameter count (a Llama-like shape of that size).",
        MODEL_SOURCES[0],
        "choice",
        MODEL_SOURCES,
    ),
    Field(
        "model",
        "Preset",
        GROUPS[0],
        "A model whose architecture ships with the app.",
        example.MODEL,
        "choice",
        tuple(list_presets()),
    ),
    Field(
        "model-config",
        "config.json",
        GROUPS[0],
        "Path of a Hugging Face config.json; nothing is downloaded.",
        placeholder="path/to/config.json",
    ),
    Field(
        "params",
        "Parameters",
        GROUPS[0],
        "Model size as a number with an optional suffix: 7B, 350M, 1.5e9.",
        "7B",
    ),
    Field(
        "method",
        "Method",
        GROUPS[0],
        "Full fine-tune trains every weight. LoRA freezes the model and trains "
        "small low-rank adapters; QLoRA also stores the frozen weights in 4 bits.",
        example.METHOD,
        "choice",
        METHODS,
    ),
    Field(
        "lora-rank",
        "LoRA rank",
        GROUPS[0],
        "Rank r of each adapter: it trains r x (in + out) parameters per adapted layer. 8-64 is usual.",
        str(example.LORA_RANK),
    ),
    Field(
        "lora-targets",
        "LoRA targets",
        GROUPS[0],
        "Comma-separated module names the adapters attach to (q_proj, v_proj ...), or `attention` / `all-linear`.",
        ",".join(example.LORA_TARGETS),
    ),
    Field(
        "precision",
        "Precision",
        GROUPS[0],
        "Mixed precision computes in 16 bits but keeps fp32 master weights "
        "and gradients; bf16 keeps everything in bf16. fp16 needs loss scaling.",
        example.PRECISION,
        "choice",
        PRECISIONS,
    ),
    Field(
        "tf32",
        "TF32 (fp32 only)",
        GROUPS[0],
        "With fp32 precision: run the matmuls on TF32 tensor cores (Ampere and newer, about 8x the plain "
        "fp32 rate). PyTorch leaves it off by default; GPUs without TF32 plan at the fp32 rate.",
        "off",
        "choice",
        ("off", "on"),
    ),
    Field(
        "optimizer",
        "Optimizer",
        GROUPS[0],
        "AdamW keeps two fp32 states per trained parameter (8 bytes); "
        "8-bit Adam about 2 bytes; SGD and Adafactor less.",
        example.OPTIMIZER,
        "choice",
        OPTIMIZERS,
    ),
    # --- batch and sequence
    Field(
        "micro-batch",
        "Micro-batch (sequences/GPU)",
        GROUPS[1],
        "Sequences each GPU processes in one forward and backward pass. Activation memory grows with it.",
        str(example.MICRO_BATCH),
    ),
    Field(
        "grad-accum",
        "Accumulation steps",
        GROUPS[1],
        "Micro-batches whose gradients are summed before one "
        "optimizer step. Effective batch = micro-batch x accumulation x GPUs.",
        str(example.GRAD_ACCUM),
    ),
    Field(
        "seq-len",
        "Sequence length (tokens)",
        GROUPS[1],
        "Tokens per training sequence.",
        str(example.SEQ_LEN),
    ),
    Field(
        "grad-checkpointing",
        "Gradient checkpointing",
        GROUPS[1],
        "Recompute activations in the backward pass "
        "instead of storing them: much less memory for about one extra forward pass (~33% more compute).",
        example.GRAD_CHECKPOINTING,
        "choice",
        CHECKPOINTING,
    ),
    Field(
        "attention",
        "Attention",
        GROUPS[1],
        "sdpa (fused, flash) attention does not store the attention "
        "matrix; eager does (memory grows with sequence squared).",
        example.ATTENTION,
        "choice",
        ATTENTION,
    ),
    # --- data and epochs
    Field(
        "data-unit",
        "Data size in",
        GROUPS[2],
        "Count the data as sequences (samples) or as tokens per epoch.",
        DATA_UNITS[0],
        "choice",
        DATA_UNITS,
    ),
    Field(
        "samples",
        "Data size (per epoch)",
        GROUPS[2],
        "Training sequences (or tokens) in one pass over the data; suffixes k, M, B allowed.",
        f"{example.SAMPLES}",
    ),
    Field("epochs", "Epochs", GROUPS[2], "Passes over the data (fractions allowed).", "1"),
    Field(
        "tokens-per-s",
        "Measured speed (tokens/s)",
        GROUPS[2],
        "Tokens per second of the whole run (all GPUs), "
        "if you measured it; replaces the peak-FLOP/s x MFU estimate. Give this or samples/min, not both.",
        optional=True,
        placeholder="estimate",
    ),
    Field(
        "samples-per-min",
        "Measured speed (samples/min)",
        GROUPS[2],
        "Training sequences per minute of the "
        "whole run, if you measured it; replaces the estimate. Give this or tokens/s, not both.",
        optional=True,
        placeholder="estimate",
    ),
    Field(
        "calibration",
        "Speeds from the history",
        GROUPS[2],
        "Use the tokens/s measured in finished runs and "
        "`trainer bench` results of this model (same sequence length) in the run history, instead of the "
        "MFU estimate for those GPUs.",
        CALIBRATION[0],
        "choice",
        CALIBRATION,
    ),
    # --- storage and transfer (issue 31): labels and tooltips from app/plan_fields.py; empty size: compute only
    Field("dataset-gb", "Dataset size (GB)", GROUPS[2], _HELP["dataset-gb"], optional=True, placeholder="compute only"),
    Field("data-location", "Dataset lives", GROUPS[2], _HELP["data-location"], LOCATIONS[0], "choice", LOCATIONS),
    Field(
        "data-provider",
        "Dataset provider",
        GROUPS[2],
        _HELP["data-provider"],
        DATA_PROVIDERS[0],
        "choice",
        DATA_PROVIDERS,
    ),
    Field("checkpoints-kept", "Checkpoints kept", GROUPS[2], _HELP["checkpoints-kept"], f"{DEFAULT_CHECKPOINTS_KEPT}"),
    Field("retention-days", "Retention (days)", GROUPS[2], _HELP["retention-days"], f"{DEFAULT_RETENTION_DAYS:g}"),
    # --- hardware and pricing
    Field(
        "gpu",
        "GPU",
        GROUPS[3],
        "The GPU the memory bar and the plan figures are for; the table compares every catalog GPU.",
        example.GPU,
        "choice",
        (),
    ),
    Field("gpus", "GPUs", GROUPS[3], "GPUs in the run (data parallel).", "1"),
    Field(
        "sharding",
        "Sharding",
        GROUPS[3],
        "DDP replicates weights, gradients and optimizer states on every GPU; "
        "ZeRO-2 shards gradients and optimizer states; FSDP shards all three.",
        "ddp",
        "choice",
        SHARDING,
    ),
    Field(
        "engine",
        "Training stack",
        GROUPS[3],
        FIELD_HELP["engine"],
        DEFAULT_ENGINE,
        "choice",
        ENGINES,
    ),
    Field(
        "compile",
        "torch.compile",
        GROUPS[3],
        FIELD_HELP["compile"],
        "off",
        "choice",
        ("off", "on"),
    ),
    Field(
        "keep",
        "Keep as given",
        GROUPS[3],
        "Where your settings do not fit a GPU of the comparison, the table uses the fastest settings that do "
        "(a smaller micro-batch with more accumulation, more checkpointing, sharding) and Launch uses them. "
        "A ticked setting is never changed: an option it does not fit shows as not fitting. Untick Method to "
        "let a LoRA that nothing else fits become QLoRA (4-bit base weights).",
        "method",
        "keep",
    ),
    Field(
        "mfu",
        "MFU (share)",
        GROUPS[3],
        "Model-FLOPs utilisation: the share of the GPU's peak FLOP/s the training "
        "really reaches (0.3-0.5 is typical). Empty: the GPU's default.",
        optional=True,
        placeholder="GPU default",
    ),
    Field(
        "headroom",
        "Memory headroom (share)",
        GROUPS[3],
        "Share of GPU memory a plan may use; the rest is kept free for fragmentation and spikes.",
        f"{DEFAULT_HEADROOM:g}",
    ),
    Field(
        "memory",
        "Memory estimate",
        GROUPS[3],
        "formula: the app's memory model (instant). trace: build the model "
        "on fake tensors and run one real training step with PyTorch's memory tracker (needs torch, takes "
        "seconds); falls back to the formulas when it cannot trace.",
        MEMORY_SOURCES[0],
        "choice",
        MEMORY_SOURCES,
    ),
    Field(
        "price",
        "Price ($/GPU-hour)",
        GROUPS[3],
        "Your own on-demand price per GPU-hour. Empty: the cheapest "
        "catalog offer. With a price only the chosen GPU is compared.",
        optional=True,
        placeholder="catalog",
    ),
    Field(
        "pricing",
        "Check deadline/budget with",
        GROUPS[3],
        "Which price and runtime the deadline and budget "
        "checks of the plan use; spot uses the P90 of simulated interrupted runs.",
        PRICING_MODES[0],
        "choice",
        PRICING_MODES,
    ),
    # --- spot
    Field(
        "spot-discount",
        "Spot discount (share)",
        GROUPS[4],
        "Spot instances are spare capacity sold cheaper "
        "but can be taken back. 0.6 = 60% cheaper per hour than on-demand. Empty: catalog spot prices.",
        optional=True,
        placeholder="catalog",
    ),
    Field(
        "spot-price",
        "Spot price ($/GPU-hour)",
        GROUPS[4],
        "Your spot price per GPU-hour, instead of a discount. Empty: the catalog's spot price (or the discount).",
        optional=True,
        placeholder="catalog",
    ),
    Field(
        "interruptions-per-hour",
        "Interruptions per hour",
        GROUPS[4],
        "How often the provider takes a spot instance back (0.05 = about once a day). Empty: the catalog's rate.",
        optional=True,
        placeholder="catalog",
    ),
    Field(
        "mean-hours-between-interruptions",
        "Hours between interruptions",
        GROUPS[4],
        "The same rate said the other way: mean hours between two interruptions (20 = 0.05 per hour).",
        optional=True,
        placeholder="catalog",
    ),
    Field(
        "spot-overhead-pct",
        "Flat spot overhead (%)",
        GROUPS[4],
        "Instead of the interruption model: spot takes this much longer in wall time than on-demand (10 = 10% longer).",
        optional=True,
        placeholder="interruption model",
    ),
    Field(
        "restart-minutes",
        "Restart (min)",
        GROUPS[4],
        "Time to get a new instance, load the checkpoint and warm up after an interruption.",
        "10",
    ),
    Field(
        "checkpoint-minutes",
        "Checkpoint every (min)",
        GROUPS[4],
        "Checkpoint interval: on average half of it "
        "is lost at each interruption, unless the notice leaves time to save.",
        "30",
    ),
    Field(
        "checkpoint-write-s",
        "Checkpoint write (s)",
        GROUPS[4],
        "Seconds to write one checkpoint; training "
        "pauses while it is written. Empty: estimated from the checkpoint's size.",
        optional=True,
        placeholder="estimated",
    ),
    # --- deadline and budget
    Field(
        "deadline-hours",
        "Deadline (hours)",
        GROUPS[5],
        "Wall-clock hours the run must finish in.",
        optional=True,
        placeholder="none",
    ),
    Field(
        "budget-usd",
        "Budget ($)",
        GROUPS[5],
        "Most money the run may cost.",
        optional=True,
        placeholder="none",
    ),
    Field(
        "max-gpu-hours",
        "Max GPU-hours",
        GROUPS[5],
        "Most GPU-hours the run may use (GPUs trained on x hours; spot: the P90 hours), e.g. a team's weekend "
        "cap of 12. Options over it are marked like those over budget.",
        optional=True,
        placeholder="none",
    ),
    Field(
        "run-overhead-pct",
        "Whole-run overhead (%)",
        GROUPS[5],
        FIELD_HELP["run-overhead-pct"],
        optional=True,
        placeholder="none",
    ),
)

FIELD_BY_KEY = {f.key: f for f in FIELDS}
# The settings the comparison may fit per GPU that "Keep as given" can pin: the name (as ``gpuplanner compare
# --pin``; "method" kept means no ``--allow-qlora``), the engine's TrainSetup field, and the check box's text
# (short: the form's column is narrow; each box's tooltip says more).
KEEP_CHOICES: tuple[tuple[str, str, str], ...] = (
    ("micro-batch", "micro_batch", "Micro-batch"),
    ("checkpointing", "grad_checkpointing", "Checkpointing"),
    ("sharding", "sharding", "Sharding"),
    ("optimizer", "optimizer", "Optimizer"),
    ("method", "method", "Method (no QLoRA)"),
)
# Always kept in the window: the bundled trainer has no 8-bit optimizer states to launch.
ALWAYS_KEPT = ("optimizer",)
# Choice fields that are planner inputs (the others choose how the form itself reads its texts).
CHOICE_KEYS = tuple(row.flag for row in PLAN_FIELDS if row.kind == "choice" and row.shown_in_form)
# Engine field names that belong to a differently named form field.
FIELD_ALIASES = {"tokens": "samples", "lora_rank": "lora-rank"}
# Fields of which at most one may be filled: the input layer's rule where all of them are optional form
# fields (the model source and the data unit are one choice each in the form, not several fields).
EXCLUSIVE: tuple[tuple[str, ...], ...] = tuple(
    group for group in INPUT_EXCLUSIVE if all(key in FIELD_BY_KEY and FIELD_BY_KEY[key].optional for key in group)
)


def default_values() -> dict[str, str]:
    """The form's first state: the example workload."""
    return {f.key: f.default for f in FIELDS}


def widget_key(engine_field: str) -> str:
    """The form field an engine error names (``tokens`` is shown at the data-size field ...)."""
    key = engine_field.replace("_", "-")
    key = FIELD_ALIASES.get(key, key)
    if key == "model" or key in ("model-config", "params"):
        return key
    return key if key in FIELD_BY_KEY else "model-source"
