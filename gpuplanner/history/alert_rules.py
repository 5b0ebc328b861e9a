"""The alert rules: pure functions over a run's per-minute GPU rows and its step statistics.

No database here (``alerts.py`` reads the inputs and stores the results), so every rule can be tested
on a constructed stream. The inputs are small and documented, so a further metric joins by adding a
key, not a rule signature:

- :class:`GpuMinute`: one GPU in one minute: the mean NVML utilisation, the highest memory share, the
  share of samples throttled for power, thermal or hardware slowdown (None: the GPU reported no throttle
  reasons), the mean SM clock, and ``metrics``: the per-minute means of any further named metric
  (``gpu_minute_metrics``; for example ``sm_active_pct``, ``tensor_active_pct``, ``pcie_tx_bytes_s``).
  :meth:`GpuMinute.busy` is the one place that says what "busy" means to the utilisation rules
  (NVML utilisation today; SM activity can take its place where a GPU reports it).
- :class:`StepStats`: the trainer's steps (step time and the part of it spent waiting for data).
- ``model_step_s``: the planner's step time for the run's settings on one GPU (None: not known).

Every threshold is an :class:`AlertSettings` field; the window and the CLI expose them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

THROTTLED_MINUTE_SHARE = 0.5  # a minute counts as throttled when at least half its samples were
MIN_INPUT_BOUND_STEPS = 10  # fewer steps say nothing about the input pipeline (the first waits for warm-up)

KINDS = ("low_util", "idle_gpu", "mem_pressure", "input_bound", "throttle", "comm_bound", "precision")
KIND_TITLES = {
    "low_util": "Low utilisation",
    "idle_gpu": "Idle GPU",
    "mem_pressure": "Memory pressure",
    "input_bound": "Input-bound",
    "throttle": "Throttling",
    "comm_bound": "Communication-bound",
    "precision": "Slow precision",
    "over_plan": "Over plan",
}


NO_METRICS: Mapping[str, float] = MappingProxyType({})


class SettingsError(ValueError):
    """A bad alert setting; ``field`` names it (the CLI flag without dashes, the dialog's field)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class SettingSpec:
    label: str
    unit: str
    low: float
    high: float
    help: str


SPECS: dict[str, SettingSpec] = {
    "low_util_pct": SettingSpec(
        "Low utilisation under", "%", 1, 100, "alert when a GPU's average utilisation over the window is under this"
    ),
    "low_util_minutes": SettingSpec("Averaged over", "min", 1, 1440, "the window the utilisation is averaged over"),
    "mem_pct": SettingSpec("Memory above", "%", 1, 100, "alert when a GPU's memory use passes this share of capacity"),
    "data_wait_pct": SettingSpec(
        "Data wait above", "% of step time", 1, 100, "input-bound when the steps wait this share of their time for data"
    ),
    "throttle_minutes": SettingSpec(
        "Throttled longer than", "min", 0, 1440, "alert when a GPU is throttled (power, thermal) longer than this"
    ),
    "idle_util_pct": SettingSpec(
        "Idle under", "%", 0, 100, "a GPU counts as idle in a minute under this utilisation while the others work"
    ),
    "idle_minutes": SettingSpec("Idle longer than", "min", 1, 1440, "alert when one GPU of a job idles this long"),
    "comm_factor": SettingSpec(
        "Step time above model by",
        "x",
        1.1,
        100,
        "communication-bound when the step takes this many times the planner's single-GPU step and utilisation is low",
    ),
}


@dataclass(frozen=True)
class AlertSettings:
    low_util_pct: float = 50.0
    low_util_minutes: float = 60.0
    mem_pct: float = 85.0
    data_wait_pct: float = 20.0
    throttle_minutes: float = 5.0
    idle_util_pct: float = 10.0
    idle_minutes: float = 10.0
    comm_factor: float = 2.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            spec = SPECS[f.name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SettingsError(f.name, f"needs a number, got {value!r}")
            if not spec.low <= value <= spec.high:
                raise SettingsError(f.name, f"{value:g} is outside {spec.low:g} to {spec.high:g} {spec.unit}")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertSettings:
        """Settings from stored or typed values; unknown keys are ignored, bad values raise SettingsError."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class GpuMinute:
    minute_t: float
    util_pct: float | None
    util_n: int = 1
    mem_frac: float | None = None
    power_share: float | None = None
    thermal_share: float | None = None
    hw_share: float | None = None
    clock_mhz: float | None = None
    metrics: Mapping[str, float] = field(default_factory=lambda: NO_METRICS)

    def busy(self) -> float | None:
        """The utilisation the rules average: NVML's share of time any kernel ran."""
        return self.util_pct


@dataclass(frozen=True)
class StepStats:
    steps: int = 0
    step_time_s: float = 0.0  # summed over the steps
    data_wait_s: float = 0.0
    median_step_s: float | None = None
    first_t: float | None = None
    last_t: float | None = None

    @property
    def wait_share(self) -> float | None:
        return self.data_wait_s / self.step_time_s if self.step_time_s > 0 else None


@dataclass
class Alert:
    kind: str
    message: str
    start_t: float | None
    end_t: float | None
    minutes: float
    value: float
    node: str | None = None
    gpu_index: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # the numbers the diagnosis works from
    diagnosis: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


GpuKey = tuple[str, int]


def gpu_label(node: str | None, index: int | None) -> str:
    return f"GPU {index}" + (f" on {node}" if node else "")


def _weight(m: GpuMinute) -> int:
    return max(1, m.util_n)


def low_util(gpus: Mapping[GpuKey, Sequence[GpuMinute]], s: AlertSettings) -> list[Alert]:
    """A GPU whose average utilisation over a full window of ``low_util_minutes`` stays under
    ``low_util_pct``; overlapping windows merge into one stretch, reported with its lowest window average."""
    out: list[Alert] = []
    window = s.low_util_minutes * 60.0
    for (node, index), minutes in sorted(gpus.items()):
        rows = [(m.minute_t, b, max(1, m.util_n)) for m in minutes if (b := m.busy()) is not None]
        stretches: list[list[float]] = []  # [start, end, lowest average]
        lo, total, weight = 0, 0.0, 0
        first = rows[0][0] if rows else 0.0
        for hi, (minute_t, busy, w) in enumerate(rows):
            total += busy * w
            weight += w
            start, end = minute_t + 60.0 - window, minute_t + 60.0
            while rows[lo][0] < start - 1e-9 and lo < hi:
                total -= rows[lo][1] * rows[lo][2]
                weight -= rows[lo][2]
                lo += 1
            if first > start + 1e-9:
                continue  # the GPU has not been watched for a whole window yet
            average = total / weight
            if average >= s.low_util_pct:
                continue
            if stretches and start <= stretches[-1][1]:
                stretches[-1][1] = end
                stretches[-1][2] = min(stretches[-1][2], average)
            else:
                stretches.append([start, end, average])
        for start, end, lowest in stretches:
            inside = [r for r in rows if start <= r[0] < end]
            low = [r for r in inside if r[1] < s.low_util_pct]
            if low:  # the stretch runs from its first to its last minute under the threshold
                start, end = low[0][0], low[-1][0] + 60.0
                inside = [r for r in inside if start <= r[0] < end]
            mean = sum(r[1] * r[2] for r in inside) / sum(r[2] for r in inside)
            minutes_long = (end - start) / 60.0
            out.append(
                Alert(
                    "low_util",
                    f"{gpu_label(node, index)} averaged {mean:.0f}% utilisation over {minutes_long:.0f} min "
                    f"(under {s.low_util_pct:g}% on average over every {s.low_util_minutes:g}-min window; "
                    f"lowest window {lowest:.0f}%)",
                    start,
                    end,
                    minutes_long,
                    lowest,
                    node,
                    index,
                    {"avg_util_pct": mean, "lowest_window_pct": lowest},
                )
            )
    return out


def mem_pressure(gpus: Mapping[GpuKey, Sequence[GpuMinute]], s: AlertSettings) -> list[Alert]:
    """A GPU whose memory use passed ``mem_pct`` of its capacity in any minute."""
    out: list[Alert] = []
    limit = s.mem_pct / 100.0
    for (node, index), minutes in sorted(gpus.items()):
        over = [m for m in minutes if m.mem_frac is not None and m.mem_frac > limit]
        if not over:
            continue
        peak = max(m.mem_frac or 0.0 for m in over)
        out.append(
            Alert(
                "mem_pressure",
                f"{gpu_label(node, index)} memory above {s.mem_pct:g}% of capacity (peak {peak:.0%}) "
                f"in {len(over)} min",
                over[0].minute_t,
                over[-1].minute_t + 60.0,
                float(len(over)),
                peak,
                node,
                index,
                {"peak_mem_frac": peak},
            )
        )
    return out


THROTTLE_CAUSES: tuple[tuple[str, str, str], ...] = (
    ("power", "power_share", "power"),
    ("thermal", "thermal_share", "temperature"),
)
THROTTLE_CAUSES += (("hw_slowdown", "hw_share", "hardware slowdown"),)


def throttle(gpus: Mapping[GpuKey, Sequence[GpuMinute]], s: AlertSettings) -> list[Alert]:
    """A GPU throttled (at least half the samples of a minute) for one cause longer than ``throttle_minutes``."""
    out: list[Alert] = []
    for (node, index), minutes in sorted(gpus.items()):
        known = [m for m in minutes if m.power_share is not None]
        for cause, attr, words in THROTTLE_CAUSES:
            hit = [m for m in known if (getattr(m, attr) or 0.0) >= THROTTLED_MINUTE_SHARE]
            if not hit or len(hit) <= s.throttle_minutes:
                continue
            share = len(hit) / len(known)
            clocked = [m.clock_mhz for m in hit if m.clock_mhz]
            free = [m.clock_mhz for m in known if m.clock_mhz and (getattr(m, attr) or 0.0) < THROTTLED_MINUTE_SHARE]
            detail: dict[str, Any] = {"cause": cause, "share": share, "throttled_minutes": len(hit)}
            clock_note = ""
            if clocked and free:
                detail["clock_throttled_mhz"] = sum(clocked) / len(clocked)
                detail["clock_free_mhz"] = sum(free) / len(free)
                clock_note = (
                    f"; SM clock {detail['clock_throttled_mhz']:.0f} MHz against {detail['clock_free_mhz']:.0f}"
                )
            out.append(
                Alert(
                    "throttle",
                    f"{gpu_label(node, index)} throttled for {words} {share:.0%} of the time ({len(hit)} min){clock_note}",
                    hit[0].minute_t,
                    hit[-1].minute_t + 60.0,
                    float(len(hit)),
                    share,
                    node,
                    index,
                    detail,
                )
            )
    return out


def idle_gpu(gpus: Mapping[GpuKey, Sequence[GpuMinute]], s: AlertSettings) -> list[Alert]:
    """One GPU of a multi-GPU job under ``idle_util_pct`` for ``idle_minutes`` of the minutes in which
    another GPU of the job was busy (at least ``low_util_pct``)."""
    if len(gpus) < 2:
        return []
    by_minute: dict[float, dict[GpuKey, float]] = {}
    for key, minutes in gpus.items():
        for m in minutes:
            busy = m.busy()
            if busy is not None:
                by_minute.setdefault(m.minute_t, {})[key] = busy
    busy_count = {t: sum(v >= s.low_util_pct for v in values.values()) for t, values in by_minute.items()}
    order = sorted(by_minute)
    out: list[Alert] = []
    for key in sorted(gpus):
        idle: list[float] = []
        working = 0
        for minute_t in order:
            value = by_minute[minute_t].get(key)
            if value is None:
                continue
            others_busy = busy_count[minute_t] - (value >= s.low_util_pct)
            if not others_busy:
                continue
            working += 1
            if value < s.idle_util_pct:
                idle.append(minute_t)
        if len(idle) < s.idle_minutes:
            continue
        node, index = key
        share = len(idle) / working
        out.append(
            Alert(
                "idle_gpu",
                f"{gpu_label(node, index)} of {len(gpus)} did nothing (under {s.idle_util_pct:g}%) for {len(idle)} min "
                f"while the others worked ({share:.0%} of that time)",
                idle[0],
                idle[-1] + 60.0,
                float(len(idle)),
                share,
                node,
                index,
                {"idle_minutes": len(idle), "share": share, "gpus": len(gpus)},
            )
        )
    return out


def input_bound(steps: StepStats, s: AlertSettings) -> list[Alert]:
    """The steps waited more than ``data_wait_pct`` of their time for data."""
    share = steps.wait_share
    if share is None or steps.steps < MIN_INPUT_BOUND_STEPS or share * 100.0 <= s.data_wait_pct:
        return []
    span = (steps.last_t - steps.first_t) / 60.0 if steps.first_t is not None and steps.last_t is not None else 0.0
    return [
        Alert(
            "input_bound",
            f"data wait is {share:.0%} of step time over {steps.steps} steps (alert above {s.data_wait_pct:g}%): "
            "the input pipeline starves the GPU",
            steps.first_t,
            steps.last_t,
            span,
            share,
            detail={"wait_share": share, "wait_per_step_s": steps.data_wait_s / steps.steps},
        )
    ]


def comm_bound(
    steps: StepStats, gpus: Mapping[GpuKey, Sequence[GpuMinute]], s: AlertSettings, model_step_s: float | None
) -> list[Alert]:
    """A multi-GPU step far (``comm_factor`` x) above the planner's single-GPU step while the average
    utilisation is under ``low_util_pct``: the GPUs wait for each other (gradient exchange)."""
    if len(gpus) < 2 or not model_step_s or steps.median_step_s is None:
        return []
    ratio = steps.median_step_s / model_step_s
    weights = [(m.busy(), _weight(m)) for minutes in gpus.values() for m in minutes if m.busy() is not None]
    if not weights or ratio < s.comm_factor:
        return []
    util = sum(v * w for v, w in weights if v is not None) / sum(w for _, w in weights)
    if util >= s.low_util_pct:
        return []
    span = (steps.last_t - steps.first_t) / 60.0 if steps.first_t is not None and steps.last_t is not None else 0.0
    return [
        Alert(
            "comm_bound",
            f"steps take {steps.median_step_s:.2f} s on {len(gpus)} GPUs, {ratio:.1f}x the planner's "
            f"{model_step_s:.2f} s for one GPU, at {util:.0f}% average utilisation: the GPUs wait on communication",
            steps.first_t,
            steps.last_t,
            span,
            ratio,
            detail={"step_s": steps.median_step_s, "model_step_s": model_step_s, "avg_util_pct": util},
        )
    ]


def slow_precision(precision: str | None, gpu_name: str | None, speedup: float | None) -> list[Alert]:
    """Training in fp32 on a GPU with bf16 (``speedup``: the planner's bf16-mixed over fp32 speed)."""
    if precision != "fp32" or not gpu_name or not speedup or speedup < 1.2:
        return []
    return [
        Alert(
            "precision",
            f"training in fp32 on an {gpu_name}, which has bf16: bf16-mixed is about {speedup:.1f}x faster here",
            None,
            None,
            0.0,
            speedup,
            detail={"speedup": speedup},
        )
    ]


def evaluate(
    gpus: Mapping[GpuKey, Sequence[GpuMinute]],
    steps: StepStats,
    settings: AlertSettings,
    *,
    model_step_s: float | None = None,
    precision: str | None = None,
    gpu_name: str | None = None,
    bf16_speedup: float | None = None,
) -> list[Alert]:
    """Every rule, in the order of :data:`KINDS`."""
    return (
        low_util(gpus, settings)
        + idle_gpu(gpus, settings)
        + mem_pressure(gpus, settings)
        + input_bound(steps, settings)
        + throttle(gpus, settings)
        + comm_bound(steps, gpus, settings, model_step_s)
        + slow_precision(precision, gpu_name, bf16_speedup)
    )
