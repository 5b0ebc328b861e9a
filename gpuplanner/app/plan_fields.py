"""The planner's inputs as one table: what both the CLI's flags and the Plan form are built from.

Each :class:`PlanField` row is one :class:`~gpuplanner.plan.inputs.PlanInputs` attribute with its
``gpuplanner plan`` / ``compare`` flag, the form's label and unit, the one help text (the flag's
``--help`` and the form field's tooltip), its kind, and where each front end groups it. The ranges
and choices are not repeated here: a row reads them from :mod:`gpuplanner.plan.inputs` (``RANGES``,
``CHOICES``, ``EXCLUSIVE``), so a bound or a choice has one home.

``commands/plan.py`` loops over :data:`PLAN_FIELDS` to add its arguments; ``ui/plan_form.py`` takes
the labels, tooltips and choices of the fields it shows from it. No argparse and no Qt here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuplanner.plan import example
from gpuplanner.plan.inputs import CHOICES, EXCLUSIVE, RANGES, Range
from gpuplanner.plan.planner import DEFAULT_HEADROOM

# number: parsed under its RANGES entry; choice: one of its CHOICES; text: a free name; path: a file;
# names: comma-separated names; flag: on when given.
Kind = Literal["number", "choice", "text", "path", "names", "flag"]

# The CLI's argument groups (their --help titles; "" = the parser's own options), in --help order.
CLI_GROUPS: tuple[str, ...] = (
    "model and method",
    "batch and sequence",
    "hardware",
    "data and speed",
    "pricing and spot",
    "deadline and budget",
    "",
)
# The form's group boxes, in the form's order (the same titles as ``gpuplanner.ui.plan.plan_inputs.GROUPS``).
FORM_GROUPS: tuple[str, ...] = (
    "Model and method",
    "Batch and sequence",
    "Data and epochs",
    "Hardware and pricing",
    "Spot",
    "Deadline and budget",
)


@dataclass(frozen=True)
class PlanField:
    """One planner input: its PlanInputs attribute, flag, label, unit, help, kind and groups.

    ``form_group`` is "" for an input the form does not show as a field of its own (``tokens``: the form's
    data-size field with its unit set to tokens).
    """

    attr: str  # the PlanInputs attribute (and the JSON documents' key)
    flag: str  # the CLI flag without its dashes (and the name a PlanInputError gives the field)
    label: str  # the form's label, without the unit
    unit: str  # "" when the value has none; the form shows it after the label
    help: str  # the flag's --help and the form field's tooltip: one text
    kind: Kind
    cli_group: str
    form_group: str
    metavar: str | None = None  # as --help shows the value (None for choices and flags)

    @property
    def option(self) -> str:
        return f"--{self.flag}"

    @property
    def form_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    @property
    def shown_in_form(self) -> bool:
        return bool(self.form_group)

    @property
    def range(self) -> Range | None:
        """The values a number may take (plan/inputs.py's RANGES), None for other kinds."""
        return RANGES[self.flag] if self.kind == "number" else None

    @property
    def choices(self) -> tuple[str, ...]:
        """The values a choice may take (plan/inputs.py's CHOICES), () for other kinds."""
        return CHOICES[self.flag] if self.kind == "choice" else ()

    @property
    def exclusive_with(self) -> tuple[str, ...]:
        """The flags of its group of mutually exclusive inputs (plan/inputs.py's EXCLUSIVE), or ()."""
        return next((group for group in EXCLUSIVE if self.flag in group), ())

    @property
    def argparse_help(self) -> str:
        """The help text as argparse takes it (a literal % doubled)."""
        return self.help.replace("%", "%%")


def _row(
    flag: str,
    label: str,
    unit: str,
    help: str,  # noqa: A002 (the column's name)
    kind: Kind,
    cli_group: int,
    form_group: int | None,
    metavar: str | None = None,
) -> PlanField:
    return PlanField(
        attr=flag.replace("-", "_"),
        flag=flag,
        label=label,
        unit=unit,
        help=help,
        kind=kind,
        cli_group=CLI_GROUPS[cli_group],
        form_group="" if form_group is None else FORM_GROUPS[form_group],
        metavar=metavar,
    )


# In the CLI's --help order. The numbers are indexes into CLI_GROUPS and FORM_GROUPS.
PLAN_FIELDS: tuple[PlanField, ...] = (
    # --- model and method
    _row(
        "model",
        "Preset",
        "",
        f"A model whose architecture ships with the app (default {example.MODEL}); "
        "`gpuplanner plan --list-models` lists them.",
        "text",
        0,
        0,
        "NAME",
    ),
    _row(
        "model-config",
        "config.json",
        "",
        "Path of a Hugging Face config.json (the exact parameter count); nothing is downloaded.",
        "path",
        0,
        0,
        "FILE",
    ),
    _row(
        "params",
        "Parameters",
        "",
        "A bare parameter count with an optional suffix (7B, 350M, 1.5e9): a Llama-like shape of that size.",
        "number",
        0,
        0,
        "N",
    ),
    _row(
        "method",
        "Method",
        "",
        "Full fine-tune trains every weight. LoRA freezes the model and trains small low-rank adapters; "
        "QLoRA also stores the frozen weights in 4 bits.",
        "choice",
        0,
        0,
    ),
    _row(
        "lora-rank",
        "LoRA rank",
        "",
        "Rank r of each adapter: it trains r x (in + out) parameters per adapted layer. 8-64 is usual.",
        "number",
        0,
        0,
        "R",
    ),
    _row(
        "lora-targets",
        "LoRA targets",
        "",
        "Comma-separated module names the adapters attach to (q_proj, v_proj ...), or `attention` / `all-linear`.",
        "names",
        0,
        0,
        "NAMES",
    ),
    _row(
        "precision",
        "Precision",
        "",
        "Mixed precision computes in 16 bits but keeps fp32 master weights and gradients; bf16 keeps "
        "everything in bf16. fp16 needs loss scaling.",
        "choice",
        0,
        0,
    ),
    _row(
        "optimizer",
        "Optimizer",
        "",
        "AdamW keeps two fp32 states per trained parameter (8 bytes); 8-bit Adam about 2 bytes; SGD and "
        "Adafactor less.",
        "choice",
        0,
        0,
    ),
    # --- batch and sequence
    _row(
        "micro-batch",
        "Micro-batch",
        "sequences/GPU",
        "Sequences each GPU processes in one forward and backward pass. Activation memory grows with it.",
        "number",
        1,
        1,
        "N",
    ),
    _row(
        "grad-accum",
        "Accumulation steps",
        "",
        "Micro-batches whose gradients are summed before one optimizer step. "
        "Effective batch = micro-batch x accumulation x GPUs.",
        "number",
        1,
        1,
        "N",
    ),
    _row("seq-len", "Sequence length", "tokens", "Tokens per training sequence.", "number", 1, 1, "TOKENS"),
    _row(
        "grad-checkpointing",
        "Gradient checkpointing",
        "",
        "Recompute activations in the backward pass instead of storing them: much less memory for about "
        "one extra forward pass (~33% more compute).",
        "choice",
        1,
        1,
    ),
    _row(
        "attention",
        "Attention",
        "",
        "sdpa (fused, flash) attention does not store the attention matrix; eager does (memory grows with "
        "sequence squared).",
        "choice",
        1,
        1,
    ),
    # --- hardware
    _row(
        "gpu",
        "GPU",
        "",
        f"A catalog GPU, or GPU:COUNT such as H100:8: the GPU the plan's figures are for (default {example.GPU}); "
        "the comparison covers every catalog GPU unless one is named.",
        "text",
        2,
        3,
        "NAME[:N]",
    ),
    _row(
        "gpus",
        "GPUs",
        "",
        "GPUs in the run, data parallel (the plan: default 1; the comparison: 1, 2, 4 and 8 unless given).",
        "number",
        2,
        3,
        "N",
    ),
    _row(
        "sharding",
        "Sharding",
        "",
        "DDP replicates weights, gradients and optimizer states on every GPU; ZeRO-2 shards gradients and "
        "optimizer states; FSDP shards all three.",
        "choice",
        2,
        3,
    ),
    _row(
        "engine",
        "Training stack",
        "",
        "The software the run trains with: bundled (this app's trainer), hf-trainer (transformers Trainer + "
        "peft; FSDP1 through accelerate or DeepSpeed per sharding), torchtitan, torchtune, deepspeed, litgpt, "
        "llm-foundry, hf-loop (a transformers model + peft in your own loop, loss on its 16-bit logits) or "
        "unsloth (fused LoRA and loss kernels). It decides how gradients accumulate under "
        "FSDP, how the loss treats the logits and how LoRA adapters run.",
        "choice",
        2,
        3,
    ),
    _row(
        "compile",
        "torch.compile",
        "",
        "The model runs under torch.compile: TorchInductor fuses its norms, rotary embedding and activations "
        "into generated kernels, so their memory traffic is what the fused stacks move, whatever the training "
        "stack runs eagerly. Off by default (eager PyTorch).",
        "flag",
        2,
        3,
    ),
    _row(
        "tf32",
        "TF32",
        "fp32 only",
        "With fp32 precision: run the matmuls on TF32 tensor cores (Ampere and newer, about 8x the plain "
        "fp32 rate). PyTorch leaves it off by default; GPUs without TF32 plan at the fp32 rate.",
        "flag",
        2,
        0,
    ),
    _row(
        "mfu",
        "MFU",
        "share",
        "Model-FLOPs utilisation: the share of the GPU's peak FLOP/s the training really reaches "
        "(0.3-0.5 is typical). Not given: the GPU's default.",
        "number",
        2,
        3,
        "SHARE",
    ),
    _row(
        "headroom",
        "Memory headroom",
        "share",
        f"Share of GPU memory a plan may use (default {DEFAULT_HEADROOM:g}); the rest is kept free for "
        "fragmentation and spikes.",
        "number",
        2,
        3,
        "SHARE",
    ),
    # --- data and speed
    _row(
        "samples",
        "Data size",
        "per epoch",
        f"Training sequences (or tokens) in one pass over the data (default {example.SAMPLES:,} sequences); "
        "suffixes k, M, B allowed.",
        "number",
        3,
        2,
        "N",
    ),
    _row(
        "tokens",
        "Data size",
        "tokens per epoch",
        "Training tokens in one pass over the data, instead of a number of sequences.",
        "number",
        3,
        None,
        "N",
    ),
    _row("epochs", "Epochs", "", "Passes over the data (fractions allowed).", "number", 3, 2, "N"),
    _row(
        "tokens-per-s",
        "Measured speed",
        "tokens/s",
        "Tokens per second of the whole run (all GPUs), if you measured it; replaces the peak-FLOP/s x MFU "
        "estimate. Give this or samples/min, not both.",
        "number",
        3,
        2,
        "X",
    ),
    _row(
        "samples-per-min",
        "Measured speed",
        "samples/min",
        "Training sequences per minute of the whole run, if you measured it; replaces the estimate. "
        "Give this or tokens/s, not both.",
        "number",
        3,
        2,
        "X",
    ),
    # --- pricing and spot
    _row(
        "price",
        "Price",
        "$/GPU-hour",
        "Your own on-demand price per GPU-hour. Not given: the cheapest catalog offer. With a price only "
        "the chosen GPU is compared (and with no GPU named, the plan needs no catalog).",
        "number",
        4,
        3,
        "USD",
    ),
    _row(
        "spot-price",
        "Spot price",
        "$/GPU-hour",
        "Your spot price per GPU-hour, instead of a discount. Not given: the catalog's spot price (or the discount).",
        "number",
        4,
        4,
        "USD",
    ),
    _row(
        "spot-discount",
        "Spot discount",
        "share",
        "Spot instances are spare capacity sold cheaper but can be taken back. 0.6 = 60% cheaper per hour "
        "than on-demand. Not given: catalog spot prices.",
        "number",
        4,
        4,
        "SHARE",
    ),
    _row(
        "interruptions-per-hour",
        "Interruptions per hour",
        "",
        "How often the provider takes a spot instance back (0.05 = about once a day). Not given: the catalog's rate.",
        "number",
        4,
        4,
        "RATE",
    ),
    _row(
        "mean-hours-between-interruptions",
        "Hours between interruptions",
        "",
        "The same rate said the other way: mean hours between two interruptions (20 = 0.05 per hour).",
        "number",
        4,
        4,
        "HOURS",
    ),
    _row(
        "spot-overhead-pct",
        "Flat spot overhead",
        "%",
        "Instead of the interruption model: spot takes this much longer in wall time than on-demand (10 = 10% longer).",
        "number",
        4,
        4,
        "PCT",
    ),
    _row(
        "restart-minutes",
        "Restart",
        "min",
        "Time to get a new instance, load the checkpoint and warm up after an interruption (default 10).",
        "number",
        4,
        4,
        "MIN",
    ),
    _row(
        "checkpoint-minutes",
        "Checkpoint every",
        "min",
        "Checkpoint interval (default 30): on average half of it is lost at each interruption, unless the "
        "notice leaves time to save.",
        "number",
        4,
        4,
        "MIN",
    ),
    _row(
        "checkpoint-write-s",
        "Checkpoint write",
        "s",
        "Seconds to write one checkpoint; training pauses while it is written. Not given: estimated from "
        "the checkpoint's size.",
        "number",
        4,
        4,
        "S",
    ),
    _row(
        "pricing",
        "Check deadline/budget with",
        "",
        "Which price and runtime the deadline and budget checks of the plan use; spot uses the P90 of "
        "simulated interrupted runs.",
        "choice",
        4,
        3,
    ),
    # --- storage and transfer (plan/storage_cost.py): all of them apply only with --dataset-gb
    _row(
        "dataset-gb",
        "Dataset size",
        "GB",
        "The training data's size in GB. Given: the plan adds storage (checkpoints kept, the dataset during "
        "the run) and transfer (moving the dataset to the GPUs) to the compute cost, and compare ranks by the "
        "total. Not given: compute only.",
        "number",
        3,
        2,
        "GB",
    ),
    _row(
        "data-location",
        "Dataset lives",
        "",
        "Where the dataset is: same-region (no transfer charge), other-region (the training provider's "
        "inter-region rate), other-provider (the internet egress of --data-provider) or on-prem (cloud ingress "
        "is free). Default same-region.",
        "choice",
        3,
        2,
    ),
    _row(
        "data-provider",
        "Dataset provider",
        "",
        "With --data-location other-provider: the provider that holds the dataset and charges its egress "
        "(default aws).",
        "choice",
        3,
        2,
    ),
    _row(
        "checkpoints-kept",
        "Checkpoints kept",
        "",
        "Checkpoints stored after the run (default 3, the trainer's --keep-checkpoints); each is the trained "
        "weights plus their optimizer states, sized from the plan.",
        "number",
        3,
        2,
        "N",
    ),
    _row(
        "retention-days",
        "Retention",
        "days",
        "Days the kept checkpoints stay in storage (default 30).",
        "number",
        3,
        2,
        "DAYS",
    ),
    # --- deadline and budget
    _row("deadline-hours", "Deadline", "hours", "Wall-clock hours the run must finish in.", "number", 5, 5, "H"),
    _row("budget-usd", "Budget", "$", "Most money the run may cost.", "number", 5, 5, "USD"),
    _row(
        "max-gpu-hours",
        "Max GPU-hours",
        "",
        "Most GPU-hours the run may use (GPUs trained on x hours; spot: the P90 hours), e.g. a team's "
        "weekend cap of 12. Options over it are marked like those over budget.",
        "number",
        5,
        5,
        "H",
    ),
    _row(
        "run-overhead-pct",
        "Whole-run overhead",
        "%",
        "What a whole run spends beyond steady-state training (restarts after failures, evaluations, "
        "checkpoint pauses, stragglers), as a percentage of the steady-state hours; it is added to the hours "
        "and the cost and shown as its own term. Not given: the steady state only. Meta reports above 90% "
        "effective training time for Llama 3 on 16,384 H100s (466 interruptions in 54 days), about 10% lost.",
        "number",
        5,
        5,
        "PCT",
    ),
    # --- the parser's own
    _row(
        "memory",
        "Memory estimate",
        "",
        "formula: the app's memory model (instant). trace: build the model on fake tensors and run one real "
        "training step with PyTorch's memory tracker (needs torch, takes seconds); falls back to the "
        "formulas when it cannot trace.",
        "choice",
        6,
        3,
    ),
)

FIELD_BY_FLAG: dict[str, PlanField] = {row.flag: row for row in PLAN_FIELDS}
FIELD_BY_ATTR: dict[str, PlanField] = {row.attr: row for row in PLAN_FIELDS}
# PlanInputs attributes that are deliberately no row of the table (none today: every input is a flag).
NOT_INPUTS: tuple[str, ...] = ()
