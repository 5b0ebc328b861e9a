"""Packed sequences that keep documents apart, the held-out split of documents, and the attention mask.

The token cache holds ids and one flag byte per token (:data:`trainer.chat.TARGET`: a loss target;
:data:`trainer.chat.START`: the first token of a document). A training sequence is ``seq_len``
consecutive tokens of the stream; from its flags come:

- ``targets``: the next token where that token is a target, else -100 (prompts, BOS, and with documents
  kept apart the first token of the next document, which nothing in the sequence can predict);
- with documents kept apart (``--reset-position-ids``): ``position_ids`` restarting at 0 at each
  document (and at the sequence start) and ``document_ids`` (0, 1, ... within the sequence), from which
  the forward call builds a block-diagonal causal mask (:func:`model_inputs`): a token attends only to
  earlier tokens of its own document. ``flash_attention_2`` gets the position ids alone (its variable-length
  path finds the documents from them).

The held-out split (:func:`eval_documents`) is a seeded random set of whole documents, never the tail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import losses  # its IGNORE_INDEX, read at call time (losses imports this module)
from .chat import START, TARGET


def window(tokens: np.ndarray, flags: np.ndarray, starts: np.ndarray, seq_len: int, pad_id: int) -> tuple[Any, Any]:
    """(ids, flags) of the sequences starting at ``starts``; past the stream's end, padding (``pad_id``,
    each pad its own document with no target)."""
    pos = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(seq_len)
    inside = pos < len(tokens)
    safe = np.where(inside, pos, 0)
    ids = np.where(inside, np.asarray(tokens[safe], dtype=np.int64), pad_id)
    fl = np.where(inside, np.asarray(flags[safe], dtype=np.uint8), START).astype(np.uint8)
    return ids, fl


def targets_of(ids: np.ndarray, fl: np.ndarray, documents: bool) -> np.ndarray:
    """Next-token targets with -100 where the next token is not a target (see the module's doc)."""
    nxt = fl[:, 1:]
    ok = (nxt & TARGET) != 0
    if documents:
        ok &= (nxt & START) == 0
    out = np.full(ids.shape, losses.IGNORE_INDEX, dtype=np.int64)
    out[:, :-1] = np.where(ok, ids[:, 1:], losses.IGNORE_INDEX)
    return out


def target_counts(flags: np.ndarray, n_seq: int, seq_len: int, documents: bool, block: int = 1 << 14) -> np.ndarray:
    """Targets per sequence of the stream (what :func:`targets_of` marks), for the first ``n_seq``."""
    out = np.zeros(n_seq, dtype=np.int64)
    for lo in range(0, n_seq, block):
        hi = min(n_seq, lo + block)
        fl = np.asarray(flags[lo * seq_len : hi * seq_len], dtype=np.uint8).reshape(hi - lo, seq_len)[:, 1:]
        ok = (fl & TARGET) != 0
        if documents:
            ok &= (fl & START) == 0
        out[lo:hi] = ok.sum(axis=1)
    return out


def document_layout(fl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position ids, document ids) of each row: both restart at each document start and at the row's start."""
    start = (fl & START) != 0
    start[:, 0] = True
    ar = np.broadcast_to(np.arange(fl.shape[1]), fl.shape)
    first = np.maximum.accumulate(np.where(start, ar, 0), axis=1)
    return (ar - first).astype(np.int64), (np.cumsum(start, axis=1) - 1).astype(np.int64)


def eval_documents(flags: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A boolean per token: held out. Whole documents drawn by a generator seeded with ``seed`` until they
    hold ``fraction`` of the tokens (at least one document, never all; none with fewer than 2 documents)."""
    held = np.zeros(len(flags), dtype=bool)
    starts = np.flatnonzero((np.asarray(flags) & START) != 0)
    if fraction <= 0 or len(starts) < 2:
        return held
    lengths = np.diff(np.append(starts, len(flags)))
    order = np.random.default_rng([seed, 0xE7A1]).permutation(len(starts))
    cum = np.cumsum(lengths[order])
    n = int(np.searchsorted(cum, fraction * len(flags))) + 1
    chosen = np.zeros(len(starts), dtype=bool)
    chosen[order[: min(n, len(starts) - 1)]] = True
    return np.repeat(chosen, lengths)


def _attn_implementation(model: torch.nn.Module) -> str:
    inner = getattr(model, "module", model)  # DDP
    cfg = getattr(inner, "config", None)
    return str(getattr(cfg, "_attn_implementation", None) or "sdpa")


def model_inputs(model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
    """The forward's ``position_ids`` and, with documents kept apart, its 4D attention mask: boolean for
    SDPA (True: attend), additive (0 or the fp32 minimum) for eager attention, none for flash-attention
    (varlen from the position ids)."""
    out: dict[str, Any] = {}
    if "position_ids" in batch:
        out["position_ids"] = batch["position_ids"].to(device, non_blocking=True)
    if "document_ids" not in batch:
        return out
    impl = _attn_implementation(model)
    if impl.startswith("flash"):
        return out
    doc = batch["document_ids"].to(device, non_blocking=True)
    length = doc.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    allowed = (doc[:, :, None] == doc[:, None, :]) & causal
    mask = allowed[:, None]
    if impl == "eager":
        mask = torch.zeros(mask.shape, dtype=torch.float32, device=device).masked_fill(
            ~mask, torch.finfo(torch.float32).min
        )
    out["attention_mask"] = mask
    return out
