"""Training documents as users have them: text files, JSONL rows, Parquet files and Hugging Face
``datasets`` saved to disk, read into :class:`Document` values (text, prompt/response, or a chat).

A ``.txt``/``.md`` file is one document. A row (JSONL line, Parquet row, dataset row) is one document,
by the first of its shapes that it has:

- ``messages``: a chat, a list of ``{"role", "content"}`` (roles system, user, assistant, tool) with at
  least one assistant turn;
- ``prompt`` and ``response``;
- ``instruction`` and ``output`` (with an optional ``input``, joined to the instruction by a blank line);
- the text field (``--text-field``, default ``text``).

Anything else is mis-shaped: :class:`DataError`, one line naming the file, the line (or row) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEXT_SUFFIXES = (".txt", ".md")
ROW_SUFFIXES = (".jsonl", ".parquet")
ROLES = ("system", "user", "assistant", "tool")
# the files that make a folder a Hugging Face dataset saved with save_to_disk
DATASET_MARKERS = ("dataset_dict.json", "state.json")


class DataError(ValueError):
    """Unreadable or mis-shaped data: one line naming the file, the line or row, and the field."""


@dataclass(frozen=True)
class Document:
    """One training document. ``kind``: ``text`` (all of it trained), ``pair`` (``prompt`` then
    ``response``) or ``chat`` (``messages`` as (role, content) pairs). ``where`` names its file and line."""

    where: str
    kind: str
    text: str = ""
    prompt: str = ""
    response: str = ""
    messages: tuple[tuple[str, str], ...] = ()


def is_dataset_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in DATASET_MARKERS)


def data_files(paths: list[str]) -> list[Path]:
    """The files (and saved datasets) named by ``paths``; a folder gives its text, JSONL and Parquet files
    (sorted), or itself when it is a saved Hugging Face dataset."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if is_dataset_dir(path):
            files.append(path)
        elif path.is_dir():
            files.extend(sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES + ROW_SUFFIXES))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"data not found: {p}")
    if not files:
        raise FileNotFoundError(f"no .txt, .md, .jsonl or .parquet files in {paths}")
    return files


def _string(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: {field}: must be a string, got {type(value).__name__}")
    return value


def row_document(row: Any, where: str, text_field: str) -> Document:
    """The document of one row (a JSON object, a Parquet or dataset row as a dict)."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be an object with fields, got {type(row).__name__}")
    if row.get("messages") is not None:
        return _chat(row["messages"], where)
    if row.get("prompt") is not None or row.get("response") is not None:
        for name in ("prompt", "response"):
            if row.get(name) is None:
                raise DataError(f"{where}: {name}: missing (a prompt/response row needs both)")
        prompt = _string(row["prompt"], where, "prompt")
        return Document(where, "pair", prompt=prompt, response=_string(row["response"], where, "response"))
    if row.get("instruction") is not None or row.get("output") is not None:
        for name in ("instruction", "output"):
            if row.get(name) is None:
                raise DataError(f"{where}: {name}: missing (an instruction row needs instruction and output)")
        prompt = _string(row["instruction"], where, "instruction")
        extra = row.get("input")
        if extra is not None and _string(extra, where, "input").strip():
            prompt = f"{prompt}\n\n{extra}"
        return Document(where, "pair", prompt=prompt, response=_string(row["output"], where, "output"))
    if text_field in row:
        return Document(where, "text", text=_string(row[text_field], where, text_field))
    raise DataError(f"{where}: no field {text_field!r} (nor 'messages', 'prompt'/'response' or 'instruction'/'output')")


def _chat(messages: Any, where: str) -> Document:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: messages: must be a non-empty list of {{role, content}} objects")
    out: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(m, dict):
            raise DataError(f"{where}: {field}: must be an object with role and content, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise DataError(f"{where}: {field}.role: must be one of {', '.join(ROLES)}, got {role!r}")
        if "content" not in m:
            raise DataError(f"{where}: {field}.content: missing")
        out.append((role, _string(m["content"], where, f"{field}.content")))
    if not any(role == "assistant" for role, _ in out):
        raise DataError(f"{where}: messages: no assistant turn (nothing to train on)")
    return Document(where, "chat", messages=tuple(out))


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None


def _jsonl(path: Path, text_field: str) -> Iterator[Document]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{where}: not UTF-8 text (byte {exc.start} of the line)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
            yield row_document(row, where, text_field)


def _parquet(path: Path, text_field: str) -> Iterator[Document]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow: pip install pyarrow") from None
    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 (pyarrow raises several kinds for a broken file)
        raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    n = 0
    for batch in reader.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            n += 1
            yield row_document(row, f"{path}:row {n}", text_field)


def _saved_dataset(path: Path, text_field: str) -> Iterator[Document]:
    try:
        import datasets
    except ImportError:
        raise DataError(f"{path}: a saved Hugging Face dataset needs datasets: pip install datasets") from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 (a broken folder raises several kinds)
        raise DataError(f"{path}: not a readable saved dataset ({type(exc).__name__}: {exc})") from None
    split = ""
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded)
        if "train" in loaded:
            split = "train"
        elif len(names) == 1:
            split = names[0]
        else:
            raise DataError(f"{path}: the dataset has splits {', '.join(names)} and none is 'train'")
        loaded = loaded[split]
    label = f"{path}[{split}]" if split else str(path)
    for n, row in enumerate(loaded, 1):
        yield row_document(row, f"{label}:row {n}", text_field)


def iter_documents(files: list[Path], text_field: str) -> Iterator[Document]:
    """Every document of ``files`` in order (see the module's doc for the shapes)."""
    for f in files:
        if is_dataset_dir(f):
            yield from _saved_dataset(f, text_field)
        elif f.suffix == ".jsonl":
            yield from _jsonl(f, text_field)
        elif f.suffix == ".parquet":
            yield from _parquet(f, text_field)
        else:
            text = _read_text(f)
            if text.strip():
                yield Document(str(f), "text", text=text.strip("\n"))


def source_files(files: list[Path]) -> list[Path]:
    """The files whose bytes define the data (a saved dataset's own files), for cache keys."""
    out: list[Path] = []
    for f in files:
        out.extend(sorted(p for p in f.rglob("*") if p.is_file()) if f.is_dir() else [f])
    return out
