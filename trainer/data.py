"""Data: read the documents (``documents.py``: text, JSONL, Parquet, saved datasets), tokenise them
once with their loss flags (``chat.py``: chat template, prompt masking, BOS/EOS) into a memory-mapped
cache, hold out a seeded random set of documents, pack into fixed-length sequences (``packing.py``:
documents kept apart), and lay out a deterministic sample order that is a pure function of (seed, epoch).

The order: in epoch ``e`` the training sequences are permuted by ``default_rng([seed, e])``. An
optimizer step consumes the next ``G = micro_batch * grad_accum * world`` samples of that
permutation; micro-step ``k`` of rank ``r`` takes ``perm[pos + (k * world + r) * mb :][:mb]``. The
position stored in a checkpoint is ``(epoch, samples consumed in the epoch)``, so a resume starts
exactly there (with any number of ranks) without iterating batches to skip them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import chat, documents, packing
from .documents import DataError as DataError
from .documents import data_files as data_files
from .documents import source_files

CACHE_FORMAT = 2


class ByteTokenizer:
    """UTF-8 bytes as tokens, 256 = end of document. For config-built models (needs vocab >= 257)."""

    name = "byte-level"
    vocab_size = 257
    eos_token_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    pad_token_id = 256

    def fingerprint(self) -> str:
        return "byte-level-v1"

    def encode_truncated(self, text: str, max_len: int) -> list[int]:
        """Classification input: no special tokens (none exist), the first ``max_len`` bytes."""
        return self.encode(text)[:max_len]

    def save_pretrained(self, path: str | Path) -> None:
        Path(path, BYTE_TOKENIZER_FILE).write_text(json.dumps({"type": "byte-level", "eos": 256}) + "\n")


class HFTokenizer:
    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.name = getattr(tok, "name_or_path", "hf")
        self.vocab_size = len(tok)
        eos = tok.eos_token_id
        self.eos_token_id = int(eos if eos is not None else (tok.sep_token_id or 0))
        pad = tok.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def encode_truncated(self, text: str, max_len: int) -> list[int]:
        """Classification input: with the model's special tokens (e.g. BERT's [CLS] ... [SEP]), truncated."""
        return list(self.tok(text, truncation=True, max_length=max_len)["input_ids"])

    def fingerprint(self) -> str:
        vocab = json.dumps(sorted(self.tok.get_vocab().items())[:2000])
        return hashlib.sha256(f"{self.name}|{self.vocab_size}|{vocab}".encode()).hexdigest()[:16]

    def save_pretrained(self, path: str | Path) -> None:
        self.tok.save_pretrained(path)


BYTE_TOKENIZER_FILE = "byte_tokenizer.json"


class TokenizerError(ValueError):
    """A pretrained model's tokenizer cannot be loaded: an error, never a silent switch to bytes."""


def load_tokenizer(model: str | None) -> ByteTokenizer | HFTokenizer:
    """The model's own tokenizer. Bytes (257 ids) only for a model built from a ``config.json`` (no
    ``model``) or one this trainer saved so (its folder holds ``byte_tokenizer.json``); a pretrained
    model whose tokenizer does not load raises :class:`TokenizerError`: a 128k-vocabulary model must
    never train on bytes and exit 0."""
    if not model or Path(model, BYTE_TOKENIZER_FILE).is_file():
        return ByteTokenizer()
    try:
        from transformers import AutoTokenizer

        return HFTokenizer(AutoTokenizer.from_pretrained(model))
    except Exception as exc:  # noqa: BLE001 (transformers raises many kinds; each is the same refusal)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise TokenizerError(
            f"the tokenizer of {model} cannot be loaded ({type(exc).__name__}: {reason}); nothing was trained. "
            "A model folder needs its tokenizer files (tokenizer.json, or tokenizer_config.json with its "
            "vocabulary)"
        ) from None


