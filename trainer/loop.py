"""The training loop: exact resume, accumulation normalised by real token count, one agreed stop flag.

``train(config)`` returns the exit code: 0 finished (also budget or early stop), 75 checkpointed after
a stop signal or preemption notice, 1 failed.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.nn.functional as F

from . import allocator, checkpoint, clock, compiling, dist, losses, protocol, sharded_checkpoint
from . import data as data_mod
from . import fsdp as fsdp_mod
from .config import TrainConfig, to_dict, write_resolved
from .flops import peak_flops, set_tf32
from .mirror import Mirror, fetch_newest
from .model import (
    QLoRAUnavailable,
    build_model,
    count_params,
    pick_device,
    resolve_precision,
    save_final,
    training_flops,
)
from .nvml_sampler import Activity, GpuSampler, open_source
from .phases import PhaseClock
from .preemption import (
    BUDGET_STOP,
    EARLY_STOP,
    NONE,
    PREEMPTED,
    REASON_STATUS,
    MetadataWatcher,
    SignalHandlers,
    StopFlag,
)
from .reports import BenchInfo
from .spend import SpendClock, SpendTotals, cap_reached
from .telemetry import StepRateLimiter, Telemetry, node_rank_from_env, node_telemetry, warn

causal_loss_sum = losses.causal_loss_sum  # the plain path (full logits), also what callers import from here
IGNORE_INDEX = losses.IGNORE_INDEX

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_RESUME = 0, 1, 2, 75


@dataclass
class RunState:
    """Everything besides tensors that a checkpoint carries; cumulative across resumes."""

    step: int = 0
    epoch: int = 0
    offset: int = 0
    tokens_total: int = 0
    samples_total: int = 0
    elapsed_s: float = 0.0
    spend_usd: float = 0.0
    gpu_hours: float = 0.0
    best_eval: float | None = None
    bad_evals: int = 0
    world: int = 1
    global_batch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchStats:
    """Filled when the loop runs as ``trainer bench``: per-step timings after warm-up."""

    warmup_steps: int
    step_times: list[float] = field(default_factory=list)
    # perf_counter at the end of each step's whole iteration (bookkeeping and telemetry included);
    # ``step_ends[warmup_steps - 1]`` (or ``loop_start``) to ``step_ends[-1]`` is the measured wall span.
    step_ends: list[float] = field(default_factory=list)
    loop_start: float = 0.0
    data_waits: list[float] = field(default_factory=list)
    tokens_per_step: int = 0
    samples_per_step: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    flops_per_token: float = 0.0
    hardware_flops_per_token: float = 0.0
    peak_flops: float | None = None
    info: BenchInfo = field(default_factory=BenchInfo)


def lr_at(step: int, base: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to ``base`` then cosine decay to ``base * min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), foreach=True)


def target_count(batch: dict[str, torch.Tensor]) -> int:
    ids = batch["input_ids"]
    if "labels" in batch:  # classification: one target per example
        return int(ids.shape[0])
    return int(ids.shape[0] * (ids.shape[1] - 1))


def classification_logits(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device, autocast: Any
) -> torch.Tensor:
    ids = batch["input_ids"].to(device, non_blocking=True)
    mask = batch["attention_mask"].to(device, non_blocking=True)
    with autocast():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def classification_loss_sum(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device, autocast: Any
) -> torch.Tensor:
    """Summed cross-entropy over the examples of a micro-batch (fp32 logits)."""
    logits = classification_logits(model, batch, device, autocast)
    return F.cross_entropy(logits, batch["labels"].to(device, non_blocking=True), reduction="sum")


def _grad_sync(model: torch.nn.Module, world: int, last: bool) -> Any:
    """DDP: ``no_sync`` before the last micro-batch. FSDP2: gradient reduce-scatter only on the last."""
    set_sync, no_sync = getattr(model, "set_requires_gradient_sync", None), getattr(model, "no_sync", None)
    if world > 1 and set_sync is not None:
        set_sync(last)
        return contextlib.nullcontext()
    if world > 1 and not last and no_sync is not None:
        return no_sync()
    return contextlib.nullcontext()


def accumulate(
    model: torch.nn.Module,
    micro_batches: list[dict[str, torch.Tensor]],
    device: torch.device,
    autocast: Any,
    global_targets: int,
    world: int = 1,
    scaler: Any = None,
    loss_fn: Any = causal_loss_sum,
) -> torch.Tensor:
    """Forward/backward over the micro-batches of one optimizer step.

    Each micro-batch's summed loss is divided by the real target count of the whole step across all
    ranks (times ``world``, since DDP and FSDP average gradients), so the gradient equals that of one
    big batch. The gradient all-reduce (DDP) or reduce-scatter (FSDP) runs only on the last micro-batch.
    Targets are next tokens (``causal_loss_sum``) or class labels (``classification_loss_sum``).
    Returns the summed loss (a device tensor; no host sync here).
    """
    total = torch.zeros((), device=device)
    for k, batch in enumerate(micro_batches):
        with _grad_sync(model, world, k == len(micro_batches) - 1):
            loss = loss_fn(model, batch, device, autocast)
            scaled = loss * (world / global_targets)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach()
    return total


# DDP's gradient bucket size: PyTorch's default is 25 MB; fewer, larger all-reduces overlap the backward
# better on fast interconnects (torchtitan uses 100 MB for its DDP, torchtitan/models/llama3/infra/parallelize.py).
DDP_BUCKET_MB = 100


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP as the fast trainers set it up: gradients are views into the all-reduce buckets
    (``gradient_as_bucket_view``: no second copy of the gradients, no copy in and out of the buckets),
    and 100 MB buckets. Not ``static_graph``: on this trainer's models (GPT-2 with its tied head and
    the chunked loss) static-graph DDP averaged wrong gradients in our 2-process gloo test, with or
    without accumulation (weights off by up to 9e-3 from the one-process big batch after 6 steps),
    and without ``find_unused_parameters`` it would save little."""
    return torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=True,
        bucket_cap_mb=DDP_BUCKET_MB,
    )


