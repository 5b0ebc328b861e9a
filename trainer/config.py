"""Training configuration: defaults < TOML file (``--config``) < command-line flags.

Every field of :class:`TrainConfig` is a flag (``--seq-len`` for ``seq_len``) and a TOML key (either
spelling). The resolved config is written to the run directory as TOML and JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.settings import CHAT_TEMPLATES, TRAINER_CHECKPOINTING, TRAINER_PRECISIONS


@dataclass
class TrainConfig:
    # Where and what
    run_dir: str = "run"
    model: str | None = None
    model_config: str | None = None
    task: str = "causal-lm"
    data: list[str] = field(default_factory=list)
    text_field: str = "text"
    label_field: str = "label"
    cache_dir: str | None = None
    eval_fraction: float = 0.05
    eval_data: list[str] = field(default_factory=list)
    chat_template: str = "auto"
    train_on_prompt: bool = False
    # Shapes and schedule
    seq_len: int = 512
    micro_batch: int = 8
    grad_accum: int = 1
    epochs: int = 1
    max_steps: int = 0
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = -1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 1234
    # Speed and memory
    precision: str = "auto"
    grad_checkpointing: str = "off"
    selective_policy: str = "every-matmul"
    compile: bool | None = None
    compile_backend: str = "inductor"
    attn_implementation: str = "sdpa"
    fused_kernels: bool = True
    tf32: str = "off"
    loss_impl: str = "auto"
    reset_position_ids: bool | None = None
    num_workers: int = -1
    device: str = "auto"
    fsdp: bool = False
    meta_init: bool = True
    fsdp_defer_grad_sync: bool = False
    optimizer_offload: bool = False
    stop_sync_every_steps: int = 0
    # LoRA
    lora_rank: int = 0
    lora_alpha: float = 0.0
    lora_targets: list[str] = field(default_factory=list)
    lora_dropout: float = 0.0
    qlora: bool = False
    merge_lora: bool = False
    # Evaluation and stopping
    eval_every_steps: int = 0
    eval_batches: int = 8
    target_eval_loss: float | None = None
    early_stop_patience: int = 0
    early_stop_min_delta: float = 0.0
    # Checkpoints
    checkpoint_every_steps: int = 0
    checkpoint_every_minutes: float = 10.0
    keep_checkpoints: int = 3
    checkpoint_async: bool = True
    mirror_url: str | None = None
    resume: bool = True
    schedule_change: str = "warn"
    # Budget
    price_per_gpu_hour: float | None = None  # None: no price, so the spend is unknown (never $0)
    budget_usd: float | None = None
    max_gpu_hours: float | None = None
    # Preemption notices
    preemption_url: str | None = None
    preemption_provider: str = "auto"
    preemption_poll_s: float = 5.0
    # Telemetry
    log_every_steps: int = 1
    log_interval_s: float = 1.0
    gpu_interval_s: float = 2.0
    events_stdout: bool = True
    record_sample_ids: bool = False
    peak_tflops: float | None = None


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
CHOICES = {
    "precision": TRAINER_PRECISIONS,  # the vocabulary and its planner names: trainer/settings.py
    "grad_checkpointing": TRAINER_CHECKPOINTING,
    "selective_policy": ("every-matmul", "alternate-matmul"),
    "task": ("causal-lm", "seq-cls"),
    "chat_template": CHAT_TEMPLATES,
    "preemption_provider": ("auto", "aws", "gcp", "azure"),
    "attn_implementation": ("sdpa", "eager", "flash_attention_2"),
    "loss_impl": ("auto", "chunked", "liger", "plain"),
    "schedule_change": ("warn", "refuse"),
    "tf32": ("on", "off"),
    "compile_backend": ("inductor", "aot_eager", "eager"),
}
HELP = {
    "run_dir": "run directory: checkpoints, events.jsonl, final model (resumed from by default)",
    "model": "Hugging Face model id or local directory (causal LM, or sequence classifier with --task seq-cls)",
    "model_config": "config.json for a randomly initialised model (nothing downloads)",
    "data": "text (.txt, .md: one document each), JSONL (.jsonl: one document per line, with messages, "
    "prompt/response, instruction/output or the text field), Parquet (.parquet) files, saved Hugging Face "
    "datasets (save_to_disk folders), or folders of them; repeatable",
    "eval_data": "held-out data (same formats as --data; repeatable); without it, a random --eval-fraction of "
    "the documents (drawn with --seed) is held out",
    "eval_fraction": "share of the documents held out for evaluation when --eval-data is not given (whole "
    "documents drawn at random with --seed, never the last file)",
    "chat_template": "how chat (messages) and prompt/response rows become text: auto = the tokenizer's own "
    "chat template (chat data is an error without one; prompt/response rows are then joined as they are); "
    "chatml = ChatML (<|im_start|>role ... <|im_end|>)",
    "train_on_prompt": "train on the whole document; default: loss only on assistant turns and responses",
    "task": "causal-lm (packed next-token prediction) or seq-cls (sequence classification: JSONL with "
    "--text-field and --label-field, padded/truncated to --seq-len, no packing)",
    "text_field": "JSONL field that holds the text",
    "label_field": "JSONL field that holds the class label (--task seq-cls): integers (sorted numerically) "
    "or strings (sorted), mapped to ids 0..K-1 and saved as id2label/label2id",
    "meta_init": "with --fsdp (causal LM, full fine-tuning): build the model on the meta device, shard it, and let "
    "each rank materialise only its shard, filled from the weights rank 0 loads (a model larger than one GPU "
    "can be trained); --no-meta-init builds the whole model on every rank first",
    "fsdp": "shard parameters, gradients and optimizer state with PyTorch FSDP2 (fully_shard per transformer "
    "block) across torchrun ranks instead of DDP; full-state checkpoints; one process: unsharded",
    "stop_sync_every_steps": "multi-process runs: steps between the ranks' agreement on a stop (signal, preemption "
    "notice, budget) and a time-based checkpoint, an all-reduce that makes the host wait for the GPU; 0: about once "
    "a second (at most every 50 steps)",
    "qlora": "QLoRA: load the frozen base of --model in 4-bit NF4 with double quantisation (bitsandbytes), "
    "prepare it with peft's prepare_model_for_kbit_training, compute in the precision's 16-bit dtype (bf16 "
    "under bf16-mixed); needs --lora-rank and pip install bitsandbytes",
    "cache_dir": "token cache folder (default RUN_DIR/token-cache)",
    "precision": "fp32; bf16-mixed or fp16-mixed (fp16 is the same): fp32 master weights and optimizer states, "
    "16-bit compute under autocast, a LoRA base in 16 bit; bf16: pure bf16 weights and optimizer states (small "
    "updates can vanish); auto = bf16-mixed where supported, else fp16-mixed on CUDA, fp32 on CPU",
    "grad_checkpointing": "recompute activations of every layer or every other layer; selective: every layer keeps "
    "its matmul and attention outputs and recomputes only the cheap elementwise work (norms, activation "
    "functions, rotary embeddings, casts): most of full checkpointing's memory saving at almost no extra FLOPs",
    "selective_policy": "with --grad-checkpointing selective: which matmul outputs each block keeps: every-matmul "
    "(all of them, no matmul recomputed) or alternate-matmul (the 1st, 3rd, 5th, ... matmul of the block in "
    "forward order, as torchtitan's op-level policy: about half the kept matmul outputs for recomputing half the "
    "block's matmuls); attention outputs are kept either way",
    "fsdp_defer_grad_sync": "with --fsdp and --grad-accum > 1: keep each micro-step's gradients unsharded on every "
    "rank and reduce-scatter them only after the last micro-step (one reduce-scatter per step, but every rank holds "
    "the whole model's unsharded gradient); default: reduce-scatter after every micro-step, as torchtitan, so each "
    "rank holds only its shard of the gradient",
    "optimizer_offload": "with --fsdp: keep the sharded fp32 parameters, gradients and optimizer states in (pinned) "
    "CPU memory and run the optimizer step on the CPU (FSDP2's CPUOffloadPolicy); the GPU holds only the "
    "parameters gathered for the block being computed. Slower steps, far less GPU memory",
    "merge_lora": "LoRA: besides the adapter (final/adapter_config.json, adapter_model.safetensors), save the base "
    "model with the adapters merged into its weights in final/merged/ (a plain transformers model to serve)",
    "compile": "torch.compile each transformer block (fullgraph) and the chunked loss's per-chunk math; default: "
    "on with CUDA, off on the CPU (compiling takes minutes there); the seconds spent compiling are reported as "
    "compile_s",
    "compile_backend": "torch.compile backend: inductor (fused kernels), aot_eager or eager (no code generation: "
    "checks that the model compiles without graph breaks, fast)",
    "tf32": "on: fp32 matmuls and convolutions run on TF32 tensor cores (Ampere and newer; about 10 mantissa "
    "bits instead of 23, several times faster) and MFU/HFU divide by the GPU's TF32 peak; off (PyTorch's "
    "default): full fp32 and the fp32 peak. Matters under --precision fp32 only: bf16 and fp16 matmuls ignore it",
    "fused_kernels": "swap activations written as chains of small ops (GPT-2's gelu_new, gelu_fast, "
    "gelu_accurate) for PyTorch's one-kernel tanh GELU: the same function, faster, and less "
    "activation memory; the saved model is unchanged",
    "loss_impl": "next-token loss: chunked (the output head and cross-entropy over chunks of tokens, never the "
    "full fp32 logits), liger (Liger's fused linear cross-entropy, CUDA, pip install liger-kernel), plain (full "
    "logits); auto = liger where installed on CUDA, else chunked where the model allows it, else plain",
    "num_workers": "DataLoader workers (-1: 0 on CPU, up to 4 per GPU on CUDA)",
    "device": "auto, cpu, cuda or cuda:N",
    "warmup_steps": "linear warm-up steps before cosine decay (-1: 5%% of the run, at most 100)",
    "checkpoint_every_minutes": "time-based checkpoint interval (0: off); the main safety net on spot",
    "keep_checkpoints": "complete checkpoints kept (at least 2)",
    "checkpoint_async": "one process and DDP: copy the checkpoint's state to host memory (pinned with CUDA) and "
    "write, fsync and checksum it on a background thread while training goes on (one write in flight; the "
    "completion marker last); --no-checkpoint-async writes it while training waits and needs no host copy. "
    "FSDP checkpoints are always written in the background (DCP)",
    "schedule_change": "when a resume would change the learning-rate schedule saved in the checkpoint (max steps, "
    "epochs, lr, warm-up, batch shape, or world size in an epoch-based run): warn with the difference and continue "
    "on the new schedule, or refuse (exit 2); a world-size change that keeps the schedule only warns",
    "mirror_url": "copy each checkpoint to a local path, sftp://[user@]host[:port]/path, s3://bucket/prefix, "
    "gs://bucket/prefix or az://container/prefix",
    "preemption_url": "instance metadata URL to poll for a preemption notice",
    "log_interval_s": "minimum seconds between step records",
    "reset_position_ids": "keep packed documents apart: position ids restart at each document and attention "
    "stays within it (a block-diagonal mask with sdpa and eager, variable-length with flash_attention_2); "
    "default: on for prompt/response and chat data, off for plain text",
    "record_sample_ids": "add the sample ids of each step to its step record (tests)",
    "peak_tflops": "peak FLOP/s of the device in TFLOP/s for MFU (default: built-in table)",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per config field; defaults are suppressed so TOML values are not overridden."""
    parser.add_argument("--config", help="TOML file with any of the settings below")
    for name, f in FIELDS.items():
        kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": HELP.get(name)}
        type_ = str(f.type)
        if type_ in ("bool", "bool | None"):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif type_.startswith("list"):
            kwargs["action"] = "append"
        elif "int" in type_:
            kwargs["type"] = int
        elif "float" in type_:
            kwargs["type"] = float
        if name in CHOICES:
            kwargs["choices"] = CHOICES[name]
        parser.add_argument(_flag(name), dest=name, **kwargs)