def cache_key(files: list[Path], tokenizer: Any, text_field: str, extra: str = "") -> str:
    h = hashlib.sha256(f"v{CACHE_FORMAT}|{tokenizer.fingerprint()}|{text_field}|{extra}".encode())
    for f in source_files(files):
        h.update(str(f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:24]


@dataclass
class Corpus:
    """A tokenised corpus: ids and per-token flags (``trainer.chat.TARGET``/``START``) as memory-mapped
    arrays, the documents per kind (text, pair, chat), and the cache key it is stored under."""

    tokens: np.ndarray
    flags: np.ndarray
    kinds: dict[str, int]
    key: str

    @property
    def instruction(self) -> bool:
        """Prompt/response or chat documents (then packing keeps documents apart by default)."""
        return bool(self.kinds.get("pair") or self.kinds.get("chat"))


def _save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
    np.save(tmp, array)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _load(cache_dir: Path, key: str) -> Corpus:
    meta = json.loads((cache_dir / f"tokens-{key}.json").read_text(encoding="utf-8"))
    tokens = np.load(cache_dir / f"tokens-{key}.npy", mmap_mode="r")
    return Corpus(tokens, np.load(cache_dir / f"flags-{key}.npy", mmap_mode="r"), meta["kinds"], key)


def tokenize_cached(
    files: list[Path],
    tokenizer: Any,
    text_field: str,
    cache_dir: Path,
    chat_template: str = "auto",
    train_on_prompt: bool = False,
) -> Corpus:
    """Every document tokenised (BOS/EOS per document, chat template, loss flags: ``trainer/chat.py``)
    into one memory-mapped token array and its flags (built once; the ids file is written last)."""
    render, template_id = chat.resolve_template(chat_template, tokenizer)
    bos, eos = chat.special_ids(tokenizer)
    key = cache_key(files, tokenizer, text_field, f"{template_id}|{train_on_prompt}|{bos}|{eos}")
    if not (cache_dir / f"tokens-{key}.npy").exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        ids: list[int] = []
        flags: list[int] = []
        kinds = {"text": 0, "pair": 0, "chat": 0}
        for doc in documents.iter_documents(files, text_field):
            doc_ids, doc_flags = chat.encode(doc, tokenizer, render, train_on_prompt, bos, eos)
            ids += doc_ids
            flags += doc_flags
            kinds[doc.kind] += 1
        if not ids:
            raise DataError(f"no documents in {', '.join(str(f) for f in files)}")
        dtype = np.uint16 if tokenizer.vocab_size <= 65535 else np.uint32
        (cache_dir / f"tokens-{key}.json").write_text(json.dumps({"kinds": kinds}), encoding="utf-8")
        _save(cache_dir / f"flags-{key}.npy", np.asarray(flags, dtype=np.uint8))
        _save(cache_dir / f"tokens-{key}.npy", np.asarray(ids, dtype=dtype))
    return _load(cache_dir, key)


def split_cached(corpus: Corpus, fraction: float, seed: int, cache_dir: Path) -> tuple[Corpus, Corpus | None]:
    """(training documents, held-out documents or None): a seeded random ``fraction`` of the documents
    (``trainer.packing.eval_documents``), stored beside the corpus (built once)."""
    if fraction <= 0:
        return corpus, None
    key = hashlib.sha256(f"{corpus.key}|split|{seed}|{fraction!r}".encode()).hexdigest()[:24]
    keys = (f"{key}t", f"{key}e")
    if not (cache_dir / f"tokens-{keys[1]}.npy").exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        held = packing.eval_documents(corpus.flags, fraction, seed)
        if not held.any():
            return corpus, None
        for part_key, rows in zip(keys, (~held, held), strict=True):
            (cache_dir / f"tokens-{part_key}.json").write_text(json.dumps({"kinds": corpus.kinds}), encoding="utf-8")
            _save(cache_dir / f"flags-{part_key}.npy", np.asarray(corpus.flags)[rows])
            _save(cache_dir / f"tokens-{part_key}.npy", np.asarray(corpus.tokens)[rows])
    return _load(cache_dir, keys[0]), _load(cache_dir, keys[1])


@dataclass
class PackedData:
    """Fixed-length sequences over the training token stream (its last partial sequence dropped), then
    the held-out stream's sequences (the last one padded). ``documents``: positions restart and attention
    stays within each document (``trainer/packing.py``)."""

    tokens: np.ndarray
    flags: np.ndarray
    seq_len: int
    eos_id: int
    documents: bool = False
    eval_tokens: np.ndarray | None = None
    eval_flags: np.ndarray | None = None

    def __post_init__(self) -> None:
        self._counts: np.ndarray | None = None

    @property
    def n_train(self) -> int:
        return len(self.tokens) // self.seq_len

    @property
    def n_eval(self) -> int:
        return 0 if self.eval_tokens is None else -(-len(self.eval_tokens) // self.seq_len)

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_eval

    def _window(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = np.asarray(index, dtype=np.int64)
        held = index >= self.n_train
        if held.any():
            if not held.all() or self.eval_tokens is None or self.eval_flags is None:
                raise IndexError("a batch mixes training and held-out sequences")
            starts = (index - self.n_train) * self.seq_len
            return packing.window(self.eval_tokens, self.eval_flags, starts, self.seq_len, self.eos_id)
        return packing.window(self.tokens, self.flags, index * self.seq_len, self.seq_len, self.eos_id)

    def sequences(self, index: Any) -> np.ndarray:
        return self._window(np.asarray(index))[0]

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        ids, fl = self._window(index)
        out = {
            "input_ids": torch.from_numpy(ids),
            "targets": torch.from_numpy(packing.targets_of(ids, fl, self.documents)),
        }
        if self.documents:
            positions, docs = packing.document_layout(fl)
            out["position_ids"], out["document_ids"] = torch.from_numpy(positions), torch.from_numpy(docs)
        return out

    def step_targets(self, index: np.ndarray) -> int:
        """Loss targets in the training sequences ``index`` (what normalises a step's gradient)."""
        if self._counts is None:
            self._counts = packing.target_counts(self.flags, self.n_train, self.seq_len, self.documents)
        return int(self._counts[np.asarray(index, dtype=np.int64)].sum())


def pack(
    corpus: Corpus, seq_len: int, eos_id: int, documents: bool = False, held_out: Corpus | None = None
) -> PackedData:
    data = PackedData(
        corpus.tokens,
        corpus.flags,
        seq_len,
        eos_id,
        documents,
        held_out.tokens if held_out is not None else None,
        held_out.flags if held_out is not None else None,
    )
    if data.n_train < 1:
        raise ValueError(f"corpus too small: {len(corpus.tokens)} tokens give no training sequence of {seq_len}")
    return data


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass
class Position:
    epoch: int = 0
    offset: int = 0  # samples of the epoch's permutation consumed so far (all ranks together)


class StepPlan(torch.utils.data.Dataset):
    """Item ``i`` is micro-batch ``i`` of this rank from ``start`` onwards, over as many epochs as needed.

    A pure function of (seed, epoch, position, shapes), so the same plan rebuilt after a resume yields
    the same batches. Items are dicts of CPU tensors: input_ids, targets, position_ids and document_ids
    (documents kept apart), sample_ids.
    """

    def __init__(
        self,
        data: Data,
        seed: int,
        start: Position,
        micro_batch: int,
        grad_accum: int,
        world: int,
        rank: int,
        n_steps: int,
    ) -> None:
        self.data, self.seed, self.mb, self.accum = data, seed, micro_batch, grad_accum
        self.world, self.rank = world, rank
        self.global_batch = micro_batch * grad_accum * world
        if self.global_batch > data.n_train:
            raise ValueError(f"global batch {self.global_batch} exceeds the {data.n_train} training sequences")
        self.steps: list[Position] = []  # start position of each optimizer step
        pos = Position(start.epoch, start.offset)
        while len(self.steps) < n_steps:
            if pos.offset + self.global_batch > data.n_train:
                pos = Position(pos.epoch + 1, 0)
                continue
            self.steps.append(pos)
            pos = Position(pos.epoch, pos.offset + self.global_batch)
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.steps) * self.accum

    def position_after(self, step_index: int) -> Position:
        pos = self.steps[step_index]
        return Position(pos.epoch, pos.offset + self.global_batch)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = epoch_permutation(self.seed, epoch, self.data.n_train)
            self._perm_epoch = epoch
        return self._perm

    def indices(self, i: int) -> np.ndarray:
        step, k = divmod(i, self.accum)
        pos = self.steps[step]
        first = pos.offset + (k * self.world + self.rank) * self.mb
        return self._permutation(pos.epoch)[first : first + self.mb]

    def step_targets(self, step_index: int) -> int:
        """The loss targets of optimizer step ``step_index`` over all ranks and micro-batches (every rank
        computes the same number, without communication): one per example for classification."""
        if not isinstance(self.data, PackedData):
            return self.global_batch
        pos = self.steps[step_index]
        return self.data.step_targets(self._permutation(pos.epoch)[pos.offset : pos.offset + self.global_batch])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        idx = self.indices(i)
        item = self.data.batch(idx)
        item["sample_ids"] = torch.from_numpy(np.asarray(idx, dtype=np.int64))
        return item


# -- sequence classification ------------------------------------------------------------------------


def iter_labelled(files: list[Path], text_field: str, label_field: str) -> Iterator[tuple[str, Any]]:
    """(text, raw label) per JSONL line; classification needs JSONL."""
    for f in files:
        if f.suffix != ".jsonl":
            raise ValueError(f"{f}: --task seq-cls needs JSONL files with {text_field!r} and {label_field!r} fields")
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj = json.loads(line)
                for name in (text_field, label_field):
                    if name not in obj:
                        raise ValueError(f"{f}:{n}: no field {name!r}")
                yield str(obj[text_field]), obj[label_field]


def label_names(raw: list[Any]) -> list[str]:
    """Class names in id order, a pure function of the label set: integers sorted numerically
    (so labels 0..K-1 keep their ids), anything else sorted as strings."""
    values = set(raw)
    for v in values:
        if isinstance(v, (dict, list)) or v is None:
            raise ValueError(f"labels must be integers or strings, got {v!r}")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [str(v) for v in sorted(values)]
    return sorted({str(v) for v in values})


@dataclass
class ClassificationData:
    """One row per example: ``seq_len`` token ids (right-padded with ``pad_id``), the real length and
    the label id. ``order`` is a fixed shuffle of the examples; its last ``n_eval`` are held out."""

    rows: np.ndarray
    order: np.ndarray
    seq_len: int
    pad_id: int
    n_eval: int
    labels: list[str]
    eos_id: int = -1

    @property
    def n_total(self) -> int:
        return len(self.order)

    @property
    def n_train(self) -> int:
        return self.n_total - self.n_eval

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.labels))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.labels)}

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        rows = np.asarray(self.rows[self.order[np.asarray(index, dtype=np.int64)]], dtype=np.int64)
        ids = torch.from_numpy(rows[:, : self.seq_len])
        lengths = torch.from_numpy(rows[:, self.seq_len])
        mask = (torch.arange(self.seq_len)[None, :] < lengths[:, None]).long()
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.from_numpy(rows[:, self.seq_len + 1])}


