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

Rows measured by this project on a GPU (``tests/data/measured/gpu_check.csv``, written by
``python3 -m tests.gpu.check --record``) are scored in tables of their own, never mixed with the
published sources (and not fitted on): "no measured rows yet" until a GPU run is recorded.
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
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.model_spec import from_config
from gpuplanner.plan.setup import TrainSetup

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"
GIB = 1024**3
# Checkpointing names the sources use, as the planner's settings. torchtitan's "selective op" keeps the
# outputs of every other matmul and of flash attention, and recomputes the rest of each block in the
# backward. Speed: counted as no recompute (the shipped step model was fitted that way). Memory: the
# planner's selective checkpointing with torchtitan's policy (activation_ledger.SELECTIVE_ALTERNATE_MATMUL).
SPEED_CHECKPOINTING = {"none": "none", "full": "full", "every-other": "every-other", "selective-op": "none"}
MEMORY_CHECKPOINTING = {"none": "none", "full": "full", "every-other": "every-other", "selective-op": "selective"}
SELECTIVE_POLICY = {"selective-op": "alternate-matmul"}
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
    loss: str = "fp32"  # how the run's loss treats the logits (memory rows; see memory.LOSS_KINDS)
    measure: str = "nvidia-smi"  # what the published peak counts (memory rows; see memory.MEASURES)
    selective_policy: str = "every-matmul"  # memory rows; see activation_ledger.SELECTIVE_POLICIES
    mixed_precision: str = "autocast"  # memory rows; see memory.MIXED_PRECISION_KINDS
    fsdp_accumulation: str = "reduce-each"  # memory rows; see memory.FSDP_ACCUMULATION_KINDS


def _models(untied: bool = False) -> dict[str, ModelSpec]:
    """The dataset's models; ``untied``: as run by code that keeps a separate output head where the
    config ties it to the input embedding (LitGPT, see the dataset README)."""
    raw = json.loads((DATA / "models.json").read_text())
    out = {}
    for name, cfg in raw.items():
        fields = {k: v for k, v in cfg.items() if not k.startswith("_")}
        if untied:
            fields["tie_word_embeddings"] = False
        out[name] = from_config(fields, name)
    return out


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
    models = {False: _models(), True: _models(untied=True)}
    catalog = load_catalog()
    rows = []
    with (DATA / file).open(newline="") as handle:
        for rec in csv.DictReader(handle):
            spec = models[rec.get("untied_head") == "true"][rec["model"]]
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
                    rec.get("loss") or "fp32",
                    rec.get("measure") or "nvidia-smi",
                    SELECTIVE_POLICY.get(rec["checkpointing"], "every-matmul"),
                    rec.get("mixed_precision") or "autocast",
                    rec.get("fsdp_accumulation") or "reduce-each",
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


def measured_rows(csv_path: Path | None = None) -> tuple[list[Row], list[Row]]:
    """The GPU check's measured rows of the bundled engine (``tests/data/measured/gpu_check.csv``):
    (speed: tokens/s of one GPU, memory: peak allocated GiB). One source per GPU and date."""
    csv_path = csv_path or MEASURED / "gpu_check.csv"
    if not csv_path.exists():
        return [], []
    raw = json.loads((MEASURED / "models.json").read_text())
    models = {
        name: from_config({k: v for k, v in cfg.items() if not k.startswith("_")}, name) for name, cfg in raw.items()
    }
    catalog = load_catalog()
    speed: list[Row] = []
    memory: list[Row] = []
    with csv_path.open(newline="") as handle:
        for rec in csv.DictReader(handle):
            if rec["engine"] != "bundled":  # the planner has no hf-trainer engine to score yet
                continue
            spec = models[rec["shape"]]
            setup = TrainSetup(
                method=rec["method"],
                lora_rank=int(rec["lora_rank"] or 16),
                lora_targets=tuple(rec["lora_targets"].split()) or ("q_proj", "k_proj", "v_proj", "o_proj"),
                precision=rec["precision"],
                micro_batch=int(rec["micro_batch"]),
                seq_len=int(rec["seq_len"]),
                grad_checkpointing=rec["checkpointing"],
            )
            gpu = catalog.gpu(rec["gpu_catalog"])
            source = f"gpu-check {gpu.name} {rec['date']}"
            label = f"{rec['config']} ({rec['commit'][:10]})"
            trainable = trainable_params(spec, setup)
            speed.append(Row(source, spec, gpu, setup, trainable, float(rec["tokens_per_s"]), label))
            if rec["peak_allocated_gib"]:
                memory.append(
                    Row(
                        source,
                        spec,
                        gpu,
                        setup,
                        trainable,
                        float(rec["peak_allocated_gib"]),
                        label,
                        measure="allocated",
                    )
                )
    return speed, memory


def measured_figures(csv_path: Path | None = None) -> dict[str, dict[str, Score]]:
    """The measured rows' tables (empty without rows)."""
    speed, memory = measured_rows(csv_path)
    tables = {}
    if speed:
        tables["Measured here (GPU check): tokens/s per GPU, planner vs measured"] = by_source(speed, predict_speed)
    if memory:
        tables["Measured here (GPU check): peak allocated GiB, planner vs measured"] = by_source(memory, predict_memory)
    return tables


# ------------------------------------------------------------------------------------ predictions


