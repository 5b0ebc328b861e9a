"""``torch.compile`` where it pays (``--compile``): each transformer block, and the loss's per-chunk math.

Each block is compiled in place (``nn.Module.compile``: its parameters and state-dict names do not
change, so checkpoints, DDP, FSDP2 and peft see the same model), with ``fullgraph=True`` so a graph
break is an error at the first step instead of a silent slowdown; the blocks of one model share one
compiled graph. Activation checkpointing, selective included, runs inside the compiled block (dynamo
traces ``torch.utils.checkpoint`` as one region). The chunked loss's softmax-minus-one-hot work per
chunk is compiled too: it fuses half a dozen passes over the fp32 chunk logits into one or two.

Compiling is paid time: :class:`CompileClock` adds up the seconds dynamo and the backward's lazy
compile spend (torch's compile callbacks), which the trainer reports as ``compile_s``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

BACKENDS = ("inductor", "aot_eager", "eager")


def wanted(setting: bool | None, device: torch.device) -> bool:
    """``--compile`` given or not: on CUDA by default (None), off on the CPU (compiling costs minutes there)."""
    return device.type == "cuda" if setting is None else bool(setting)


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks, as Hugging Face models name their classes in ``_no_split_modules``."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return [m for m in model.modules() if m is not model and type(m).__name__ in names]


def compile_blocks(model: torch.nn.Module, backend: str = "inductor", fullgraph: bool = True) -> int:
    """Compile every transformer block in place; returns how many. A model without known blocks is
    compiled whole (without ``fullgraph``: the loss and the model's bookkeeping may break the graph)."""
    blocks = transformer_blocks(model)
    for block in blocks:
        block.compile(backend=backend, fullgraph=fullgraph)
    if not blocks:
        model.compile(backend=backend)
    return len(blocks)


class CompileClock:
    """Seconds spent compiling in this process (dynamo's and the lazily compiled backward's), from
    torch's compile callbacks; nested compiles count once."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self._started: float | None = None
        self._lock = threading.Lock()
        self._installed = False

    def _start(self, _args: Any) -> None:
        with self._lock:
            self._started = time.perf_counter()

    def _end(self, _args: Any) -> None:
        with self._lock:
            if self._started is not None:
                self.seconds += time.perf_counter() - self._started
                self.count += 1
                self._started = None

    def install(self) -> CompileClock:
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)
        self._installed = True
        return self

    def remove(self) -> None:
        if self._installed:
            from torch._dynamo.callback import callback_handler

            callback_handler.remove_start_callback(self._start)
            callback_handler.remove_end_callback(self._end)
            self._installed = False
