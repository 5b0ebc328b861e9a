"""How close the planner's speed and memory come to published training runs nobody here measured.

Reads ``tests/data/published/`` (see its README for the sources and how each figure was measured) and
prints, per source and overall, the mean absolute percentage error and the worst row of

- speed: predicted vs published tokens/s per GPU,
- memory: predicted vs published peak GiB per GPU,

and a leave-one-source-out (LOSO) error for speed: the step model's parameters are fitted on every
source but one and scored on the one left out, which is what a user's new model meets.

    .venv/bin/python tests/benchmarks/planner_accuracy.py            # the table
    .venv/bin/python tests/benchmarks/planner_accuracy.py --json     # the figures as JSON
    .venv/bin/python tests/benchmarks/planner_accuracy.py --fit      # refit the shipped parameters
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplanner.plan.catalog import GpuSpec, load_catalog
from gpuplanner.plan.memory import estimate_memory, trainable_params
from gpuplanner.plan.model_spec import ModelSpec, from_config
from gpuplanner.plan.setup import TrainSetup

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
GIB = 1024**3
# Checkpointing names the sources use, as the planner's settings. torchtitan's "selective op" keeps
# every matmul output and recomputes only cheap element-wise ops: no recompute FLOPs worth counting
# (speed), and about half the activations of no checkpointing (memory).
SPEED_CHECKPOINTING = {"none": "none", "full": "full", "every-other": "every-other", "selective-op": "none"}
MEMORY_CHECKPOINTING = {"none": "none", "full": "full", "every-other": "every-other", "selective-op": "every-other"}
ATTENTION = {"flash": "sdpa", "sdpa": "sdpa", "eager": "eager"}


@dataclass(frozen=True)
class Row:
    source: str
    spec: ModelSpec
    gpu: GpuSpec
    setup: TrainSetup
    trainable: int
    measured: float
    label: str


def _models() -> dict[str, ModelSpec]:
    raw = json.loads((DATA / "models.json").read_text())
    return {
        name: from_config({k: v for k, v in cfg.items() if not k.startswith("_")}, name) for name, cfg in raw.items()
    }


def _setup(rec: dict[str, str], checkpointing: dict[str, str]) -> TrainSetup:
    targets = tuple(rec["lora_targets"].split()) if rec.get("lora_targets") else ("q_proj", "v_proj")
    return TrainSetup(
        method=rec["method"],
        lora_rank=int(rec["lora_rank"] or 16),
        lora_targets=targets,
        precision=rec["precision"],
        optimizer=rec["optimizer"],
        micro_batch=int(rec["micro_batch"]),
        grad_accum=int(rec["grad_accum"]),
        seq_len=int(rec["seq_len"]),
        grad_checkpointing=checkpointing[rec["checkpointing"]],
        attention=ATTENTION[rec["attention"]],
        gpus=int(rec["gpus"]),
        sharding=rec["sharding"],
    )


def _rows(file: str, checkpointing: dict[str, str], value: Callable[[dict[str, str]], float]) -> list[Row]:
    models = _models()
    catalog = load_catalog()
    rows = []
    with (DATA / file).open(newline="") as handle:
        for rec in csv.DictReader(handle):
            spec = models[rec["model"]]
            setup = _setup(rec, checkpointing)
            label = (
                f"{rec['model']} {rec['method']} {rec['gpus']}x{rec['gpu']} mb{rec['micro_batch']} "
                f"seq{rec['seq_len']} ckpt={rec['checkpointing']}"
            )
            rows.append(
                Row(
                    rec["source"],
                    spec,
                    catalog.gpu(rec["gpu"]),
                    setup,
                    trainable_params(spec, setup),
                    value(rec),
                    label,
                )
            )
    return rows


def speed_rows() -> list[Row]:
    return _rows("speed.csv", SPEED_CHECKPOINTING, lambda rec: float(rec["tokens_per_s_per_gpu"]))


def _peak_gib(rec: dict[str, str]) -> float:
    value = float(rec["peak"])
    return value * 1e9 / GIB if rec["unit"] == "GB" else value


def memory_rows() -> list[Row]:
    return _rows("memory.csv", MEMORY_CHECKPOINTING, _peak_gib)


# ------------------------------------------------------------------------------------ predictions


def predict_speed(row: Row, params: object | None = None) -> float:
    """Predicted tokens/s per GPU for a row (the planner's own estimate, with ``params`` if given)."""
    from gpuplanner.plan import throughput

    kwargs = {} if params is None else {"speed_model": params}
    result = throughput.estimate_throughput(row.spec, row.setup, row.gpu, row.trainable, **kwargs)
    return result.tokens_per_s / row.setup.gpus


def predict_memory(row: Row) -> float:
    return estimate_memory(row.spec, row.setup).total / GIB


# ------------------------------------------------------------------------------------ scoring


@dataclass(frozen=True)
class Score:
    rows: int
    mape: float  # mean absolute percentage error, %
    worst_pct: float  # signed % error of the worst row
    worst_label: str


def score(pairs: Iterable[tuple[Row, float]]) -> Score:
    errors = [((pred / row.measured - 1.0) * 100.0, row.label) for row, pred in pairs]
    worst = max(errors, key=lambda e: abs(e[0]))
    return Score(len(errors), sum(abs(e) for e, _ in errors) / len(errors), worst[0], worst[1])


def by_source(rows: Sequence[Row], predict: Callable[[Row], float]) -> dict[str, Score]:
    out: dict[str, list[tuple[Row, float]]] = {}
    for row in rows:
        out.setdefault(row.source, []).append((row, predict(row)))
    scores = {source: score(pairs) for source, pairs in sorted(out.items())}
    scores["overall (rows)"] = score(pair for pairs in out.values() for pair in pairs)
    return scores


def source_mean(scores: dict[str, Score]) -> float:
    """Mean of the per-source errors: each source counts once, however many rows it has."""
    values = [s.mape for name, s in scores.items() if not name.startswith("overall")]
    return sum(values) / len(values)


def loso(rows: Sequence[Row]) -> dict[str, Score] | None:
    """Fit on every source but one, score on that one. None where the model has nothing to fit."""
    try:
        from gpuplanner.plan.speed_fit import fit_params
    except ImportError:
        return None
    sources = sorted({row.source for row in rows})
    scores: dict[str, Score] = {}
    pairs_all: list[tuple[Row, float]] = []
    for held in sources:
        train = [r for r in rows if r.source != held]
        params = fit_params([(r.spec, r.setup, r.gpu, r.trainable, r.measured, r.source) for r in train])
        pairs = [(r, predict_speed(r, params)) for r in rows if r.source == held]
        scores[held] = score(pairs)
        pairs_all += pairs
    scores["overall (rows)"] = score(pairs_all)
    return scores


def _print_table(title: str, scores: dict[str, Score]) -> None:
    print(f"\n{title}")
    print(f"  {'source':<24} {'rows':>5} {'MAE %':>7} {'worst %':>8}  worst row")
    for name, s in scores.items():
        print(f"  {name:<24} {s.rows:>5} {s.mape:>7.1f} {s.worst_pct:>+8.1f}  {s.worst_label}")
    print(f"  {'mean over sources':<24} {'':>5} {source_mean(scores):>7.1f}")


def run(as_json: bool = False) -> dict[str, float]:
    speed = speed_rows()
    memory = memory_rows()
    speed_scores = by_source(speed, predict_speed)
    memory_scores = by_source(memory, predict_memory)
    loso_scores = loso(speed)
    figures = {
        "speed_mape": speed_scores["overall (rows)"].mape,
        "speed_mape_by_source": source_mean(speed_scores),
        "memory_mape": memory_scores["overall (rows)"].mape,
        "memory_mape_by_source": source_mean(memory_scores),
        "speed_loso_mape": loso_scores["overall (rows)"].mape if loso_scores else math.nan,
        "speed_loso_mape_by_source": source_mean(loso_scores) if loso_scores else math.nan,
        "speed_rows": len(speed),
        "memory_rows": len(memory),
    }
    if as_json:
        print(json.dumps(figures, indent=2))
        return figures
    _print_table("Speed: tokens/s per GPU, planner vs published", speed_scores)
    if loso_scores:
        _print_table("Speed, leave-one-source-out (fitted without the source scored)", loso_scores)
    _print_table("Memory: peak GiB per GPU, planner vs published", memory_scores)
    print()
    for key, value in figures.items():
        print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the overall figures as JSON")
    parser.add_argument("--fit", action="store_true", help="fit the step model on every source and print the values")
    args = parser.parse_args(argv)
    if args.fit:
        from gpuplanner.plan.speed_fit import fit_params, params_toml

        rows = speed_rows()
        params = fit_params([(r.spec, r.setup, r.gpu, r.trainable, r.measured, r.source) for r in rows])
        print(params_toml(params))
        return 0
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