def predict_speed(row: Row, params: object | None = None) -> float:
    """Predicted tokens/s per GPU for a row (the planner's own estimate, with ``params`` if given)."""
    from gpuplanner.plan import throughput

    kwargs = {} if params is None else {"speed_model": params}
    result = throughput.estimate_throughput(row.spec, row.setup, row.gpu, row.trainable, **kwargs)
    return result.tokens_per_s / row.setup.gpus


def predict_memory(row: Row) -> float:
    """Predicted peak GiB per GPU, as the row's source measured it (allocated, active, reserved, nvidia-smi)."""
    breakdown = estimate_memory(
        row.spec,
        row.setup,
        loss=row.loss,
        selective_policy=row.selective_policy,
        mixed_precision=row.mixed_precision,
        fsdp_accumulation=row.fsdp_accumulation,
    )
    return breakdown.measured(row.measure) / GIB


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


def _fit_rows(rows: Iterable[Row]) -> list[tuple]:
    return [(r.spec, r.setup, r.gpu, r.trainable, r.measured, r.source) for r in rows]


def loso(rows: Sequence[Row]) -> tuple[dict[str, Score], dict[str, Score]] | None:
    """Fit on every source but one and score on that one; then calibrate on one row per model of that
    source (the planner's calibration from a measured run) and score its other rows.

    Returns (plain, calibrated) scores; None where the model has nothing to fit.
    """
    try:
        from gpuplanner.plan.speed_fit import efficiency_scale, fit_params
    except ImportError:
        return None
    from gpuplanner.plan import throughput

    sources = sorted({row.source for row in rows})
    plain: dict[str, Score] = {}
    calibrated: dict[str, Score] = {}
    plain_all: list[tuple[Row, float]] = []
    calibrated_all: list[tuple[Row, float]] = []
    for held in sources:
        params = fit_params(_fit_rows(r for r in rows if r.source != held))
        held_rows = [r for r in rows if r.source == held]
        pairs = [(r, predict_speed(r, params)) for r in held_rows]
        plain[held] = score(pairs)
        plain_all += pairs
        by_model: dict[str, list[Row]] = {}
        for r in held_rows:
            by_model.setdefault(r.spec.name, []).append(r)
        cal_pairs = []
        for group in by_model.values():
            if len(group) < 2:
                continue
            scale = efficiency_scale(_fit_rows(group[:1]), params)
            for r in group[1:]:
                result = throughput.estimate_throughput(
                    r.spec, r.setup, r.gpu, r.trainable, speed_model=params, efficiency_scale=scale
                )
                cal_pairs.append((r, result.tokens_per_s / r.setup.gpus))
        if cal_pairs:
            calibrated[held] = score(cal_pairs)
            calibrated_all += cal_pairs
    plain["overall (rows)"] = score(plain_all)
    calibrated["overall (rows)"] = score(calibrated_all)
    return plain, calibrated


def _print_table(title: str, scores: dict[str, Score]) -> None:
    print(f"\n{title}")
    print(f"  {'source':<24} {'rows':>5} {'MAE %':>7} {'worst %':>8}  worst row")
    for name, s in scores.items():
        print(f"  {name:<24} {s.rows:>5} {s.mape:>7.1f} {s.worst_pct:>+8.1f}  {s.worst_label}")
    print(f"  {'mean over sources':<24} {'':>5} {source_mean(scores):>7.1f}")


def figures() -> tuple[dict[str, float], dict[str, dict[str, Score]]]:
    """The overall figures and the per-source tables."""
    speed = speed_rows()
    memory = memory_rows()
    tables = {
        "Speed: tokens/s per GPU, planner vs published": by_source(speed, predict_speed),
        "Memory: peak GiB per GPU, planner vs published": by_source(memory, predict_memory),
    }
    result = loso(speed)
    speed_scores = tables["Speed: tokens/s per GPU, planner vs published"]
    memory_scores = tables["Memory: peak GiB per GPU, planner vs published"]
    overall = {
        "speed_mape": speed_scores["overall (rows)"].mape,
        "speed_mape_by_source": source_mean(speed_scores),
        "memory_mape": memory_scores["overall (rows)"].mape,
        "memory_mape_by_source": source_mean(memory_scores),
        "speed_loso_mape": math.nan,
        "speed_loso_mape_by_source": math.nan,
        "speed_calibrated_mape": math.nan,
        "speed_rows": len(speed),
        "memory_rows": len(memory),
    }
    if result:
        plain, calibrated = result
        tables["Speed, leave-one-source-out (fitted without the source scored)"] = plain
        tables["Speed, leave-one-source-out, calibrated on one row per model of the source"] = calibrated
        overall["speed_loso_mape"] = plain["overall (rows)"].mape
        overall["speed_loso_mape_by_source"] = source_mean(plain)
        overall["speed_calibrated_mape"] = calibrated["overall (rows)"].mape
    return overall, tables


def run(as_json: bool = False) -> dict[str, float]:
    overall, tables = figures()
    if as_json:
        print(json.dumps(overall, indent=2))
        return overall
    for title, scores in tables.items():
        _print_table(title, scores)
    measured = measured_figures()
    for title, scores in measured.items():
        _print_table(title, scores)
    if not measured:
        print("\nMeasured here (tests/data/measured/gpu_check.csv): no measured rows yet")
    print()
    for key, value in overall.items():
        print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    return overall


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
