"""A diagnosis for each alert, from the run's own numbers, with what the suggested change should save.

:class:`RunContext` holds what the history knows of a run (its trainer settings, GPU, price, steps,
memory); :class:`PlannerModel` asks the planner (``gpuplanner.plan``) for the step time and memory of
the run's settings and of a changed version of them. A diagnosis is a plain dict (stored as JSON with
the alert):

- ``cause``: a short name (``input_pipeline``, ``small_micro_batch``, ``memory``, ``power``, ...);
- ``text``: one or two sentences with the run's numbers and the setting to change;
- ``plan_inputs``: the run's settings with the change, named as ``PlanInputs`` fields (what "Carry to
  plan" fills the Plan form with), or None when the planner has nothing to plan;
- ``trainer_settings``: trainer settings the planner does not model (loader workers), or {};
- ``saving_hours``, ``saving_usd``: the expected saving (negative: a cost), None when it cannot be
  estimated; ``basis`` says how: the steps ahead (the remaining steps of a live run, all its steps for
  a rerun of a finished one) x the step-time difference (planner's model or measured) x the price.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplanner.export.human import human_money
from gpuplanner.history.alert_rules import Alert, AlertSettings, gpu_label
from gpuplanner.plan.catalog import CatalogError, GpuSpec, load_catalog
from gpuplanner.plan.inputs import PlanInputs
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.model_spec import from_config
from gpuplanner.plan.planner import make_plan
from gpuplanner.plan.setup import PlanInputError
from trainer.settings import TrainSettings, precision_to_planner
from trainer.spend import cost_for_hours

ACTIVE = ("running", "starting", "preempted")
TARGET_MEM_FRAC = 0.8  # a suggested micro-batch keeps the planner's peak memory under this share


@dataclass(frozen=True)
class RunContext:
    run_id: int
    status: str
    gpu_count: int
    gpu_type: str | None = None  # as recorded (a catalog name or the device's name)
    price: float | None = None  # $ per GPU-hour
    config: Mapping[str, Any] = field(default_factory=dict)  # the trainer's settings (run_start)
    precision: str | None = None  # the precision the trainer ran (run_start), else the configured one
    model_arch: Mapping[str, Any] | None = None  # the model's Hugging Face config (run_start's model_arch)
    cpu_count: int | None = None
    gpus_per_node: int = 1
    steps_done: int | None = None
    steps_total: int | None = None
    step_s: float | None = None  # median measured step time
    tokens_per_s: float | None = None
    peak_mem_frac: float | None = None

    def steps_ahead(self) -> tuple[int | None, str]:
        """The steps a change would speed up: what is left of a live run, or all of a finished one (a rerun)."""
        done = self.steps_done
        if self.status in ACTIVE and self.steps_total and done is not None and self.steps_total > done:
            return self.steps_total - done, f"the remaining {self.steps_total - done:,} steps"
        if done:
            return done, f"a rerun of its {done:,} steps"
        return None, "no steps recorded"


class PlannerModel:
    """The planner's step time and memory for the run's settings and changed ones (None: cannot plan)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.gpu: GpuSpec | None = None
        self.base: PlanInputs | None = None
        self.spec: ModelSpec | None = None  # the model from its recorded architecture (not a preset)
        self.why_not = ""
        self._cache: dict[tuple[tuple[str, Any], ...], Any] = {}
        settings = TrainSettings.from_config(ctx.config)  # the settings contract: one reading of the config
        if not ctx.gpu_type:
            self.why_not = "the run's GPU type is not recorded"
            return
        try:
            self.gpu = load_catalog().find_gpu(ctx.gpu_type)
        except CatalogError as exc:
            self.why_not = f"the GPU catalog cannot be read ({exc})"
            return
        if self.gpu is None:
            self.why_not = f"the catalog does not know the GPU {ctx.gpu_type!r}"
            return
        if ctx.model_arch:
            try:
                self.spec = from_config(ctx.model_arch, settings.model_name, source="the run's recorded config")
            except (PlanInputError, ValueError, KeyError, TypeError, OverflowError):
                self.spec = None
        if self.spec is None and not settings.model:
            self.why_not = "the run's model is not a planner preset and the trainer recorded no model description"
            return
        try:
            precision = precision_to_planner(ctx.precision or settings.precision or "auto") or "bf16-mixed"
        except ValueError:
            precision = "bf16-mixed"
        try:
            self.base = PlanInputs(
                model=settings.model if self.spec is None else None,
                method=settings.method,
                lora_rank=settings.lora_rank or 16,
                precision=precision,
                micro_batch=settings.micro_batch or 1,
                grad_accum=settings.grad_accum or 1,
                seq_len=settings.seq_len or 512,
                grad_checkpointing=settings.planner_checkpointing,
                gpu=self.gpu.name,
                gpus=ctx.gpu_count,
                sharding="fsdp" if settings.fsdp else "ddp",
                price=ctx.price if ctx.price and ctx.price > 0 else None,
            )
            if self.spec is None:
                self.base.model_spec()  # a model the planner knows (a preset)
        except (PlanInputError, ValueError, TypeError) as exc:
            self.base = None
            self.why_not = f"the planner cannot take the run's settings ({exc})"

    def inputs(self, **changes: Any) -> PlanInputs | None:
        if self.base is None:
            return None
        try:
            return replace(self.base, **changes)
        except PlanInputError:
            return None

    def _plan(self, **changes: Any) -> Any:
        key = tuple(sorted(changes.items()))
        if key not in self._cache:
            inputs = self.inputs(**changes)
            plan = None
            if inputs is not None:
                try:
                    request = inputs.to_request(default_gpu=None)
                    if self.spec is not None:  # the run's own model, not the form's preset
                        request = replace(request, model=self.spec)
                    plan = make_plan(request, load_catalog(), suggest=False)
                except (PlanInputError, CatalogError, ValueError, ZeroDivisionError, OverflowError):
                    plan = None
            self._cache[key] = plan
        return self._cache[key]

    def step_s(self, **changes: Any) -> float | None:
        """Seconds per optimizer step (all GPUs together) under the changed settings."""
        plan = self._plan(**changes)
        if plan is None or not plan.throughput.tokens_per_s:
            return None
        setup = plan.setup
        tokens = setup.micro_batch * setup.grad_accum * setup.gpus * setup.seq_len
        return float(tokens / plan.throughput.tokens_per_s)

    def mem_bytes(self, **changes: Any) -> float | None:
        plan = self._plan(**changes)
        return float(plan.memory.total) if plan is not None else None

    def plan_inputs(self, **changes: Any) -> dict[str, Any] | None:
        """The changed settings as PlanInputs fields (what the Plan form is filled with)."""
        inputs = self.inputs(**changes)
        if inputs is None:
            return None
        keys: tuple[str, ...] = ("model", "method", "lora_rank", "precision", "micro_batch", "grad_accum", "seq_len")
        keys += ("grad_checkpointing", "gpu", "gpus", "sharding", "price", "tokens_per_s")
        out = {k: getattr(inputs, k) for k in keys if getattr(inputs, k) is not None}
        if self.spec is not None:  # a model from a config file: the Plan form gets its parameter count
            out.pop("model", None)
            out["params"] = self.spec.n_params
        return out


