"""The model shapes the GPU check trains: Llama-style config.json files with random weights.

Nothing downloads: the shapes are ``tests/data/measured/models.json`` (Llama 3.2 1B and Llama 3.1 8B as
their published config.json files give them; ``_source`` cites each), the trainer builds the model from
them (``--model-config``), and ``tests/benchmarks/planner_accuracy.py`` reads the same file to score the
measured rows. The dry run's stand-ins keep the architecture at a size a CPU trains in a moment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODELS = Path(__file__).resolve().parents[1] / "data" / "measured" / "models.json"
_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 320,
    "max_position_embeddings": 512,
    "bos_token_id": 256,
    "eos_token_id": 256,
}
DRY_RUN = {
    "llama-1b": _TINY,
    "llama-8b": {**_TINY, "hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 3},
}


def published() -> dict[str, dict[str, Any]]:
    """The shapes by name, as config.json fields (the ``_``-prefixed notes left out)."""
    raw = json.loads(MODELS.read_text(encoding="utf-8"))
    return {name: {k: v for k, v in cfg.items() if not k.startswith("_")} for name, cfg in raw.items()}


SHAPES = tuple(published())


def shape(name: str, dry_run: bool) -> dict[str, Any]:
    fields = published()[name]
    return {**fields, **DRY_RUN[name]} if dry_run else fields


def write_config(name: str, dry_run: bool, folder: Path) -> Path:
    """``folder/NAME.json``: the config.json the trainer, Hugging Face and the planner all read."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{'-tiny' if dry_run else ''}.json"
    path.write_text(json.dumps(shape(name, dry_run), indent=2) + "\n", encoding="utf-8")
    return path
