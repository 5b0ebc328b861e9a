"""Training throughput: how many tokens per second a setup trains, and where that figure came from.

In order of trust: a figure the user measured, a calibration from the run history, or the step model
(:mod:`gpuplanner.plan.step_model`): compute at a size-dependent matmul efficiency, memory-bound work
at the HBM bandwidth and exposed communication, with constants fitted on published training runs
(``resources/catalog/speed_model.toml``). A user-given MFU replaces the model with
peak x MFU / model FLOPs per token.

MFU counts the model's FLOPs only (6 per parameter per token to train); recomputed activations are
hardware FLOPs (HFU) and never make a run look more efficient than it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from gpuplanner.plan import engines
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.speed_params import SpeedModel, load_speed_model
from gpuplanner.plan.step_model import (
    FORWARD_FLOPS_PER_PARAM,
    GpuLike,
    ModelShape,
    StepParams,
    StepTime,
    StepWork,
    hardware_flops_per_token,
    matmul_efficiency,
    matmul_params,
    matmul_peak_tflops,
    model_flops_per_token,
    step_time,
    step_work,
)

__all__ = ["FORWARD_FLOPS_PER_PARAM", "matmul_params"]
# Share of a DDP/ZeRO-2 gradient all-reduce hidden behind the backward pass of the last micro-step
# (bucketed all-reduce starts as soon as the first buckets are ready).
BACKWARD_OVERLAP = 0.8
# FSDP prefetches the next layer's gather during compute; most of it hides when compute is long.
FSDP_OVERLAP = 0.8
# PyTorch keeps TF32 off for fp32 matmuls by default, so fp32 training runs at the fp32 peak unless
# the setup turns TF32 on (step_model.matmul_peak_tflops).
PRECISION_TO_PEAK = {"fp32": "fp32", "fp16-mixed": "fp16", "bf16-mixed": "bf16", "bf16": "bf16"}


class GpuPeaks(GpuLike, Protocol):
    """What the throughput estimate reads of a GPU beyond the step model's GpuLike."""

    @property
    def architecture(self) -> str: ...
    @property
    def interconnect(self) -> str: ...


@dataclass(frozen=True)
class Throughput:
    """Training speed over all GPUs of the run."""

    tokens_per_s: float
    samples_per_min: float
    source: str
    mfu: float | None = None
    flops_per_token: float | None = None
    scaling_efficiency: float = 1.0
    hfu: float | None = None
    step: StepTime | None = None  # the parts of one optimizer step on one GPU (model estimates only)
    uncertainty_pct: float | None = None  # likely error of this speed, mean absolute % (None: measured)


def flops_per_token(model: ModelShape, setup: TrainSetup, trainable_params: int) -> float:
    """Training FLOPs per token: forward + backward (+ recomputation) of matmuls and attention.

    Full training: forward 2N, backward 4N (gradients of activations and of weights) = 6N.
    Adapters only: the frozen weights need no weight gradients, so backward is about 2N: 4N in all,
    plus 6 per trainable adapter parameter. Full activation recomputation adds one forward (8N);
    every-other-layer recomputation adds half of one. Attention scores and their use cost
    4 x layers x seq x (heads x head_dim) per token forward (PaLM's accounting), 3x that to train.
    """
    n = matmul_params(model)
    forward = FORWARD_FLOPS_PER_PARAM * n
    if setup.uses_adapters:
        base = 2.0 * forward + 6.0 * trainable_params  # forward 2N + activation gradients 2N
    else:
        base = 3.0 * forward
    attention_forward = 4.0 * model.num_layers * setup.seq_len * model.num_heads * model.head_dim
    # selective checkpointing keeps every matmul and attention output: no matmul FLOPs are recomputed
    recompute_share = {"none": 0.0, "full": 1.0, "every-other": 0.5, "selective": 0.0}[setup.grad_checkpointing]
    return base + recompute_share * forward + attention_forward * (3.0 + recompute_share)


def model_flops_per_token_of(model: ModelShape, setup: TrainSetup, trainable_params: int) -> float:
    """Training FLOPs per token without recomputation: what MFU counts."""
    return flops_per_token(model, replace(setup, grad_checkpointing="none"), trainable_params)


def gradient_sync_bytes(setup: TrainSetup, trainable_params: int) -> float:
    """Bytes of gradients each GPU sends per optimizer step in a ring all-reduce or reduce-scatter."""
    # Gradients follow the trained parameters' dtype: fp32 masters under mixed precision and fp32.
    grad_bytes = 2.0 if setup.precision == "bf16" else 4.0
    n = setup.gpus
    return 2.0 * (n - 1) / n * trainable_params * grad_bytes