def _saving(ctx: RunContext, seconds_per_step: float | None, gpus: float | None = None) -> tuple[float | None, ...]:
    """Hours and dollars saved over the steps ahead when each step gets ``seconds_per_step`` shorter."""
    steps, _ = ctx.steps_ahead()
    if steps is None or seconds_per_step is None:
        return None, None
    hours = steps * seconds_per_step / 3600.0
    usd = cost_for_hours(ctx.price or None, ctx.gpu_count if gpus is None else gpus, hours)
    return hours, usd


def _money(usd: float | None) -> str:
    if usd is None:
        return "no dollar figure (no price recorded)"
    return f"{human_money(abs(usd))}" if abs(usd) < 100 else f"{human_money(abs(usd), 0)}"


def _saving_text(hours: float | None, usd: float | None, basis: str) -> str:
    if hours is None:
        return f"Saving not estimated: {basis}."
    if hours < 0 or (usd is not None and usd < 0):
        money = f", {_money(usd)} more" if usd is not None else " (no price recorded)"
        return f"Expected cost: {abs(hours):.2f} h more{money}, over {basis}."
    money = f", {_money(usd)}" if usd is not None else " (no price recorded)"
    return f"Expected saving: {hours:.2f} h{money}, over {basis}."


def _diagnosis(
    ctx: RunContext,
    cause: str,
    text: str,
    hours: float | None,
    usd: float | None,
    basis: str,
    plan_inputs: dict[str, Any] | None = None,
    trainer_settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if hours is not None:
        basis = f"{ctx.steps_ahead()[1]} x {basis}" + (f" x {human_money(ctx.price, None)}/GPU-h" if ctx.price else "")
    return {
        "cause": cause,
        "text": f"{text} {_saving_text(hours, usd, basis)}",
        "plan_inputs": plan_inputs,
        "trainer_settings": trainer_settings or {},
        "saving_hours": hours,
        "saving_usd": usd,
        "basis": basis,
    }


def _workers(ctx: RunContext) -> tuple[int | None, str]:
    """The loader workers the trainer used (its -1 means: up to 4 per GPU, one core left free)."""
    configured = ctx.config.get("num_workers")
    if not isinstance(configured, int):
        return None, "an unknown number of"
    if configured >= 0:
        return configured, str(configured)
    if ctx.cpu_count:
        used = max(0, min(4, ctx.cpu_count // max(1, ctx.gpus_per_node) - 1))
        return used, f"{used} (automatic)"
    return None, "automatic (up to 4)"


def input_pipeline(ctx: RunContext, planner: PlannerModel, share: float, wait_per_step: float) -> dict[str, Any]:
    workers, shown = _workers(ctx)
    cores = f" on {ctx.cpu_count} cores" if ctx.cpu_count else " (cores not recorded)"
    per_gpu_cores = (ctx.cpu_count // max(1, ctx.gpus_per_node)) if ctx.cpu_count else None
    suggested = None
    if per_gpu_cores is not None:
        suggested = max(1, min(16, per_gpu_cores - 1))
        if workers is not None and suggested <= workers:
            suggested = None  # every core already loads data: the fix is elsewhere
    steps = [f"raise the loader workers to {suggested} per GPU" if suggested else "make each loader worker cheaper"]
    if ctx.config:
        steps.append(
            "the trainer already caches tokenised data (its token cache) and pins memory on CUDA, so "
            "look at the data files' storage (a network disk?) and the packing of short samples"
        )
    else:
        steps.append("cache tokenised data instead of tokenising each epoch, and pin memory (pin_memory=True)")
    text = f"Data wait is {share:.0%} of step time with {shown} loader workers{cores}: " + "; ".join(steps) + "."
    hours, usd = _saving(ctx, wait_per_step)
    tokens_per_s = None
    if ctx.tokens_per_s and ctx.step_s and ctx.step_s > wait_per_step:
        tokens_per_s = ctx.tokens_per_s * ctx.step_s / (ctx.step_s - wait_per_step)
    plan = planner.plan_inputs(tokens_per_s=round(tokens_per_s, 1)) if tokens_per_s else planner.plan_inputs()
    return _diagnosis(
        ctx,
        "input_pipeline",
        text,
        hours,
        usd,
        f"the measured data wait of {wait_per_step:.3f} s per step",
        plan,
        {"num_workers": suggested} if suggested else {},
    )


def _bigger_micro_batch(ctx: RunContext, planner: PlannerModel) -> dict[str, Any] | None:
    """A larger micro-batch (a divisor of micro-batch x accumulation, so the effective batch stays)
    whose planned memory, scaled to the measured peak, stays under TARGET_MEM_FRAC."""
    base = planner.base
    if base is None or not ctx.peak_mem_frac or ctx.peak_mem_frac >= 0.5:
        return None
    per_gpu = base.micro_batch * base.grad_accum
    base_mem = planner.mem_bytes()
    if not base_mem:
        return None
    best = None
    for mb in range(base.micro_batch + 1, per_gpu + 1):
        if per_gpu % mb:
            continue
        mem = planner.mem_bytes(micro_batch=mb, grad_accum=per_gpu // mb)
        if mem is None or ctx.peak_mem_frac * mem / base_mem > TARGET_MEM_FRAC:
            break
        best = mb
    if best is None:
        return None
    accum = per_gpu // best
    old_s, new_s = planner.step_s(), planner.step_s(micro_batch=best, grad_accum=accum)
    if old_s is None or new_s is None or new_s >= old_s or ctx.step_s is None:
        return None
    gain = ctx.step_s * (1.0 - new_s / old_s)
    hours, usd = _saving(ctx, gain)
    text = (
        f"Micro-batch {base.micro_batch} at {base.seq_len} tokens uses {ctx.peak_mem_frac:.0%} of memory: raise the "
        f"micro-batch to {best} and lower accumulation from {base.grad_accum} to {accum} to keep the effective batch "
        f"({per_gpu * ctx.gpu_count}); the planner expects steps {1.0 - new_s / old_s:.0%} shorter."
    )
    return _diagnosis(
        ctx,
        "small_micro_batch",
        text,
        hours,
        usd,
        f"{gain:.3f} s per step (measured step x the planner's ratio)",
        planner.plan_inputs(micro_batch=best, grad_accum=accum),
    )


def low_util(
    ctx: RunContext, planner: PlannerModel, alert: Alert, wait: tuple[float, float] | None, settings: AlertSettings
) -> dict[str, Any]:
    if wait is not None and wait[0] * 100.0 >= settings.data_wait_pct / 2:
        return input_pipeline(ctx, planner, *wait)
    bigger = _bigger_micro_batch(ctx, planner)
    if bigger is not None:
        return bigger
    util = alert.detail.get("avg_util_pct", alert.value)
    steps, basis = ctx.steps_ahead()
    idle_s = ctx.step_s * (1.0 - util / 100.0) if ctx.step_s else None
    hours, usd = _saving(ctx, idle_s)
    text = (
        f"{gpu_label(alert.node, alert.gpu_index)} ran kernels only {util:.0f}% of the time, and neither the data "
        "wait nor the micro-batch explains it: look for work between steps (evaluation, checkpoint writes, "
        "logging, host-side preprocessing) or a job that holds the GPU without using it."
    )
    return _diagnosis(
        ctx,
        "gpu_waiting",
        text,
        hours,
        usd,
        "the idle share of the measured step (an upper bound)",
        planner.plan_inputs(),
    )


def memory(ctx: RunContext, planner: PlannerModel, alert: Alert) -> dict[str, Any]:
    base = planner.base
    peak = alert.value
    if base is None:
        mb = ctx.config.get("micro_batch")
        text = (
            f"Peak memory {peak:.0%} of capacity leaves little room for fragmentation: an out-of-memory stop "
            f"is close. Halve the micro-batch{f' ({mb})' if mb else ''} and double accumulation, or turn on "
            "gradient checkpointing."
        )
        return _diagnosis(ctx, "memory", text, None, None, planner.why_not or "no planner estimate")
    if base.micro_batch >= 2:
        change: dict[str, int | str] = {"micro_batch": base.micro_batch // 2, "grad_accum": base.grad_accum * 2}
        what = (
            f"lower the micro-batch from {base.micro_batch} to {change['micro_batch']} and raise accumulation to "
            f"{change['grad_accum']} (same effective batch)"
        )
    else:
        change = {"grad_checkpointing": "full"}
        what = "turn on gradient checkpointing (micro-batch is already 1)"
    old_s, new_s = planner.step_s(), planner.step_s(**change)
    hours = usd = None
    basis = "no planner estimate"
    if old_s and new_s and ctx.step_s:
        gain = ctx.step_s * (1.0 - new_s / old_s)
        hours, usd = _saving(ctx, gain)
        basis = f"{gain:+.3f} s per step (measured step x the planner's ratio)"
    text = (
        f"{gpu_label(alert.node, alert.gpu_index)} peaked at {peak:.0%} of its memory with micro-batch "
        f"{base.micro_batch} at {base.seq_len} tokens: an out-of-memory stop is close; {what}."
    )
    return _diagnosis(ctx, "memory", text, hours, usd, basis, planner.plan_inputs(**change))


THROTTLE_ADVICE = {
    "power": "the board runs at its power limit: check `nvidia-smi -q -d POWER` for a lowered limit, or move to "
    "a host whose GPUs run at full power",
    "thermal": "it runs too hot: check the host's cooling (airflow, fans, inlet temperature) or move hosts",
    "hw_slowdown": "hardware slowdown (power brake or overheating) is a host fault: report it to the provider",
}
THROTTLE_WORDS = {"power": "power", "thermal": "temperature", "hw_slowdown": "hardware slowdown"}


def throttling(ctx: RunContext, planner: PlannerModel, alert: Alert) -> dict[str, Any]:
    cause, share = alert.detail.get("cause", "power"), alert.detail.get("share", alert.value)
    slow, fast = alert.detail.get("clock_throttled_mhz"), alert.detail.get("clock_free_mhz")
    text = (
        f"{gpu_label(alert.node, alert.gpu_index)} throttled for {THROTTLE_WORDS.get(cause, cause)} "
        f"{share:.0%} of the time: {THROTTLE_ADVICE.get(cause, '')}."
    )
    if slow and fast and fast > slow and ctx.step_s:
        loss = share * (1.0 - slow / fast)  # the job runs at the pace of its slowest GPU
        hours, usd = _saving(ctx, ctx.step_s * loss)
        basis = f"{share:.0%} of the time at {slow:.0f} instead of {fast:.0f} MHz ({loss:.1%} of each step)"
        return _diagnosis(ctx, cause, text, hours, usd, basis, planner.plan_inputs())
    return _diagnosis(ctx, cause, text, None, None, "no SM clock readings to size the slowdown")


def communication(ctx: RunContext, planner: PlannerModel, alert: Alert) -> dict[str, Any]:
    step, model_step = alert.detail["step_s"], alert.detail["model_step_s"]
    base = planner.base
    gpus = ctx.gpu_count
    if base is None or gpus < 2:
        return _diagnosis(ctx, "communication", "Steps wait on the gradient exchange.", None, None, planner.why_not)
    fewer = max(1, gpus // 2)
    accum = base.grad_accum * gpus // fewer
    comm = max(0.0, step - model_step)
    # Half the GPUs, double accumulation: the same samples per step, twice the compute per GPU, one exchange.
    new_step = comm + model_step * gpus / fewer
    steps, _ = ctx.steps_ahead()
    hours = usd = None
    if steps is not None:
        hours = steps * (step - new_step) / 3600.0
        if ctx.price:  # the GPU-hours saved: fewer GPUs for longer steps
            usd = cost_for_hours(ctx.price, 1, steps * (step * gpus - new_step * fewer) / 3600.0)
    text = (
        f"Each step spends about {comm:.2f} s of its {step:.2f} s waiting on the gradient exchange across {gpus} "
        f"GPUs ({ctx.config.get('grad_accum', base.grad_accum)} accumulation steps): train on {fewer} GPUs with "
        f"accumulation {accum} (same effective batch, half the exchanges per sample), or move to GPUs joined by "
        "NVLink."
    )
    basis = f"the measured exchange of {comm:.2f} s per step kept, twice the planner's compute per GPU"
    return _diagnosis(ctx, "communication", text, hours, usd, basis, planner.plan_inputs(gpus=fewer, grad_accum=accum))


def idle(ctx: RunContext, planner: PlannerModel, alert: Alert) -> dict[str, Any]:
    share, n = alert.detail.get("share", alert.value), alert.detail.get("gpus", ctx.gpu_count)
    steps, _ = ctx.steps_ahead()
    hours_ahead = steps * ctx.step_s / 3600.0 if steps is not None and ctx.step_s else None
    usd = hours_ahead * share * ctx.price if hours_ahead is not None and ctx.price else None
    text = (
        f"{gpu_label(alert.node, alert.gpu_index)} is held but unused {share:.0%} of the time: check that the "
        f"job starts one process per GPU (torchrun --nproc-per-node {n}, CUDA_VISIBLE_DEVICES, the world size), "
        f"or run on {n - 1} GPUs."
    )
    result = _diagnosis(ctx, "idle_gpu", text, None, None, "")
    result["saving_hours"], result["saving_usd"] = 0.0, usd
    basis = f"{ctx.steps_ahead()[1]}: {share:.0%} of one GPU's time" + (
        f" x {human_money(ctx.price, None)}/GPU-h" if ctx.price else ""
    )
    result["basis"] = basis
    money = _money(usd) if hours_ahead is not None else "not estimated (no step time)"
    result["text"] = f"{text} Expected saving: no time, {money} of the idle GPU, over {basis}."
    result["plan_inputs"] = planner.plan_inputs(gpus=max(1, n - 1))
    return result


def precision(ctx: RunContext, planner: PlannerModel, alert: Alert) -> dict[str, Any]:
    speedup = alert.value
    gain = ctx.step_s * (1.0 - 1.0 / speedup) if ctx.step_s else None
    hours, usd = _saving(ctx, gain)
    gpu = planner.gpu.name if planner.gpu else ctx.gpu_type
    text = (
        f"Training in fp32 on an {gpu}: bf16-mixed is about {speedup:.1f}x faster here (tensor cores), with fp32 "
        "master weights kept; set precision to bf16-mixed."
    )
    return _diagnosis(
        ctx,
        "fp32",
        text,
        hours,
        usd,
        f"the planner's {speedup:.1f}x speed-up",
        planner.plan_inputs(precision="bf16-mixed"),
    )


def bf16_speedup(planner: PlannerModel) -> float | None:
    """The planner's bf16-mixed over fp32 speed for the run's settings (None unless it ran fp32 on a bf16 GPU)."""
    if planner.base is None or planner.base.precision != "fp32" or planner.gpu is None or not planner.gpu.bf16:
        return None
    old, new = planner.step_s(), planner.step_s(precision="bf16-mixed")
    return old / new if old and new and math.isfinite(old / new) else None


def diagnose(
    alert: Alert, ctx: RunContext, planner: PlannerModel, wait: tuple[float, float] | None, settings: AlertSettings
) -> dict[str, Any]:
    """The diagnosis of one alert (``wait``: the run's data-wait share and seconds per step, if any)."""
    if alert.kind == "input_bound":
        return input_pipeline(ctx, planner, alert.detail["wait_share"], alert.detail["wait_per_step_s"])
    if alert.kind == "low_util":
        return low_util(ctx, planner, alert, wait, settings)
    if alert.kind == "mem_pressure":
        return memory(ctx, planner, alert)
    if alert.kind == "throttle":
        return throttling(ctx, planner, alert)
    if alert.kind == "comm_bound":
        return communication(ctx, planner, alert)
    if alert.kind == "idle_gpu":
        return idle(ctx, planner, alert)
    if alert.kind == "precision":
        return precision(ctx, planner, alert)
    return _diagnosis(ctx, alert.kind, alert.message, None, None, "no rule for this kind")
