"""Fitting the step model's few constants to measured training speeds.

Used by ``tests/benchmarks/planner_accuracy.py --fit`` to produce ``resources/catalog/speed_model.toml``
from the published runs, by its leave-one-source-out check, and by calibration
(:func:`efficiency_scale`), which corrects the matmul efficiency from the user's own measurements.

The objective is a weighted mean over sources of each source's mean absolute log(predicted /
measured), each source weighted by the square root of its rows: a source with hundreds of rows is
more evidence than one with three, but still one lab's software and hardware, so it must not drown
the others. The absolute (not squared) log error is the robust choice: a source whose software runs
far from the rest (Hugging Face fine-tuning at 1.5-2.5x the optimised stacks' step time) moves the
shared constants as much as any other source, not by the square of its distance. A Nelder-Mead
search in log space finds the minimum from fixed starting values (:data:`START`); the result does
not depend on the values in the shipped file. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplanner.plan.speed_params import DEFAULT_GENERATION, SpeedModel, generation_efficiency, load_speed_model
from gpuplanner.plan.step_model import StepParams, StepWork, step_time, step_work

# Constants the fit moves (the others in [shared] are stated assumptions).
FITTED_SHARED = ("hidden_half", "tokens_half", "attention_efficiency", "elementwise_bytes", "launch_s_per_layer")
BOUNDS = {
    "hidden_half": (1.0, 8192.0),
    "tokens_half": (1.0, 8192.0),
    "attention_efficiency": (0.2, 1.5),
    "elementwise_bytes": (0.01, 64.0),
    # 50-150 kernels per layer for forward and backward at 5-10 us of launch each, partly hidden
    # behind the GPU's work: at most about 1 ms per layer per micro-step
    "launch_s_per_layer": (1e-5, 1e-3),
    "adapter_bytes": (0.1, 512.0),
    "matmul_efficiency": (0.05, 1.0),
}
MAX_ROUNDS = 200
# Physically plausible starting values and prior centres (the fit does not depend on the shipped
# file): GEMMs with a dimension under ~512 leave A100/H100 tiles half idle; fused attention kernels
# reach about 70% of the matmul efficiency; fused element-wise kernels move a few bytes per element;
# a layer's forward and backward launch ~100 kernels at ~1 us of exposed launch each.
START = {
    "hidden_half": 512.0,
    "tokens_half": 512.0,
    "attention_efficiency": 0.7,
    "elementwise_bytes": 4.0,
    "launch_s_per_layer": 1e-4,
}
START_EFFICIENCY = 0.5
# Constants that are counted or assumed, not fitted (see resources/catalog/speed_model.toml).
ASSUMED = {"adapter_bytes": 40.0, "bandwidth_efficiency": 0.8, "overlap": 0.8, "fp32_efficiency": 0.9}
MIN_SOURCES_PER_GENERATION = 2
# each source weighs (its rows) ** this: 0.5 = the square root
WEIGHT_EXPONENT = 0.0
# Weight of a log-normal prior that pulls the shared constants toward START: with 30 rows outside
# one lab's pre-training runs the data alone lets attention and element-wise costs absorb other
# effects; the prior keeps them near physics unless the data insists (0.07 minimised the
# leave-one-source-out error among 0, 0.001-0.3 while keeping the fit within 15%).
PRIOR_WEIGHT = 0.07


@dataclass(frozen=True)
class _Prepared:
    work: StepWork
    architecture: str
    compute_capability: str
    network_gbs: float
    measured: float  # tokens/s per GPU
    source: str


def _prepare(rows: Iterable[Sequence[Any]], base: SpeedModel) -> list[_Prepared]:
    """Rows as (model, setup, gpu, trainable_params, measured tokens/s per GPU, source)."""
    out = []
    for model, setup, gpu, trainable, measured, source in rows:
        quantized = int(getattr(model, "quantizable_params", 0))
        work = step_work(model, setup, gpu, trainable, quantized)
        out.append(
            _Prepared(
                work,
                getattr(gpu, "architecture", ""),
                str(getattr(gpu, "compute_capability", "") or ""),
                base.network_for(gpu),
                float(measured),
                source,
            )
        )
    return out


def _params(shared: dict[str, float], efficiency: float, network: float) -> StepParams:
    return StepParams(matmul_efficiency=efficiency, network_gbs=network, **shared)


def _predict(
    row: _Prepared,
    shared: dict[str, float],
    generations: dict[str, float],
    made: dict[tuple[str, str, float], StepParams] | None = None,
) -> float:
    """The row's tokens/s under these values; ``made`` keeps the parameters already built for a GPU generation
    and network during one evaluation (a fit evaluates every row thousands of times)."""
    key = (row.architecture, row.compute_capability, row.network_gbs)
    params = made.get(key) if made is not None else None
    if params is None:
        eff = generation_efficiency(generations, row.architecture, row.compute_capability)
        params = _params(shared, eff, row.network_gbs)
        if made is not None:
            made[key] = params
    return step_time(row.work, params).tokens_per_s


def _objective(rows: list[_Prepared], shared: dict[str, float], generations: dict[str, float]) -> float:
    per_source: dict[str, list[float]] = {}
    made: dict[tuple[str, str, float], StepParams] = {}
    for row in rows:
        predicted = _predict(row, shared, generations, made)
        per_source.setdefault(row.source, []).append(abs(math.log(predicted / row.measured)))
    total = weight = 0.0
    for values in per_source.values():
        w = len(values) ** WEIGHT_EXPONENT
        total += w * sum(values) / len(values)
        weight += w
    return total / weight


def _geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _nelder_mead(
    f: Callable[[list[float]], float], x0: list[float], scale: float = 0.4, iterations: int = 1500
) -> list[float]:
    """Minimise ``f`` from ``x0`` with the Nelder-Mead simplex (standard coefficients)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (scale if i == k else 0.0) for i, x in enumerate(x0)] for k in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < 1e-10:
            break
        centroid = [sum(p[i] for p in simplex[:-1]) / n for i in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2.0 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p, strict=True)] for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