def scaling_efficiency(
    setup: TrainSetup,
    trainable_params: int,
    total_params: int,
    step_compute_s: float,
    interconnect_gbs: float,
) -> float:
    """Compute time / (compute + exposed communication) for one optimizer step on ``setup.gpus`` GPUs.

    DDP and ZeRO-2 move 2(n-1)/n x gradient bytes per step; it overlaps the backward of the last
    micro-step. FSDP also gathers the 16-bit weights twice per micro-step (forward and backward)
    and reduce-scatters gradients, overlapping most of it with compute through prefetching.
    """
    n = setup.gpus
    if n <= 1 or step_compute_s <= 0:
        return 1.0
    bandwidth = max(interconnect_gbs, 1e-3) * 1e9
    comm_s = gradient_sync_bytes(setup, trainable_params) / bandwidth
    if setup.sharding == "fsdp":
        gather_bytes = 2.0 * (n - 1) / n * total_params * 2.0 * setup.grad_accum
        comm_s += gather_bytes / bandwidth
        hidden_s = FSDP_OVERLAP * step_compute_s
    else:
        backward_last_micro_s = step_compute_s / setup.grad_accum * (2.0 / 3.0)
        hidden_s = BACKWARD_OVERLAP * backward_last_micro_s
    exposed = max(comm_s - hidden_s, 0.0)
    return step_compute_s / (step_compute_s + exposed)


def quantized_params(model: ModelShape) -> int:
    """Parameters QLoRA stores in 4 bits (the matmul parameters when the model does not say)."""
    return int(getattr(model, "quantizable_params", matmul_params(model)))


def bounded_step(
    model: ModelShape, setup: TrainSetup, gpu: GpuPeaks, trainable_params: int, params: StepParams, quantized: int
) -> tuple[StepWork, StepTime, bool]:
    """The step model's work and time of ``setup``; for LoRA/QLoRA never longer than a full fine-tune of the
    same model, GPU, batch and engine (True when that bound applied).

    A LoRA step skips the frozen weights' gradient GEMMs and their optimizer update; the adapter traffic
    counted instead (every adapter kernel unfused, nothing kept in cache) is an upper bound, and where it
    would outweigh what LoRA skips, no published run shows it (torchtune on an RTX A6000: LoRA 1.8x the
    full fine-tune's tokens/s): the plan then takes the full fine-tune's step time.
    """
    work = step_work(model, setup, gpu, trainable_params, quantized)
    time = step_time(work, params)
    if not setup.uses_adapters:
        return work, time, False
    full = replace(setup, method="full")
    full_work = step_work(model, full, gpu, int(getattr(model, "n_params", trainable_params)), 0)
    full_time = step_time(full_work, params)
    if full_time.step_s < time.step_s:
        return work, full_time, True
    return work, time, False


def step_model_tokens_per_s(
    model: ModelShape, setup: TrainSetup, gpu: GpuPeaks, trainable_params: int, params: StepParams, quantized: int
) -> float:
    """Only the tokens/s over all GPUs of :func:`estimate_throughput`'s step model (same figure), for
    callers that rank many settings by speed (``compare`` fitting settings) and need nothing else."""
    return bounded_step(model, setup, gpu, trainable_params, params, quantized)[1].tokens_per_s * setup.gpus


def _given_mfu_throughput(
    model: ModelShape, setup: TrainSetup, gpu: GpuPeaks, trainable_params: int, mfu: float
) -> Throughput:
    """Peak x the user's MFU over the model FLOPs per token (recomputation is not model work)."""
    if not 0.0 < mfu <= 1.0:
        raise PlanInputError("mfu", f"must be between 0 and 1 (a share of the peak), got {mfu!r}")
    peak = matmul_peak_tflops(gpu, setup) * 1e12
    model_flops = model_flops_per_token_of(model, setup, trainable_params)
    hardware = flops_per_token(model, setup, trainable_params)
    per_gpu_tokens_s = peak * mfu / model_flops
    tokens_per_step_per_gpu = setup.micro_batch * setup.grad_accum * setup.seq_len
    step_compute_s = tokens_per_step_per_gpu / per_gpu_tokens_s
    efficiency = scaling_efficiency(setup, trainable_params, model.n_params, step_compute_s, gpu.interconnect_gbs)
    tokens_s = per_gpu_tokens_s * setup.gpus * efficiency
    source = f"estimate: {gpu.name} peak {peak / 1e12:.0f} TFLOP/s x MFU {mfu:.2f} (given)"
    if setup.gpus > 1:
        source += f", scaling efficiency {efficiency:.0%} over {setup.gpus} GPUs"
    return Throughput(
        tokens_per_s=tokens_s,
        samples_per_min=tokens_s / setup.seq_len * 60.0,
        source=source,
        mfu=mfu,
        flops_per_token=hardware,
        scaling_efficiency=efficiency,
        hfu=mfu * hardware / model_flops,
        uncertainty_pct=load_speed_model().loso_pct,
    )


