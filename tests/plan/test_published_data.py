"""The published-run files (tests/data/published) hold together: every ``speed*.csv`` / ``memory*.csv`` has
the columns of ``speed.csv`` / ``memory.csv``, every row names a model of ``models.json``, a catalog GPU, an
engine the planner knows, a citation and its figure, and every model config cites where it came from.

A file added with a column missing, a model without a config or a row without its source would otherwise be
read with blanks by the accuracy benchmark (tests/benchmarks/planner_accuracy.py) and scored as if complete.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpuplanner.plan.catalog import load_catalog
from gpuplanner.plan.engines import ENGINE_NAMES

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
METHODS = {"full", "lora", "qlora"}


def _header(path: Path) -> list[str]:
    with path.open(newline="") as handle:
        return next(csv.reader(handle))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("prefix,value", [("speed", "tokens_per_s_per_gpu"), ("memory", "peak")])
def test_every_file_has_the_base_columns_and_complete_rows(prefix: str, value: str) -> None:
    base = _header(DATA / f"{prefix}.csv")
    assert base[-1] == "engine"
    models = json.loads((DATA / "models.json").read_text())
    gpus = {gpu.name for gpu in load_catalog().gpus}
    files = sorted(DATA.glob(f"{prefix}*.csv"))
    assert len(files) >= 2  # the base file and the fine-tuning sources' file
    for path in files:
        assert _header(path) == base, path.name
        rows = _rows(path)
        assert rows, path.name
        for number, row in enumerate(rows, start=2):
            where = f"{path.name} line {number}"
            assert row["model"] in models, where
            assert row["gpu"] in gpus, where
            assert row["engine"] in ENGINE_NAMES, where
            assert row["method"] in METHODS, where
            assert row["source"] and row["citation"], where
            assert float(row[value]) > 0, where
            assert int(row["gpus"]) >= 1 and int(row["micro_batch"]) >= 1 and int(row["seq_len"]) >= 1, where
            if row["method"] != "full":
                assert int(row["lora_rank"]) >= 1 and row["lora_targets"], where


def test_fine_tuning_sources_are_new_and_none_dominates() -> None:
    """The fine-tuning files bring sources of their own, each a minority of the fine-tuning rows."""
    base = {row["source"] for name in ("speed.csv", "memory.csv") for row in _rows(DATA / name)}
    finetune = [row for name in ("speed_finetune.csv", "memory_finetune.csv") for row in _rows(DATA / name)]
    sources = {row["source"] for row in finetune}
    assert len(sources) >= 4 and not sources & base
    assert len(finetune) >= 30
    for source in sources:
        assert sum(row["source"] == source for row in finetune) <= len(finetune) / 2, source


def test_every_model_config_cites_its_source() -> None:
    for name, config in json.loads((DATA / "models.json").read_text()).items():
        assert config.get("_source"), name
        assert config["hidden_size"] > 0 and config["num_hidden_layers"] > 0 and config["vocab_size"] > 0, name
