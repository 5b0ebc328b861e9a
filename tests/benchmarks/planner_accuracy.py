"""How close the planner's speed and memory come to published training runs nobody here measured.

Reads every ``speed*.csv`` and ``memory*.csv`` of ``tests/data/published/`` (see its README for the sources,
how each figure was measured and how rows are chosen) and plans each row as a user would: the row's
user-settable fields (model config, method, precision, optimizer, batch, sequence, checkpointing, attention,
GPUs, sharding and ``engine``) become the same :class:`~gpuplanner.plan.inputs.PlanInputs` that
``gpuplanner plan --json`` builds from its flags; nothing else reaches the planner. It prints, per source and
overall,

- speed: predicted vs published tokens/s per GPU,
- memory: predicted vs published peak GiB per GPU (as the source measured it: allocated, active, reserved),

the mean absolute percentage error with the worst row of each source, the mean over sources (every source
counts once: the headline) beside the row-weighted figure, a leave-one-source-out (LOSO) error for speed
(the step model refitted on every source but one and scored on the one left out, which is what a user's
new stack meets) and the band coverage: the share of rows whose published speed lies inside the P10-P90
band the plan shows (LOSO predictions, the band the plan would give).

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
import functools
import json
import math
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, Python puts this folder first on the path, and an installed gpuplanner (another
# checkout's editable install) would be scored instead of this checkout's: the repository root goes first.
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path[:1]:
    sys.path.insert(0, str(REPO))

from gpuplanner.plan.catalog import GpuSpec, load_catalog  # noqa: E402
from gpuplanner.plan.engines import REGIMES, speed_regime  # noqa: E402
from gpuplanner.plan.inputs import PlanInputs  # noqa: E402
from gpuplanner.plan.memory import estimate_memory, trainable_params  # noqa: E402
from gpuplanner.plan.model_shape import ModelSpec  # noqa: E402
from gpuplanner.plan.model_spec import from_config  # noqa: E402
from gpuplanner.plan.setup import TrainSetup  # noqa: E402

try:  # the band's widening factor (issue 24 item 3), beside this file
    from tests.benchmarks import band_calibration
except ImportError:  # run as a script: this folder is on sys.path, the repository root may not be
    import band_calibration  # type: ignore[no-redef]

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"
GIB = 1024**3
# Checkpointing names the sources use, as the planner's settings: torchtitan's "selective op" is the
# planner's selective checkpointing (the torchtitan engine keeps every other matmul output, as its policy).
CHECKPOINTING = {"none": "none", "full": "full", "every-other": "every-other", "selective-op": "selective"}
ATTENTION = {"flash": "sdpa", "sdpa": "sdpa", "eager": "eager"}
SPEED_TITLE = "Speed: tokens/s per GPU, planner vs published"
MEMORY_TITLE = "Memory: peak GiB per GPU, planner vs published"
LOSO_TITLE = "Speed, leave-one-source-out (fitted without the source scored)"
CALIBRATED_TITLE = "Speed, leave-one-source-out, calibrated on one row per model of the source"
# Share of left-out rows a plan's P10-P90 speed band is set to hold
BAND_SHARE = 0.8


@dataclass(frozen=True)
class Row:
    source: str
    spec: ModelSpec
    gpu: GpuSpec
    setup: TrainSetup
    trainable: int
    measured: float
    label: str
    measure: str = "nvidia-smi"  # what the published peak counts (memory rows; see memory.MEASURES)
    lengths: str = "fixed"  # memory rows: the source's batches of fixed or varying length (blank: fixed)


@functools.lru_cache(maxsize=1)
def _config_dir() -> Path:
    """Each model of models.json written as the ``config.json`` a user would pass to ``--model-config``."""
    root = Path(tempfile.mkdtemp(prefix="planner-accuracy-"))
    for name, cfg in json.loads((DATA / "models.json").read_text()).items():
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if not k.startswith("_")}))
    return root


def user_inputs(rec: dict[str, str]) -> PlanInputs:
    """The inputs ``gpuplanner plan`` builds from the flags that describe this row (and nothing else)."""
    return PlanInputs(
        model_config=str(_config_dir() / rec["model"] / "config.json"),
        method=rec["method"],
        lora_rank=int(rec["lora_rank"] or 16),
        lora_targets=tuple(rec["lora_targets"].split()) if rec.get("lora_targets") else PlanInputs().lora_targets,
        precision=rec["precision"],
        optimizer=rec["optimizer"],
        micro_batch=int(rec["micro_batch"]),
        grad_accum=int(rec["grad_accum"]),
        seq_len=int(rec["seq_len"]),
        grad_checkpointing=CHECKPOINTING[rec["checkpointing"]],
        attention=ATTENTION[rec["attention"]],
        gpu=rec["gpu"],
        gpus=int(rec["gpus"]),
        sharding=rec["sharding"],
        engine=rec["engine"],
        compile=rec.get("compile") == "true",
    )


def _files(prefix: str) -> list[Path]:
    """``speed.csv`` and every ``speed_*.csv`` (or memory's), in name order."""
    return sorted(DATA.glob(f"{prefix}*.csv"))


def _rows(prefix: str, value: Callable[[dict[str, str]], float]) -> list[Row]:
    catalog = load_catalog()
    rows = []
    for path in _files(prefix):
        with path.open(newline="") as handle:
            for rec in csv.DictReader(handle):
                request = user_inputs(rec).to_request(default_gpu=None)
                assert request.gpu is not None
                label = (
                    f"{rec['model']} {rec['method']} {rec['gpus']}x{rec['gpu']} mb{rec['micro_batch']} "
                    f"seq{rec['seq_len']} ckpt={rec['checkpointing']}"
                )
                rows.append(
                    Row(
                        rec["source"],
                        request.model,
                        catalog.gpu(request.gpu),
                        request.setup,
                        trainable_params(request.model, request.setup),
                        value(rec),
                        label,
                        rec.get("measure") or "nvidia-smi",
                        rec.get("lengths") or "fixed",
                    )
                )
    return rows


def speed_rows() -> list[Row]:
    return _rows("speed", lambda rec: float(rec["tokens_per_s_per_gpu"]))


def _peak_gib(rec: dict[str, str]) -> float:
    value = float(rec["peak"])
    return value * 1e9 / GIB if rec["unit"] == "GB" else value


def memory_rows() -> list[Row]:
    return _rows("memory", _peak_gib)


def measured_rows(csv_path: Path | None = None) -> tuple[list[Row], list[Row]]:
    """The GPU check's measured rows (``tests/data/measured/gpu_check.csv``), each planned on the engine it ran
    (``bundled`` or ``hf-trainer``): (speed: tokens/s of one GPU, memory: peak allocated GiB). One source per
    GPU and date."""
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
            spec = models[rec["shape"]]
            setup = TrainSetup(
                method=rec["method"],
                lora_rank=int(rec["lora_rank"] or 16),
                lora_targets=tuple(rec["lora_targets"].split()) or ("q_proj", "k_proj", "v_proj", "o_proj"),
                precision=rec["precision"],
                micro_batch=int(rec["micro_batch"]),
                seq_len=int(rec["seq_len"]),
                grad_checkpointing=rec["checkpointing"],
                engine=rec["engine"],
            )
            gpu = catalog.gpu(rec["gpu_catalog"])
            source = f"gpu-check {gpu.name} {rec['date']}"
            label = f"{rec['config']} on {rec['engine']} ({rec['commit'][:10]})"
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
    capacity = int(row.gpu.memory_gib * GIB)  # the allocator releases its cache before it reserves more
    return estimate_memory(row.spec, row.setup).measured(row.measure, row.lengths, capacity) / GIB


def allocator_fit(rows: Sequence[Row]) -> dict[str, Any]:
    """The caching allocator's shares (gpuplanner/plan/memory_allocator.py) fitted over every row that reports
    reserved memory, fixed-shape rows first, then variable-length ones on top, each with its LOSO errors."""
    from gpuplanner.plan import memory_allocator as alloc

    fixed: list[alloc.Sample] = []
    variable: list[alloc.Sample] = []
    for row in (r for r in rows if r.measure == "reserved"):
        b = estimate_memory(row.spec, row.setup)
        sample = alloc.Sample(row.source, b.allocated + b.stream_pools, b.transient, row.measured * GIB)
        cap = row.gpu.memory_gib * GIB - b.cuda_context  # the most the allocator can reserve
        (variable if row.lengths == "variable" else fixed).append(alloc.Sample(**{**vars(sample), "cap": cap}))
    share = alloc.fit_share(fixed)
    return {
        "fixed": share,
        "fixed_loso": alloc.loso(fixed, alloc.fit_share),
        "variable": alloc.fit_share(variable, share),
        "variable_loso": alloc.loso(variable, lambda rest: alloc.fit_share(rest, share), share),
    }


# ------------------------------------------------------------------------------------ scoring


@dataclass(frozen=True)
class Score:
    rows: int
    mape: float  # mean absolute percentage error, %
    worst_pct: float  # signed % error of the worst row
    worst_label: str
    covered: float = math.nan  # share of rows inside the plan's P10-P90 band (speed), %


def score(pairs: Iterable[tuple[Row, float]], inside: Iterable[bool] = ()) -> Score:
    errors = [((pred / row.measured - 1.0) * 100.0, row.label) for row, pred in pairs]
    worst = max(errors, key=lambda e: abs(e[0]))
    flags = list(inside)
    covered = 100.0 * sum(flags) / len(flags) if flags else math.nan
    return Score(len(errors), sum(abs(e) for e, _ in errors) / len(errors), worst[0], worst[1], covered)


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


def source_coverage(scores: dict[str, Score]) -> float:
    """Mean of the per-source band coverages (each source counts once), %."""
    values = [s.covered for name, s in scores.items() if not name.startswith("overall") and not math.isnan(s.covered)]
    return sum(values) / len(values) if values else math.nan


def _fit_rows(rows: Iterable[Row]) -> list[tuple]:
    return [(r.spec, r.setup, r.gpu, r.trainable, r.measured, r.source) for r in rows]


def regime_of(row: Row) -> str:
    """The regime whose errors set the row's plan's likely range (engines.speed_regime)."""
    return speed_regime(row.setup.engine, row.setup.method)


def _weighted_quantile(values: Sequence[tuple[float, float]], q: float) -> float:
    """The smallest value with at least ``q`` of the total weight at or below it; ``values``: (value, weight)."""
    ordered = sorted(values)
    total = sum(w for _, w in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q * total - 1e-12:
            return value
    return ordered[-1][0]


def band_widths(errors: Sequence[tuple[Row, float]]) -> dict[str, float]:
    """Per regime, the P10-P90 half-width (as a % either side) that holds :data:`BAND_SHARE` of the rows'
    left-out errors, every source weighing the same: ``errors`` are (row, |log(predicted / published)|)."""
    per_source: dict[str, int] = {}
    for row, _ in errors:
        per_source[row.source] = per_source.get(row.source, 0) + 1
    widths = {}
    for regime in REGIMES:
        values = [(e, 1.0 / per_source[r.source]) for r, e in errors if regime_of(r) == regime]
        if values:
            widths[regime] = math.expm1(_weighted_quantile(values, BAND_SHARE)) * 100.0
    return widths


def _width_for(row: Row, widths: dict[str, float], fitted_generations: Iterable[str]) -> float:
    """The band a plan of ``row`` shows with these widths: its regime's, the widest for a GPU generation the
    fit had no rows of (speed_params.SpeedModel.uncertainty_for)."""
    if row.gpu.architecture not in set(fitted_generations) or regime_of(row) not in widths:
        return max(widths.values())
    return widths[regime_of(row)]


def loso(rows: Sequence[Row]) -> tuple[dict[str, Score], dict[str, Score], dict[str, float]] | None:
    """Fit on every source but one and score on that one; then calibrate on one row per model of that
    source (the planner's calibration from a measured run) and score its other rows.

    Band coverage is left-out too: the held source's rows are checked against the band widths set from
    the other sources' left-out errors (:func:`band_widths`). Returns (plain, calibrated, the widths from
    every source's left-out errors: what speed_model.toml ships); None where the model has nothing to fit.
    """
    try:
        from gpuplanner.plan.speed_fit import efficiency_scale, fit_params
    except ImportError:
        return None
    from gpuplanner.plan import throughput

    sources = sorted({row.source for row in rows})
    predicted: dict[str, list[tuple[Row, float]]] = {}
    fitted: dict[str, Iterable[str]] = {}
    calibrated: dict[str, Score] = {}
    calibrated_all: list[tuple[Row, float]] = []
    for held in sources:
        params = fit_params(_fit_rows(r for r in rows if r.source != held))
        fitted[held] = [g for g in params.generations if params.is_fitted(g)]
        held_rows = [r for r in rows if r.source == held]
        predicted[held] = [(r, predict_speed(r, params)) for r in held_rows]
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
    errors = {held: [(r, abs(math.log(p / r.measured))) for r, p in pairs] for held, pairs in predicted.items()}
    plain: dict[str, Score] = {}
    plain_all: list[tuple[Row, float]] = []
    inside_all: list[bool] = []
    for held in sources:
        # widths from the other sources' left-out errors, widened by the factor they give (band_calibration)
        others = {source: values for source, values in errors.items() if source != held}
        widths = band_calibration.calibrated_widths(others, fitted, band_widths, _width_for, BAND_SHARE)
        inside = [e <= math.log1p(_width_for(r, widths, fitted[held]) / 100.0) for r, e in errors[held]]
        plain[held] = score(predicted[held], inside)
        plain_all += predicted[held]
        inside_all += inside
    plain["overall (rows)"] = score(plain_all, inside_all)
    calibrated["overall (rows)"] = score(calibrated_all)
    return plain, calibrated, band_calibration.calibrated_widths(errors, fitted, band_widths, _width_for, BAND_SHARE)


def _print_table(title: str, scores: dict[str, Score]) -> None:
    band = any(not math.isnan(s.covered) for s in scores.values())
    print(f"\n{title}")
    head = f"  {'source':<24} {'rows':>5} {'MAE %':>7}" + (f" {'in band':>8}" if band else "")
    print(f"{head} {'worst %':>8}  worst row")
    for name, s in scores.items():
        cells = f"  {name:<24} {s.rows:>5} {s.mape:>7.1f}" + (f" {s.covered:>7.0f}%" if band else "")
        print(f"{cells} {s.worst_pct:>+8.1f}  {s.worst_label}")
    tail = f"  {'mean over sources':<24} {'':>5} {source_mean(scores):>7.1f}"
    print(tail + (f" {source_coverage(scores):>7.0f}%" if band else ""))


def figures() -> tuple[dict[str, float], dict[str, dict[str, Score]]]:
    """The overall figures and the per-source tables. Headlines: the means over sources."""
    speed = speed_rows()
    memory = memory_rows()
    speed_scores = by_source(speed, predict_speed)
    memory_scores = by_source(memory, predict_memory)
    tables = {SPEED_TITLE: speed_scores, MEMORY_TITLE: memory_scores}
    result = loso(speed)
    overall = {
        "speed_mape_by_source": source_mean(speed_scores),
        "speed_mape": speed_scores["overall (rows)"].mape,
        "speed_loso_mape_by_source": math.nan,
        "speed_loso_mape": math.nan,
        "speed_band_coverage": math.nan,
        "speed_band_coverage_by_source": math.nan,
        "speed_calibrated_mape": math.nan,
        "memory_mape_by_source": source_mean(memory_scores),
        "memory_mape": memory_scores["overall (rows)"].mape,
        "speed_rows": len(speed),
        "memory_rows": len(memory),
        "speed_sources": len({r.source for r in speed}),
        "memory_sources": len({r.source for r in memory}),
    }
    widths: dict[str, float] = {}
    if result:
        plain, calibrated, widths = result
        tables[LOSO_TITLE] = plain
        tables[CALIBRATED_TITLE] = calibrated
        overall["speed_loso_mape"] = plain["overall (rows)"].mape
        overall["speed_loso_mape_by_source"] = source_mean(plain)
        overall["speed_band_coverage"] = plain["overall (rows)"].covered
        overall["speed_band_coverage_by_source"] = source_coverage(plain)
        overall["speed_calibrated_mape"] = calibrated["overall (rows)"].mape
    for regime in REGIMES:
        overall[f"speed_band_pct_{regime}"] = widths.get(regime, math.nan)
    return overall, tables


def uncertainty_toml(overall: dict[str, float]) -> str:
    """The [uncertainty] figures of speed_model.toml from the benchmark's figures (``--fit`` prints them)."""
    from gpuplanner.plan.ranges import uncertainty_for_band

    lines = [
        "[uncertainty]",
        f"loso_pct = {overall['speed_loso_mape']:.1f}",
        f"calibrated_pct = {overall['speed_calibrated_mape']:.1f}",
        "matched_pct = 5.0",
        "",
        "[uncertainty.regime]",
    ]
    for regime in REGIMES:
        band = overall[f"speed_band_pct_{regime}"]
        lines.append(f'"{regime}" = {uncertainty_for_band(band):.1f}  # P10-P90 band +/-{band:.1f}%')
    return "\n".join(lines)


def _print_allocator_fit(fit: dict[str, Any]) -> None:
    """The allocator shares fitted over the reserved rows (memory_allocator.py ships them), with LOSO."""
    print("\nMemory: reserved beyond allocated, as a share of the step's transient bytes (fitted on reserved rows)")
    for kind in ("fixed", "variable"):
        print(f"  {kind}-length batches: share {fit[kind]:.2f}; leave-one-source-out (share without it, MAE %):")
        for source, (share, err) in fit[f"{kind}_loso"].items():
            print(f"    {source:<24} {share:>5.2f} {err:>6.1f}")


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
    _print_allocator_fit(allocator_fit(memory_rows()))
    print()
    for key, value in overall.items():
        print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    return overall


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the overall figures as JSON")
    parser.add_argument("--fit", action="store_true", help="fit the step model on every source and print the values")
    parser.add_argument(
        "--uncertainty", action="store_true", help="with --fit: also print the [uncertainty] figures (a LOSO run)"
    )
    args = parser.parse_args(argv)
    if args.fit:
        from gpuplanner.plan.speed_fit import fit_params, params_toml

        params = fit_params(_fit_rows(speed_rows()))
        print(params_toml(params))
        if args.uncertainty:
            print()
            print(uncertainty_toml(figures()[0]))
        return 0
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