def _host_info(device: torch.device) -> dict[str, Any]:
    gpus = []
    if device.type == "cuda":
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "mem_total_bytes": p.total_memory})
    return {"host": socket.gethostname(), "gpus": gpus, "cpu_count": os.cpu_count()}


def _peak_mem(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


def train(config: TrainConfig, stdout: TextIO | None = None, bench: BenchStats | None = None) -> int:
    started = clock.started() or (time.time(), time.monotonic())  # the budget clock's zero
    info = dist.DistInfo.from_env()
    device = pick_device(config.device, info.local_rank)
    run_dir = Path(config.run_dir)
    dist.init(info, device)
    set_tf32(config.tf32 == "on")  # before any matmul: fp32 matmuls on TF32 tensor cores, or full fp32
    # The rank that writes this node's files (checkpoints, final/, token cache): rank 0 when every
    # node sees the same run directory (shared file system), else each node's local rank 0.
    writer = dist.storage_leader(info, run_dir) == info.rank
    if writer:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved(config, run_dir)
    events = None if bench is not None else run_dir / protocol.EVENTS_FILE
    tele = Telemetry(events, stdout=stdout if config.events_stdout else None, enabled=info.is_main)
    trainer = None
    try:
        trainer = _Trainer(config, info, device, run_dir, tele, bench, writer, started)
        return trainer.run()
    except (checkpoint.ResumeConflict, losses.UnsupportedLoss, QLoRAUnavailable, data_mod.TokenizerError) as exc:
        warn(str(exc))
        phases = trainer.phase_fields() if trainer is not None else {}
        tele.emit("run_end", status="failed", error=str(exc), exit_code=EXIT_CONFIG, **phases)
        return EXIT_CONFIG
    except Exception as exc:
        warn(f"training failed: {exc}")
        traceback.print_exc(file=sys.stderr)
        phases = trainer.phase_fields() if trainer is not None else {}
        tele.emit("run_end", status="failed", error=f"{type(exc).__name__}: {exc}", exit_code=EXIT_FAILED, **phases)
        return EXIT_FAILED
    finally:
        tele.close()
        dist.shutdown()


def _model_arch(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's Hugging Face config for ``run_start`` (:func:`trainer.protocol.model_arch`); None without one
    (a LoRA-wrapped model forwards ``config`` to its base)."""
    hf_config = getattr(model, "config", None)
    to_dict = getattr(hf_config, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        return protocol.model_arch(to_dict())
    except (TypeError, ValueError):
        return None


class _Trainer:
    def __init__(
        self,
        config: TrainConfig,
        info: dist.DistInfo,
        device: torch.device,
        run_dir: Path,
        tele: Telemetry,
        bench: BenchStats | None,
        writer: bool | None = None,
        started: tuple[float, float] | None = None,
    ) -> None:
        self.config, self.info, self.device, self.run_dir, self.tele, self.bench = (
            config,
            info,
            device,
            run_dir,
            tele,
            bench,
        )
        self.writer = info.is_main if writer is None else writer
        self.steps_done = 0  # optimizer steps taken in this process (0: a stop before the first one)
        self.flag = StopFlag()
        self.activity = Activity()
        self.state = RunState(world=info.world)
        # The budget clock: paid time runs from the process start (loading and resuming included);
        # ``run_start`` carries the same moment, so the history prices the same span.
        self.started_wall, self.started_mono = started or (time.time(), time.monotonic())
        # Where this process's time goes, from its start (trainer/phases.py); records carry the totals.
        self.phases = PhaseClock(self.started_mono)
        self._first_compute: float | None = None  # --compile: the first step's compute time
        # elapsed, GPU-hours and spend from the process start plus what the checkpoint carried over
        self.spend_clock = SpendClock(config.price_per_gpu_hour, info.world, self.started_mono)
        self.mirror = Mirror(config.mirror_url, config.keep_checkpoints) if config.mirror_url and info.is_main else None

    def phase_fields(self) -> dict[str, Any]:
        """The ``phases`` and ``phases_start`` fields a record carries (trainer/protocol.py)."""
        return {"phases": self.phases.totals(), "phases_start": self.started_wall}

    # -- setup ------------------------------------------------------------------------------------
    def _data(self) -> None:
        """Read and tokenise the data set (the ``data`` phase)."""
        previous = self.phases.switch("data")
        try:
            self._load_data()
        finally:
            self.phases.switch(previous)

    def _load_data(self) -> None:
        c = self.config
        self.tokenizer = data_mod.load_tokenizer(c.model if c.model else None)
        if isinstance(self.tokenizer, data_mod.ByteTokenizer) and self.info.is_main:
            warn("byte tokenizer (257 ids: one per byte, 256 = end of text): the model has no tokenizer of its own")
        files = data_mod.data_files(c.data)
        cache = Path(c.cache_dir) if c.cache_dir else self.run_dir / "token-cache"
        if c.task == "seq-cls":

            def load() -> tuple[Any, list[str]]:
                return data_mod.classification_cached(
                    files, self.tokenizer, c.text_field, c.label_field, c.seq_len, cache
                )

            if self.writer:
                load()
            dist.barrier(self.info)
            rows, labels = load()
            self.data: data_mod.Data = data_mod.split_classification(
                rows, labels, c.seq_len, self.tokenizer.pad_token_id, c.eval_fraction, c.seed
            )
            return
        if self.writer:
            data_mod.tokenize_cached(files, self.tokenizer, c.text_field, cache)
        dist.barrier(self.info)
        tokens = data_mod.tokenize_cached(files, self.tokenizer, c.text_field, cache)
        self.data = data_mod.pack(tokens, c.seq_len, self.tokenizer.eos_token_id, c.eval_fraction)

    def _model(self) -> None:
        c = self.config
        self.cls = c.task == "seq-cls"
        labels = self.data.labels if isinstance(self.data, data_mod.ClassificationData) else None
        self.precision = resolve_precision(c.precision, self.device)
        self.dtype = self.precision.compute
        build = functools.partial(
            build_model,
            c,
            self.tokenizer.vocab_size,
            self.tokenizer.eos_token_id,
            labels=labels,
            pad_id=getattr(self.tokenizer, "pad_token_id", None),
            precision=self.precision,
            device=self.device,
        )
        # FSDP meta-device initialisation: every rank builds the model without memory; only rank 0 loads
        # the weights (on the CPU), and after sharding each rank materialises its own shard from them.
        self.meta_init = self.info.distributed and fsdp_mod.meta_init_wanted(c)
        self._rank0_weights: tuple[dict[str, Any], dict[str, torch.Tensor]] | None = None
        if self.meta_init:
            if self.info.rank == 0:
                real = build()
                self._rank0_weights = (real.state_dict(), fsdp_mod.non_persistent_buffers(real))
                del real
            self.model = build(meta=True)
        else:
            self.model = build()
            if not c.qlora:  # a 4-bit model is placed (and quantised) by from_pretrained itself
                self.model = self.model.to(self.device)
        self.model.train()
        self.loss_fn: Any = classification_loss_sum
        self.loss_impl = "classification"
        head_loss = None
        if not self.cls:  # the output head computes the loss in chunks (or Liger's kernel): no full logits
            head_loss, self.loss_impl = losses.install(self.model, c.loss_impl, self.device)
            self.loss_fn = functools.partial(causal_loss_sum, head_loss=head_loss)
        # torch.compile per block and the loss's chunk math, before FSDP wraps the blocks (as torchtitan);
        # compiling happens lazily at the first step, timed by the compile clock.
        self.compiled = compiling.wanted(c.compile, self.device)
        self.compile_clock: compiling.CompileClock | None = None
        if self.compiled:
            self.compile_clock = compiling.CompileClock().install()
            compiling.compile_blocks(self.model, c.compile_backend)
            if not losses.compile_loss(head_loss, c.compile_backend) and not self.cls and head_loss is None:
                # the plain path (full logits): its upcast and cross-entropy compiled as one graph
                plain = losses.compile_logits_loss(c.compile_backend)
                self.loss_fn = functools.partial(causal_loss_sum, head_loss=None, logits_loss=plain)
        self.trainable = [n for n, p in self.model.named_parameters() if p.requires_grad]
        self.full_state = len(self.trainable) == sum(1 for _ in self.model.parameters())
        self.fsdp = bool(c.fsdp and self.info.distributed)
        if c.fsdp and not self.info.distributed:
            warn(
                "--fsdp with a single process: nothing to shard across, training unsharded "
                "(run under torchrun --nproc-per-node N to shard)"
            )
        if self.fsdp and not self.multi_storage_ok():
            raise RuntimeError(
                "--fsdp across nodes needs one run directory on a shared file system (every rank's "
                "checkpoint shards and the manifest go in one folder); the nodes' run directories "
                "are on separate disks"
            )
        if self.fsdp:
            # before the optimizer: it must see the sharded parameters; 16-bit gathers under *-mixed
            fsdp_mod.shard(self.model, self.dtype if self.precision.autocast else None)
            if self.meta_init:
                full, buffers = self._rank0_weights or (None, None)
                fsdp_mod.materialise(self.model, self.device, full, buffers)
                self._rank0_weights = None
        # FSDP checkpoints: each rank writes its own shards with DCP, asynchronously (sharded_checkpoint.py)
        self.saver = sharded_checkpoint.AsyncSaver(self.info.distributed) if self.fsdp else None
        self.optimizer = make_optimizer(self.model, c, self.device)
        self.scaler = (
            torch.amp.GradScaler("cuda") if self.dtype == torch.float16 and self.device.type == "cuda" else None
        )
        torch.manual_seed(c.seed * 1000 + self.info.rank)  # dropout stream, per rank

    def _resume(self) -> Path | None:
        c = self.config
        if not c.resume or self.bench is not None:
            return None
        if self.writer:  # a crash mid-checkpoint leaves a temporary folder, possibly a whole checkpoint
            names, size = checkpoint.prune_temporaries(self.run_dir)
            if names:
                warn(f"removed {len(names)} unfinished checkpoint folder(s) ({size / 1e6:.1f} MB): {', '.join(names)}")
        path = checkpoint.newest_valid(self.run_dir, log=warn if self.writer else None)
        if c.mirror_url and dist.all_max([int(path is None)], self.info, self.device)[0]:
            if self.writer and path is None:
                fetch_newest(c.mirror_url, self.run_dir)
            dist.barrier(self.info)
            path = checkpoint.newest_valid(self.run_dir)
        path = self._agree_on_checkpoint(path)
        if path is None:
            return None
        ck = checkpoint.load(path, self.info.rank)
        st = ck["state"]
        if st.get("world") != self.info.world:
            gb = self.config.micro_batch * self.config.grad_accum * self.info.world
            warn(
                f"resuming a {st.get('world')}-rank checkpoint on {self.info.world} ranks: the data position "
                f"(epoch {st['epoch']}, sample {st['offset']}) is re-sharded exactly; global batch is now {gb}; "
                "the dropout RNG streams of new ranks start fresh"
            )
        if ck["model"] is None:  # sharded (DCP): every rank reads its shards, resharded to this run
            sharded_checkpoint.load(path, self.model, self.optimizer)
        else:
            self._load_full(path, ck)
        if self.scaler is not None and ck["scaler"]:
            self.scaler.load_state_dict(ck["scaler"])
        if ck["rng"] is not None:
            checkpoint.set_rng_state(ck["rng"])
        self.saved_state = st
        known = set(RunState.__dataclass_fields__)
        self.state = RunState(**{k: v for k, v in st.items() if k in known})
        self.state.world = self.info.world
        return path

    def _load_full(self, path: Path, ck: dict[str, Any]) -> None:
        """A checkpoint of full state dicts (model.pt, optimizer.pt) into this run's model."""
        st = ck["state"]
        names = set(self.model.state_dict())  # (FSDP: the same names, sharded values; nothing gathered)
        bad = [k for k in self.trainable if k not in ck["model"]] + [k for k in ck["model"] if k not in names]
        if bad:
            raise RuntimeError(f"checkpoint {path} does not match the model: {bad[:5]}")
        by_name = st.get("optimizer_format") == "by-name"
        if self.fsdp:
            fsdp_mod.load_model_state(self.model, ck["model"])
        else:
            self.model.load_state_dict(ck["model"], strict=False)
        if by_name:
            fsdp_mod.load_optimizer_state(self.model, self.optimizer, ck["optimizer"])
        elif self.fsdp:
            raise RuntimeError(
                f"checkpoint {path} was written without --fsdp: its optimizer state cannot be "
                "sharded; resume it without --fsdp"
            )
        else:
            self.optimizer.load_state_dict(ck["optimizer"])

    def param_dtypes(self) -> dict[str, int]:
        """Parameter count per dtype: trained parameters (and so their gradients and optimizer states)
        and frozen ones separately, as the precision promises them."""
        out: dict[str, int] = {}
        for p in self._raw_model().parameters():
            key = ("trained_" if p.requires_grad else "frozen_") + str(p.dtype).replace("torch.", "")
            out[key] = out.get(key, 0) + p.numel()
        return out

    def multi_storage_ok(self) -> bool:
        """False when some node writes its own copy of the checkpoints (run dirs on separate disks)."""
        return dist.all_max([int(self.writer and not self.info.is_main)], self.info, self.device)[0] == 0

    def _agree_on_checkpoint(self, path: Path | None) -> Path | None:
        """Every rank resumes the same step: the newest valid one on this rank's storage, agreed by all.

        With one shared run directory every rank finds the same. With a run directory per node, the
        nodes may differ (one was cut off while completing a checkpoint): the newest step is taken
        that is valid on every node; a node without it (a fresh disk, no mirror) refuses clearly.
        """
        if not self.info.distributed:
            return path
        step = checkpoint.step_of(path) if path is not None else -1
        low = -dist.all_max([-step], self.info, self.device)[0]
        high = dist.all_max([step], self.info, self.device)[0]
        if low == high:  # the same step everywhere (always so with a shared run directory)
            return path
        candidate = checkpoint.checkpoints_dir(self.run_dir) / checkpoint.step_dir_name(low) if low >= 0 else None
        ok = int(candidate is not None and checkpoint.is_valid(candidate))
        if -dist.all_max([-ok], self.info, self.device)[0] == 0:
            raise RuntimeError(
                f"the nodes' run directories hold different checkpoints (newest valid steps "
                f"{low}..{high}) and none is valid on every node; copy the newest checkpoint to "
                "every node's run directory, or resume from a --mirror-url"
            )
        return candidate

    def _schedule(self) -> dict[str, Any]:
        """The learning-rate schedule and the settings that decide it, as checkpoints record it."""
        c = self.config
        return {
            "kind": "warmup-cosine",
            "warmup": self.warmup,
            "total": self.total_steps,
            "lr": c.lr,
            "min_lr_ratio": c.min_lr_ratio,
            "max_steps": c.max_steps,
            "epochs": c.epochs,
            "micro_batch": c.micro_batch,
            "grad_accum": c.grad_accum,
            "world": self.info.world,
        }

    def _check_schedule(self, path: Path) -> list[tuple[str, Any, Any]]:
        """Compare the checkpoint's schedule with this run's: refuse (``--schedule-change refuse``) or warn.

        A change of world size alone (a failover to another machine) only warns: the schedule is
        the same, the global batch is not. Anything that moves the learning rate refuses under ``refuse``."""
        saved = dict(self.saved_state.get("scheduler") or {})
        saved.setdefault("world", self.saved_state.get("world"))
        changes = checkpoint.schedule_changes(saved, self._schedule())
        if not changes:
            return []
        c, step = self.config, self.state.step
        before = lr_at(
            step,
            saved.get("lr", c.lr),
            saved.get("warmup", self.warmup),
            saved.get("total", self.total_steps),
            saved.get("min_lr_ratio", c.min_lr_ratio),
        )
        after = lr_at(step, c.lr, self.warmup, self.total_steps, c.min_lr_ratio)
        what = (
            f"resuming {path.name} with a different schedule: {checkpoint.describe_changes(changes)} "
            f"(learning rate at step {step}: {before:.3g} saved, {after:.3g} now)"
        )
        if c.schedule_change == "refuse" and any(k != "world" for k, _, _ in changes):
            raise checkpoint.ResumeConflict(
                f"{what}; restore the saved settings, or pass --schedule-change warn to continue on the new schedule"
            )
        if self.info.is_main:
            warn(what + "; continuing on the new schedule")
        return changes

    def _remaining_steps(self) -> int:
        c, s, n = self.config, self.state, self.data.n_train
        gb = c.micro_batch * c.grad_accum * self.info.world
        if c.max_steps > 0:
            return max(0, c.max_steps - s.step)
        if s.epoch >= c.epochs:
            return 0
        per_epoch = n // gb
        return (n - s.offset) // gb + (c.epochs - s.epoch - 1) * per_epoch

    # -- checkpoint -------------------------------------------------------------------------------
    def _raw_model(self) -> torch.nn.Module:
        return getattr(self.model, "module", self.model)

    def save_checkpoint(self) -> None:
        previous = self.phases.switch("checkpoint")
        try:
            self._save_checkpoint()
        finally:
            self.phases.switch(previous)

    def _save_checkpoint(self) -> None:
        if self.saver is not None:
            self._save_sharded()
            return
        t0 = time.perf_counter()
        step = self.state.step
        # Each node's writer creates the temporary folder in its own run directory; every rank writes
        # its RNG state into its node's folder; each writer completes its node's copy (marker last).
        tmp = self.run_dir / "checkpoints" / f".tmp-{checkpoint.step_dir_name(step)}"
        if self.writer:
            tmp = checkpoint.begin(self.run_dir, step)
        dist.barrier(self.info)
        checkpoint.write_rank_state(tmp, self.info.rank)
        if self.fsdp:  # collectives: every rank takes part, rank 0 receives the full tensors
            full_model = fsdp_mod.full_model_state(self.model)
            optim_state = fsdp_mod.full_optimizer_state(self.model, self.optimizer)
        else:
            full_model, optim_state = {}, {}
        dist.barrier(self.info)
        if self.writer:  # DDP: every rank holds the same weights and optimizer state; FSDP: rank 0 only
            trainable = set(self.trainable)
            if not self.fsdp:
                full_model, optim_state = self._raw_model().state_dict(), self.optimizer.state_dict()
            model_state = {k: v for k, v in full_model.items() if k in trainable or self.full_state}
            st = self._checkpoint_state("by-name" if self.fsdp else "by-index")
            checkpoint.write_main(
                tmp, model_state, optim_state, self.scaler.state_dict() if self.scaler is not None else None, st
            )
            self.tele.sync()
            path, size = checkpoint.finish(self.run_dir, tmp, step, self.config.keep_checkpoints)
            seconds = time.perf_counter() - t0
            if self.info.is_main:
                self.tele.emit(
                    "checkpoint",
                    step=step,
                    path=str(path),
                    bytes=size,
                    seconds=round(seconds, 4),
                    **self.phase_fields(),
                )
            if self.mirror is not None:
                self.mirror.submit(path)
        dist.barrier(self.info)
        self.last_ckpt = time.monotonic()

    def _checkpoint_state(self, optimizer_format: str) -> dict[str, Any]:
        st = dict(self.state.__dict__)
        st["optimizer_format"] = optimizer_format
        st["fsdp"] = self.fsdp
        st["global_batch"] = self.config.micro_batch * self.config.grad_accum * self.info.world
        st["seed"] = self.config.seed
        st["scheduler"] = self._schedule()
        return st

    def _save_sharded(self) -> None:
        """FSDP: every rank writes its own shards with DCP in the background; the writer completes the
        checkpoint (checksums, rename, manifest last) once every shard is on disk. Training waits only
        for the previous save to end and for this rank's shards to be copied to host memory."""
        assert self.saver is not None
        t0 = time.perf_counter()
        self.saver.wait()  # one save in flight: the previous one is complete (or its failure raised here)
        step = self.state.step
        tmp = checkpoint.checkpoints_dir(self.run_dir) / f".tmp-{checkpoint.step_dir_name(step)}"
        if self.writer:
            tmp = checkpoint.begin(self.run_dir, step)
        dist.barrier(self.info)
        checkpoint.write_rank_state(tmp, self.info.rank)
        if self.writer:
            st = self._checkpoint_state("dcp")
            checkpoint.write_state(tmp, self.scaler.state_dict() if self.scaler is not None else None, st)
        dist.barrier(self.info)  # every rank's RNG file is on disk before the manifest can list it
        held: dict[str, Any] = {"s": None, "ready": threading.Event()}
        then = functools.partial(self._complete_sharded, tmp, step, t0, held) if self.writer else None
        self.saver.save(sharded_checkpoint.state_of(self.model, self.optimizer), tmp, then)
        held["s"] = time.perf_counter() - t0  # what training waited for: the previous save, staging
        held["ready"].set()
        self.last_ckpt = time.monotonic()

    def _complete_sharded(self, tmp: Path, step: int, t0: float, held: dict[str, Any]) -> None:
        """On the save's background thread of the writer, after every rank's shards are written."""
        held["ready"].wait()
        self.tele.sync()
        path, size = checkpoint.finish(self.run_dir, tmp, step, self.config.keep_checkpoints)
        if self.info.is_main:
            self.tele.emit(
                "checkpoint",
                step=step,
                path=str(path),
                bytes=size,
                seconds=round(time.perf_counter() - t0, 4),
                blocking_s=round(held["s"], 4),
                format="dcp",
                asynchronous=self.saver.asynchronous if self.saver is not None else False,
                **self.phase_fields(),
            )
        if self.mirror is not None:
            self.mirror.submit(path)

    def wait_checkpoint(self) -> None:
        """Block until a sharded checkpoint in flight is complete (before exiting or the final save)."""
        if self.saver is not None:
            self.saver.wait()
        dist.barrier(self.info)

    # -- evaluation -------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> tuple[float, dict[str, Any]] | None:
        """Held-out loss (and accuracy for classification), summed over ranks."""
        batches = data_mod.eval_batches(
            self.data, self.config.micro_batch, self.config.eval_batches, self.info.rank, self.info.world
        )
        if self.fsdp:  # every rank must run the same number of forwards (parameter all-gathers)
            n = -dist.all_max([-len(batches)], self.info, self.device)[0]
            batches = batches[:n]
        self.model.eval()
        total = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, targets, correct
        for idx in batches:
            b = self.data.batch(idx)
            if self.cls:
                logits = classification_logits(self._raw_model(), b, self.device, self.autocast)
                labels = b["labels"].to(self.device)
                total[0] += F.cross_entropy(logits, labels, reduction="sum").double()
                total[2] += (logits.argmax(-1) == labels).sum().double()
            else:
                if self.config.reset_position_ids:
                    b["position_ids"] = data_mod.position_ids(b["input_ids"], self.data.eos_id)
                total[0] += self.loss_fn(self._raw_model(), b, self.device, self.autocast).double()
            total[1] += target_count(b)
        self.model.train()
        dist.all_sum(total, self.info)
        if total[1] == 0:
            return None
        extra = {"eval_accuracy": float(total[2] / total[1]), "eval_examples": int(total[1])} if self.cls else {}
        return float(total[0] / total[1]), extra

    def _after_eval(self, loss: float, extra: dict[str, Any] | None = None) -> None:
        c, s = self.config, self.state
        self.tele.emit(
            "eval",
            step=s.step,
            eval_loss=loss,
            best_eval_loss=min(loss, s.best_eval or loss),
            **(extra or {}),
            **self.phase_fields(),
        )
        if c.target_eval_loss is not None and loss <= c.target_eval_loss:
            self.flag.request(EARLY_STOP, f"eval loss {loss:.4f} reached target {c.target_eval_loss}")
        if s.best_eval is None or s.best_eval - loss > c.early_stop_min_delta:
            s.best_eval, s.bad_evals = loss, 0
        else:
            s.bad_evals += 1
            if c.early_stop_patience and s.bad_evals >= c.early_stop_patience:
                self.flag.request(EARLY_STOP, f"no eval improvement in {s.bad_evals} evaluations")

    # -- main -------------------------------------------------------------------------------------
    def run(self) -> int:
        c, info = self.config, self.info
        self._data()
        self._model()
        resumed = self._resume()
        self.spend_clock.carry_over(self.state.elapsed_s, self.state.gpu_hours, self.state.spend_usd)
        remaining = self._remaining_steps()
        self.total_steps = self.state.step + remaining
        self.warmup = c.warmup_steps if c.warmup_steps >= 0 else min(100, max(1, self.total_steps // 20))
        raw = self.model
        if info.distributed and not self.fsdp:
            self.model = wrap_ddp(raw, self.device)
        fwd_model = self.model
        self.autocast = (
            (lambda: torch.autocast(self.device.type, dtype=self.dtype))
            if self.precision.autocast
            else contextlib.nullcontext
        )
        n_params, n_trainable = count_params(raw)
        self.flops = training_flops(raw, c.seq_len, c.grad_checkpointing)
        fpt = self.flops.model
        dev_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        tf32 = c.tf32 == "on"
        peak = c.peak_tflops * 1e12 if c.peak_tflops else peak_flops(dev_name, self.dtype, tf32)
        gb = c.micro_batch * c.grad_accum * info.world
        start_step = self.state.step
        self.tele.emit(
            "run_start",
            at=self.started_wall,
            config=to_dict(c),
            **_host_info(self.device),
            world_size=info.world,
            device=dev_name,
            precision=self.precision.name,
            param_dtypes=self.param_dtypes(),
            tf32=tf32,
            loss_impl=self.loss_impl,
            compile=self.compiled,
            alloc_conf=allocator.current() if self.device.type == "cuda" else None,
            params=n_params,
            trainable_params=n_trainable,
            train_sequences=self.data.n_train,
            eval_sequences=self.data.n_eval,
            steps_total=self.total_steps,
            flops_per_token=fpt,
            hardware_flops_per_token=self.flops.hardware,
            peak_flops=peak,
            resumed_from_step=start_step if resumed else None,
            pid=os.getpid(),
            task=c.task,
            fsdp=self.fsdp,
            meta_init=self.meta_init,
            param_bytes_per_rank=fsdp_mod.local_parameter_bytes(self.model),
            model_arch=_model_arch(raw),
            **({"labels": self.data.labels} if isinstance(self.data, data_mod.ClassificationData) else {}),
        )
        if resumed is not None:
            changes = self._check_schedule(resumed)
            listed: dict[str, Any] = (
                {"schedule_changes": [{"setting": k, "saved": a, "now": b} for k, a, b in changes]} if changes else {}
            )
            self.tele.emit(
                "resumed",
                step=start_step,
                checkpoint=str(resumed),
                spend_usd=self._spend(),
                **listed,
            )
        if self.bench is not None:
            self.bench.flops_per_token, self.bench.peak_flops = fpt, peak
            self.bench.hardware_flops_per_token = self.flops.hardware
            self.bench.tokens_per_step, self.bench.samples_per_step = gb * c.seq_len, gb
            self.bench.info = {
                "device": dev_name,
                "precision": self.precision.name,
                "tf32": tf32,
                "param_dtypes": self.param_dtypes(),
                "loss_impl": self.loss_impl,
                "compile": self.compiled,
                "params": n_params,
                "trainable_params": n_trainable,
                "world_size": info.world,
            }

        sampler = node_tele = None
        if info.local_rank == 0 and self.bench is None and c.gpu_interval_s > 0:  # one sampler per node
            indices = None if self.device.type != "cuda" else list(range(max(1, info.local_world)))
            source = open_source(indices, self.activity, force_simulated=self.device.type != "cuda")
            if not info.is_main:  # another node's GPUs: its own events file (see telemetry.node_telemetry)
                node_tele = node_telemetry(self.run_dir, node_rank_from_env(info.rank, info.local_world))
            sampler = GpuSampler(source, (node_tele or self.tele).emit, c.gpu_interval_s).start()
        watcher = None
        if c.preemption_url or c.preemption_provider != "auto":
            watcher = MetadataWatcher(
                c.preemption_url,
                c.preemption_provider,
                c.preemption_poll_s,
                lambda notice: self.flag.request(PREEMPTED, notice),
            ).start()
        try:
            with SignalHandlers(self.flag):
                reason = self._loop(fwd_model, remaining, gb, fpt, peak)
        finally:
            if watcher is not None:
                watcher.stop()
            if sampler is not None:
                sampler.sample_once()
                sampler.stop()
            if node_tele is not None:
                node_tele.close()
        return self._finish(reason)

    def _loop(self, fwd_model: torch.nn.Module, remaining: int, gb: int, fpt: float, peak: float | None) -> int:
        c, info, s = self.config, self.info, self.state
        self.last_ckpt = time.monotonic()
        if remaining == 0:
            return NONE
        # Start-up is paid time: a budget already spent by loading or resuming stops before a step.
        self._tick_budget()
        # A stop requested before the first step (e.g. SIGTERM during start-up): stop now, all ranks agreed.
        reason = dist.all_max([self.flag.reason], info, self.device)[0]
        if reason != NONE:
            return reason
        plan = data_mod.StepPlan(
            self.data,
            c.seed,
            data_mod.Position(s.epoch, s.offset),
            c.micro_batch,
            c.grad_accum,
            info.world,
            info.rank,
            remaining,
            c.reset_position_ids and not self.cls,
        )
        loader = data_mod.make_loader(plan, self.device, c.num_workers, info.local_world)
        batches = iter(loader)
        limiter = StepRateLimiter(c.log_every_steps, c.log_interval_s)
        params = [p for p in self.model.parameters() if p.requires_grad]
        global_targets = gb if self.cls else gb * (c.seq_len - 1)
        win: dict[str, Any] = {
            "t": time.perf_counter(),
            "steps": 0,
            "wait": 0.0,
            "loss": torch.zeros((), device=self.device),
            "targets": 0,
        }
        sample_ids: list[int] = []
        reason = NONE
        agree = dist.AgreeSchedule(info, c.stop_sync_every_steps)
        self.agree = agree
        if self.bench is not None:
            self.bench.loop_start = time.perf_counter()
        for i in range(remaining):
            t0 = time.perf_counter()
            micro = []
            wait = 0.0
            self.phases.switch("data")
            for _ in range(c.grad_accum):
                tw = time.perf_counter()
                micro.append(next(batches))
                wait += time.perf_counter() - tw
            # --compile traces and compiles in the first step of the process: its excess is compilation
            self.phases.switch("compile" if self.compiled and self.steps_done == 0 else "train")
            if c.record_sample_ids:
                sample_ids = [int(x) for b in micro for x in b["sample_ids"]]
            lr = lr_at(s.step, c.lr, self.warmup, self.total_steps, c.min_lr_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss_sum = accumulate(
                fwd_model,
                micro,
                self.device,
                self.autocast,
                global_targets,
                info.world,
                self.scaler,
                loss_fn=self.loss_fn,
            )
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            if c.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.steps_done += 1
            if self.bench is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            step_time = time.perf_counter() - t0
            self.activity.add_busy(step_time - wait)
            self._count_compile(step_time - wait)
            # bookkeeping (cumulative across resumes)
            pos = plan.position_after(i)
            s.step, s.epoch, s.offset = s.step + 1, pos.epoch, pos.offset
            s.tokens_total += gb * c.seq_len
            s.samples_total += gb
            self._tick_budget()
            win["steps"] += 1
            win["wait"] += wait
            win["loss"] += loss_sum
            win["targets"] += global_targets // info.world
            if self.bench is not None:
                if s.step > self.bench.warmup_steps:
                    self.bench.step_times.append(step_time)
                    self.bench.data_waits.append(wait)
            last = i == remaining - 1
            evaluated = bool(c.eval_every_steps and (s.step % c.eval_every_steps == 0 or last))
            if evaluated:
                previous = self.phases.switch("eval")
                result = self.evaluate()
                if result is not None:
                    self._after_eval(*result)
                self.phases.switch(previous)
            now = time.monotonic()
            # Every rank knows alike whether a step-based checkpoint is due; the stop flag and the
            # time-based checkpoint are agreed by an all-reduce (a host sync), not after every step.
            ckpt_steps = self.bench is None and bool(
                c.checkpoint_every_steps and s.step % c.checkpoint_every_steps == 0
            )
            ckpt_time = self.bench is None and bool(
                c.checkpoint_every_minutes and now - self.last_ckpt >= c.checkpoint_every_minutes * 60
            )
            if last or ckpt_steps or evaluated or agree.due(s.step):
                reason, agreed_time = agree.agree(s.step, [self.flag.reason, int(ckpt_time)], self.device)
            else:
                reason, agreed_time = NONE, 0
            ckpt_due = ckpt_steps or bool(agreed_time)
            if info.is_main and limiter.due(s.step, now, force=c.record_sample_ids or last or reason != NONE):
                self._emit_step(win, gb, fpt, peak, lr, sample_ids if c.record_sample_ids else None)
            if self.bench is not None:
                self.bench.step_ends.append(time.perf_counter())
            if reason != NONE:
                break
            if ckpt_due and not last:
                self.save_checkpoint()
        return reason

    def _count_compile(self, compute_s: float) -> None:
        """``--compile``: the first step ran in the ``compile`` phase; once a second step shows what a
        normal step costs, that much of the first step is training, not compilation."""
        if not self.compiled:
            return
        if self.steps_done == 1:
            self._first_compute = compute_s
        elif self.steps_done == 2 and self._first_compute is not None:
            self.phases.move("compile", "train", min(self._first_compute, compute_s))

    def _tick(self) -> SpendTotals:
        """Bring elapsed time, GPU-hours and spend up to now (cumulative across resumes)."""
        totals = self.spend_clock.totals()
        s = self.state
        s.elapsed_s, s.gpu_hours = totals.elapsed_s, totals.gpu_hours
        s.spend_usd = totals.spend_usd if totals.spend_usd is not None else 0.0
        return totals

    def _spend(self) -> float | None:
        """The spend the records carry: None (unknown) without a price, never $0."""
        return self.state.spend_usd if self.spend_clock.priced else None

    def _tick_budget(self) -> None:
        """:meth:`_tick`, then request the budget stop when a cap is reached (:func:`trainer.spend.cap_reached`)."""
        totals = self._tick()
        reason = cap_reached(totals, self.config.budget_usd, self.config.max_gpu_hours)
        if reason is not None:
            self.flag.request(BUDGET_STOP, reason)

    def _emit_step(
        self, win: dict[str, Any], gb: int, fpt: float, peak: float | None, lr: float, sample_ids: list[int] | None
    ) -> None:
        c, s = self.config, self.state
        now = time.perf_counter()
        dt = max(1e-9, now - win["t"])
        loss = float((win["loss"] / max(1, win["targets"])).item())  # the one host sync, at logging only
        tokens_per_s = win["steps"] * gb * c.seq_len / dt
        rec: dict[str, Any] = dict(
            step=s.step,
            epoch=s.epoch,
            loss=loss,
            lr=lr,
            tokens_total=s.tokens_total,
            samples_total=s.samples_total,
            tokens_per_s=tokens_per_s,
            samples_per_s=win["steps"] * gb / dt,
            step_time_s=dt / win["steps"],
            data_wait_s=win["wait"] / win["steps"],
            peak_mem_bytes=_peak_mem(self.device),
            mfu=(fpt * tokens_per_s / (peak * self.info.world)) if peak else None,
            hfu=(self.flops.hardware * tokens_per_s / (peak * self.info.world)) if peak else None,
            spend_usd=self._spend(),
            gpu_hours=s.gpu_hours,
            elapsed_s=s.elapsed_s,
            steps_in_record=win["steps"],
            **self.phase_fields(),
        )
        if self.compile_clock is not None:  # paid time spent compiling so far in this process
            rec["compile_s"] = round(self.compile_clock.seconds, 3)
        if sample_ids is not None:
            rec["sample_ids"] = sample_ids
        self.tele.emit("step", **rec)
        win.update(t=now, steps=0, wait=0.0, targets=0)
        win["loss"] = torch.zeros((), device=self.device)

    def _totals(self) -> dict[str, Any]:
        s = self.state
        return {
            "steps": s.step,
            "tokens_total": s.tokens_total,
            "samples_total": s.samples_total,
            "spend_usd": self._spend(),
            "gpu_hours": s.gpu_hours,
            "elapsed_s": s.elapsed_s,
        }

    def _finish(self, reason: int) -> int:
        status = REASON_STATUS.get(reason, "finished")
        self.phases.switch("checkpoint")  # what is left: the last checkpoint, the final model, the mirror
        self._tick()  # the last checkpoint carries the spend up to the stop
        if reason == PREEMPTED:
            self.tele.emit("preempted", step=self.state.step, reason=self.flag.detail or "stop requested")
        if self.compile_clock is not None:
            self.compile_clock.remove()
            if self.bench is not None:
                self.bench.info["compile_s"] = round(self.compile_clock.seconds, 3)
        if self.bench is not None:
            self.tele.emit("run_end", status=status, totals=self._totals(), exit_code=EXIT_OK, **self.phase_fields())
            return EXIT_OK
        if not (reason == PREEMPTED and self.steps_done == 0):  # stopped before any step: nothing to save
            self.save_checkpoint()
        if self.saver is not None:  # exit 75 promises a complete checkpoint: wait for the background write
            self.wait_checkpoint()
        if reason != PREEMPTED:
            # FSDP: gather the full weights (a collective on every rank); rank 0 writes them.
            full = fsdp_mod.full_model_state(self.model) if self.fsdp else None
            if full is not None:  # tied weights (GPT-2's lm_head) once, as save_pretrained does unsharded
                unique = {n for n, _ in self.model.named_parameters()} | {n for n, _ in self.model.named_buffers()}
                full = {k: v for k, v in full.items() if k in unique}
            if self.writer:  # every node's writer: each node's run directory gets the finished model
                save_final(self._raw_model(), self.tokenizer, self.run_dir / "final", state_dict=full)
        if self.mirror is not None:
            self.mirror.wait(timeout=120)
        code = EXIT_RESUME if reason == PREEMPTED else EXIT_OK
        detail: dict[str, Any] = {"reason": self.flag.detail} if self.flag.detail else {}
        self._tick()  # saving is paid time too: the totals price the run up to this, its last record
        if self.compile_clock is not None:
            detail["compile_s"] = round(self.compile_clock.seconds, 3)
        if self.info.distributed and getattr(self, "agree", None) is not None:
            detail["rank_agreements"] = self.agree.count  # stop-flag all-reduces (host syncs) in this process
        self.tele.emit("run_end", status=status, totals=self._totals(), exit_code=code, **detail, **self.phase_fields())
        return code