# What the loop trains on: packed text or one row per classified example (both index as StepPlan needs).
Data = PackedData | ClassificationData


def classification_cached(
    files: list[Path], tokenizer: Any, text_field: str, label_field: str, seq_len: int, cache_dir: Path
) -> tuple[np.ndarray, list[str]]:
    """Tokenised, truncated and padded examples as a memory-mapped ``[N, seq_len + 2]`` array (built once)."""
    h = hashlib.sha256(cache_key(files, tokenizer, text_field).encode())
    h.update(f"seq-cls|{label_field}|{seq_len}|{tokenizer.pad_token_id}".encode())
    key = h.hexdigest()[:24]
    path = cache_dir / f"cls-{key}.npy"
    names_path = cache_dir / f"cls-{key}.labels.json"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        examples = list(iter_labelled(files, text_field, label_field))
        if not examples:
            raise ValueError(f"no examples in {[str(f) for f in files]}")
        names = label_names([label for _, label in examples])
        ids_of = {name: i for i, name in enumerate(names)}
        rows = np.full((len(examples), seq_len + 2), tokenizer.pad_token_id, dtype=np.int64)
        for n, (text, label) in enumerate(examples):
            ids = tokenizer.encode_truncated(text, seq_len)[:seq_len] or [tokenizer.pad_token_id]
            rows[n, : len(ids)] = ids
            rows[n, seq_len] = len(ids)
            rows[n, seq_len + 1] = ids_of[str(label)]
        dtype = np.int32 if max(tokenizer.vocab_size, seq_len) < 2**31 else np.int64
        names_path.write_text(json.dumps(names), encoding="utf-8")
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, rows.astype(dtype))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return np.load(path, mmap_mode="r"), json.loads(names_path.read_text(encoding="utf-8"))


