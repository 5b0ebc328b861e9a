"""Setting a run up: read and tokenise the data set, build the model (precision, loss, ``--compile``,
FSDP sharding or meta-device initialisation), the optimizer and the gradient scaler."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from . import async_checkpoint, compiling, dist, losses, sharded_checkpoint
from . import data as data_mod
from . import fsdp as fsdp_mod
from .losses import causal_loss_sum
from .model import build_model, resolve_precision
from .step import classification_loss_sum, make_optimizer
from .telemetry import warn
from .trainer_core import TrainerCore


class Building(TrainerCore):
    """Sets ``tokenizer``, ``data``, ``model``, the loss, ``optimizer`` and ``scaler``, then seeds the
    per-rank dropout stream (a resume then restores the saved RNG state over it)."""

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
            self.data = data_mod.split_classification(
                rows, labels, c.seq_len, self.tokenizer.pad_token_id, c.eval_fraction, c.seed
            )
            return
        eval_files = data_mod.data_files(c.eval_data) if c.eval_data else None

        def corpora() -> tuple[data_mod.Corpus, data_mod.Corpus | None]:
            def tokenize(paths: list[Path]) -> data_mod.Corpus:
                return data_mod.tokenize_cached(
                    paths, self.tokenizer, c.text_field, cache, c.chat_template, c.train_on_prompt
                )

            corpus = tokenize(files)
            if eval_files is not None:
                return corpus, tokenize(eval_files)
            return data_mod.split_cached(corpus, c.eval_fraction, c.seed, cache)

        failed: data_mod.DataError | None = None
        if self.writer:
            try:
                corpora()
            except data_mod.DataError as exc:
                failed = exc
        # every rank stops on the writer's data error (instead of waiting for it at a barrier)
        if dist.all_max([int(failed is not None)], self.info, self.device)[0]:
            raise failed or data_mod.DataError("the data cannot be read: the rank that tokenises it says why")
        train, held_out = corpora()
        # documents kept apart: asked for, or by default for prompt/response and chat data
        documents = c.reset_position_ids if c.reset_position_ids is not None else train.instruction
        self.data = data_mod.pack(train, c.seq_len, self.tokenizer.eos_token_id, documents, held_out)
        if held_out is None and c.eval_fraction > 0 and self.info.is_main:
            warn(f"no held-out documents: {sum(train.kinds.values())} document(s) cannot be split; give --eval-data")

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
        self._rank0_weights = None
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
        self.loss_fn = classification_loss_sum
        self.loss_impl = "classification"
        head_loss = None
        if not self.cls:  # the output head computes the loss in chunks (or Liger's kernel): no full logits
            head_loss, self.loss_impl = losses.install(self.model, c.loss_impl, self.device)
            self.loss_fn = functools.partial(causal_loss_sum, head_loss=head_loss)
        # torch.compile per block and the loss's chunk math, before FSDP wraps the blocks (as torchtitan);
        # compiling happens lazily at the first step, timed by the compile clock.
        self.compiled = compiling.wanted(c.compile, self.device)
        self.compile_clock = None
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
            fsdp_mod.shard(self.model, self.dtype if self.precision.autocast else None, offload=c.optimizer_offload)
            if self.meta_init:
                full, buffers = self._rank0_weights or (None, None)
                fsdp_mod.materialise(self.model, self.device, full, buffers)
                self._rank0_weights = None
        # FSDP checkpoints: each rank writes its own shards with DCP, asynchronously (sharded_checkpoint.py)
        self.saver = sharded_checkpoint.AsyncSaver(self.info.distributed) if self.fsdp else None
        # other runs: full state dicts staged to host memory and written on a thread (async_checkpoint.py)
        self.writes = async_checkpoint.BackgroundWrite() if not self.fsdp and c.checkpoint_async else None
        self.optimizer = make_optimizer(self.model, c, self.device)
        self.scaler = (
            torch.amp.GradScaler("cuda") if self.dtype == torch.float16 and self.device.type == "cuda" else None
        )
        torch.manual_seed(c.seed * 1000 + self.info.rank)  # dropout stream, per rank

    def multi_storage_ok(self) -> bool:
        """False when some node writes its own copy of the checkpoints (run dirs on separate disks)."""
        return dist.all_max([int(self.writer and not self.info.is_main)], self.info, self.device)[0] == 0