# step_params' answers: (id of the speed model, what params_for reads of the GPU, scale) -> (model, params)
_PARAMS: dict[tuple[int, str, str, str, float], tuple[SpeedModel, StepParams]] = {}
MAX_CACHED_PARAMS = 256


def step_params(fitted: SpeedModel, gpu: GpuPeaks, efficiency_scale: float = 1.0) -> StepParams:
    """``fitted.params_for(gpu, efficiency_scale=...)``, remembered: a comparison asks it for every option
    and fitting candidate, and the answer depends only on the speed model and the GPU's architecture, name
    and interconnect. The entry holds the speed model itself, so its id cannot be reused while cached."""
    key = (
        id(fitted),
        str(getattr(gpu, "name", "")),
        str(getattr(gpu, "architecture", "")),
        str(getattr(gpu, "interconnect", "pcie")),
        efficiency_scale,
    )
    found = _PARAMS.get(key)
    if found is not None and found[0] is fitted:
        return found[1]
    params = fitted.params_for(gpu, efficiency_scale=efficiency_scale)
    if len(_PARAMS) >= MAX_CACHED_PARAMS:
        _PARAMS.clear()
    _PARAMS[key] = (fitted, params)
    return params


def estimate_throughput(
    model: ModelShape,
    setup: TrainSetup,
    gpu: GpuPeaks,
    trainable_params: int,
    mfu: float | None = None,
    *,
    speed_model: SpeedModel | None = None,
    efficiency_scale: float = 1.0,
    uncertainty_pct: float | None = None,
) -> Throughput:
    """Tokens/s over all GPUs: the step model, or peak x a given MFU.

    ``efficiency_scale`` multiplies the fitted matmul efficiency (a calibration from a measured run);
    ``uncertainty_pct`` overrides the model's own likely error (its leave-one-source-out error).
    """
    if mfu is not None:
        return _given_mfu_throughput(model, setup, gpu, trainable_params, mfu)
    fitted = speed_model or load_speed_model()
    params = step_params(fitted, gpu, efficiency_scale)
    work, time, bounded = bounded_step(model, setup, gpu, trainable_params, params, quantized_params(model))
    per_gpu = time.tokens_per_s
    tokens_s = per_gpu * setup.gpus
    mfu_model = model_flops_per_token(work) * per_gpu / work.peak_flops
    hfu = hardware_flops_per_token(work) * per_gpu / work.peak_flops
    efficiency = (time.step_s - time.communication_s) / time.step_s
    source = (
        f"estimate: {gpu.name} step model, matmuls at {matmul_efficiency(work, params):.0%} of "
        f"{work.peak_flops / 1e12:.0f} TFLOP/s, MFU {mfu_model:.2f}, HFU {hfu:.2f}"
    )
    if setup.gpus > 1:
        source += f", scaling efficiency {efficiency:.0%} over {setup.gpus} GPUs"
    if bounded:
        source += ", LoRA bounded by the full fine-tune's step time"
    architecture = str(getattr(gpu, "architecture", ""))
    note = fitted.unfitted_note(gpu)
    if note:
        source += f"; {note}"
    return Throughput(
        tokens_per_s=tokens_s,
        samples_per_min=tokens_s / setup.seq_len * 60.0,
        source=source,
        mfu=mfu_model,
        flops_per_token=hardware_flops_per_token(work),
        scaling_efficiency=efficiency,
        hfu=hfu,
        step=time,
        uncertainty_pct=(
            fitted.uncertainty_for(engines.speed_regime(setup.engine, setup.method), architecture)
            if uncertainty_pct is None
            else uncertainty_pct
        ),
    )


def measured_throughput(
    setup: TrainSetup,
    tokens_per_s: float | None = None,
    samples_per_min: float | None = None,
    source: str = "measured (given by the user)",
) -> Throughput:
    """A throughput the user (or the history) measured for the whole run, in tokens/s or samples/min."""
    if tokens_per_s is not None:
        if not tokens_per_s > 0:
            raise PlanInputError("tokens-per-s", f"must be a positive number, got {tokens_per_s!r}")
        return Throughput(tokens_per_s, tokens_per_s / setup.seq_len * 60.0, source)
    if samples_per_min is not None:
        if not samples_per_min > 0:
            raise PlanInputError("samples-per-min", f"must be a positive number, got {samples_per_min!r}")
        return Throughput(samples_per_min * setup.seq_len / 60.0, samples_per_min, source)
    raise PlanInputError("tokens-per-s", "give a measured --tokens-per-s or --samples-per-min")