def fit_params(rows: Iterable[Sequence[Any]], base: SpeedModel | None = None) -> SpeedModel:
    """Constants that best reproduce the measured speeds of ``rows``.

    Generations with rows from fewer than :data:`MIN_SOURCES_PER_GENERATION` sources are not fitted
    (one lab's software would set the whole generation's efficiency); they take the default, the
    geometric mean of the fitted generations.
    """
    base = base or load_speed_model()
    prepared = _prepare(rows, base)
    if not prepared:
        return base
    sources_by_gen: dict[str, set[str]] = {}
    for row in prepared:
        sources_by_gen.setdefault(row.architecture, set()).add(row.source)
    fitted_gens = sorted(g for g, src in sources_by_gen.items() if len(src) >= MIN_SOURCES_PER_GENERATION)
    keys = list(FITTED_SHARED) + [f"gen:{g}" for g in fitted_gens]

    def bounds(key: str) -> tuple[float, float]:
        return BOUNDS["matmul_efficiency" if key.startswith("gen:") else key]

    def unpack(x: list[float]) -> tuple[dict[str, float], dict[str, float]]:
        shared = dict(ASSUMED)
        generations: dict[str, float] = {}
        for key, value in zip(keys, x, strict=True):
            low, high = bounds(key)
            value = min(max(math.exp(value), low), high)
            if key.startswith("gen:"):
                generations[key[4:]] = value
            else:
                shared[key] = value
        generations[DEFAULT_GENERATION] = _geomean(generations.values()) if generations else START_EFFICIENCY
        return shared, generations

    def objective(x: list[float]) -> float:
        shared, generations = unpack(x)
        prior = sum(math.log(shared[k] / START[k]) ** 2 for k in FITTED_SHARED)
        return _objective(prepared, shared, generations) + PRIOR_WEIGHT * prior

    x0 = [math.log(START[k]) for k in FITTED_SHARED] + [math.log(START_EFFICIENCY)] * len(fitted_gens)
    best = _nelder_mead(objective, x0)
    best = _nelder_mead(objective, best, scale=0.1)  # restart: the simplex may have collapsed early
    shared, generations = unpack(best)
    return base.with_values(shared, generations)


def fit_error_pct(rows: Iterable[Sequence[Any]], model: SpeedModel) -> float:
    """Mean absolute % error of ``model`` on ``rows`` (rows weighted equally)."""
    prepared = _prepare(rows, model)
    errors = [
        abs(_predict(r, dict(model.shared), dict(model.generations)) / r.measured - 1.0) * 100.0 for r in prepared
    ]
    return sum(errors) / len(errors)


def efficiency_scale(rows: Iterable[Sequence[Any]], model: SpeedModel | None = None) -> float:
    """The factor on the matmul efficiency that best matches measured runs (geometric mean of the ratios).

    Each row's speed is found by bisection on the factor, since memory-bound time does not scale with
    it; the result is the geometric mean of the per-row factors, kept within 0.25-4.
    """
    model = model or load_speed_model()
    factors = []
    for row in _prepare(rows, model):
        eff = model.efficiency_for(row.architecture, row.compute_capability)
        low, high = 0.25, 4.0
        for _ in range(40):
            mid = math.sqrt(low * high)
            params = _params(dict(model.shared), min(eff * mid, 1.0), row.network_gbs)
            if step_time(row.work, params).tokens_per_s < row.measured:
                low = mid
            else:
                high = mid
        factors.append(math.sqrt(low * high))
    return _geomean(factors) if factors else 1.0


def params_toml(model: SpeedModel) -> str:
    """The [shared] and [generation.*] tables of ``speed_model.toml`` for a fitted model."""
    lines = ["[shared]"]
    for key, value in model.shared.items():
        lines.append(f"{key} = {value:.6g}")
    for gen, value in model.generations.items():
        name = gen if gen.replace("_", "").isalnum() else f'"{gen}"'
        lines += ["", f"[generation.{name}]", f"matmul_efficiency = {value:.4f}"]
    return "\n".join(lines)