def _normalise_key(key: str) -> str:
    return key.replace("-", "_")


def load_toml(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    values = raw.get("train", raw)
    out = {}
    for key, value in values.items():
        name = _normalise_key(key)
        if name not in FIELDS:
            raise ValueError(f"{path}: unknown setting {key!r}")
        out[name] = value
    return out


def resolve(args: argparse.Namespace) -> TrainConfig:
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values.update(load_toml(args.config))
    values.update({k: v for k, v in vars(args).items() if k in FIELDS})
    if isinstance(values.get("data"), str):
        values["data"] = [values["data"]]
    if isinstance(values.get("lora_targets"), str):
        values["lora_targets"] = [t for t in values["lora_targets"].split(",") if t]
    values["lora_targets"] = [t for item in values.get("lora_targets", []) for t in item.split(",") if t]
    config = TrainConfig(**values)
    validate(config)
    return config


def validate(config: TrainConfig) -> None:
    problems = []
    if not config.model and not config.model_config:
        problems.append("give --model or --model-config")
    if not config.data:
        problems.append("give --data")
    if config.stop_sync_every_steps < 0:
        problems.append("--stop-sync-every-steps must not be negative (0: about once a second)")
    for name in ("seq_len", "micro_batch", "grad_accum", "epochs"):
        if getattr(config, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    for name, choices in CHOICES.items():
        if getattr(config, name) not in choices:
            problems.append(f"--{name.replace('_', '-')} must be one of {', '.join(choices)}")
    if not 0.0 <= config.eval_fraction < 1.0:
        problems.append("--eval-fraction must be in [0, 1)")
    if config.task == "seq-cls" and config.reset_position_ids:
        problems.append("--reset-position-ids applies to --task causal-lm only (seq-cls does not pack)")
    if config.task == "seq-cls" and config.eval_data:
        problems.append("--eval-data applies to --task causal-lm only (seq-cls holds out --eval-fraction)")
    if config.qlora:
        if config.lora_rank < 1:
            problems.append("--qlora trains LoRA adapters on a 4-bit base: give --lora-rank")
        if not config.model:
            problems.append("--qlora quantises a pretrained checkpoint: give --model (not --model-config)")
        if config.fsdp:
            problems.append("--qlora does not run with --fsdp (4-bit weights are not sharded here); use DDP")
    if config.optimizer_offload and not config.fsdp:
        problems.append("--optimizer-offload applies to --fsdp runs (FSDP2's CPU offload of the sharded state)")
    if config.merge_lora and config.lora_rank < 1:
        problems.append("--merge-lora merges LoRA adapters: give --lora-rank")
    if config.merge_lora and (config.fsdp or config.qlora):
        # a sharded or 4-bit base is merged into a fresh 16-bit copy of --model (trainer/final_model.py)
        if not config.model:
            problems.append("--merge-lora with --fsdp or --qlora reloads the base model: give --model")
        if config.task == "seq-cls":
            problems.append("--merge-lora with --fsdp or --qlora merges causal LMs only (--task causal-lm)")
    if config.price_per_gpu_hour is not None and config.price_per_gpu_hour < 0:
        problems.append("--price-per-gpu-hour must not be negative")
    if problems:
        raise ValueError("; ".join(problems))


def to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def to_toml(config: TrainConfig) -> str:
    lines = ["# Resolved trainer configuration (usable with --config)", "[train]"]
    for key, value in to_dict(config).items():
        if value is not None:
            lines.append(f"{key.replace('_', '-')} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def write_resolved(config: TrainConfig, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.resolved.toml").write_text(to_toml(config), encoding="utf-8")
    (run_dir / "config.resolved.json").write_text(json.dumps(to_dict(config), indent=2) + "\n", encoding="utf-8")