def split_classification(
    rows: np.ndarray, labels: list[str], seq_len: int, pad_id: int, eval_fraction: float, seed: int
) -> ClassificationData:
    n_total = len(rows)
    n_eval = int(n_total * eval_fraction) if eval_fraction > 0 else 0
    if eval_fraction > 0 and n_total >= 4:
        n_eval = max(1, n_eval)
    # Files are often grouped by class: hold out a fixed random subset, not the tail.
    order = np.random.default_rng([seed, 2**31 - 1]).permutation(n_total)
    data = ClassificationData(rows, order, seq_len, pad_id, n_eval, labels)
    if data.n_train < 1:
        raise ValueError(f"{n_total} examples leave none for training")
    return data


def eval_batches(data: Data, micro_batch: int, n_batches: int, rank: int = 0, world: int = 1) -> list[np.ndarray]:
    """Held-out sequences in fixed order, split across ranks."""
    idx = np.arange(data.n_train, data.n_total)[rank::world]
    out = [idx[i : i + micro_batch] for i in range(0, len(idx), micro_batch)]
    return [b for b in out if len(b)][:n_batches]


def make_loader(
    plan: StepPlan, device: torch.device, num_workers: int, local_world: int
) -> torch.utils.data.DataLoader:
    if num_workers < 0:
        num_workers = 0 if device.type == "cpu" else max(0, min(4, (os.cpu_count() or 1) // max(1, local_world) - 1))
    kwargs: dict[str, Any] = {}
    if num_workers > 0:
        # One loader iterates the whole run (all epochs), so persistent workers are not needed.
        kwargs.update(prefetch_factor=4, persistent_workers=False)
    # A private generator: creating the iterator must not draw from the global torch RNG, or the
    # dropout stream after a resume would differ from the uninterrupted run.
    generator = torch.Generator().manual_seed(plan.seed)
    return torch.utils.data.DataLoader(
        plan,
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
        generator=generator,
        **kwargs,
    )
