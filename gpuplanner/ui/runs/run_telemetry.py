"""One live run's telemetry as ring buffers, fed from protocol records; no Qt.

The Runs pane's producer (the slot that receives a run's records) calls :meth:`RunTelemetry.add_records`;
the plot timer reads the buffers' views. Time is stored as seconds since the run's first record
(float64, monotonic in practice), which is what the plots put on their x axis.

Owned by one thread (the GUI thread); not locked.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuplanner.app.eta import ETA_WINDOW, eta_s, steps_per_s
from gpuplanner.history.gpu_metrics import MISSING, live_throttle_text
from gpuplanner.history.stored_records import stored_records
from gpuplanner.ui.human import human_money
from gpuplanner.ui.runs.ring_buffer import RingBuffer
from trainer.protocol import throttle_reason_names
from trainer.spend import spend_usd as priced_spend

GPU_COLUMNS = ("x", "util", "sm_active", "mem_used_gib", "mem_total_gib", "power_w", "util_mean")
UTIL_MEAN_S = 10.0  # "util_mean": utilisation averaged over the samples of the last 10 s (the plotted line)
STEP_COLUMNS = ("x", "step", "loss", "tokens_per_s", "spend_usd", "step_time_s", "data_wait_s")
EVAL_COLUMNS = ("x", "step", "eval_loss")
GPU_CAPACITY = 86_400  # a day of 1 Hz samples per GPU
STEP_CAPACITY = 200_000
MARKER_KINDS = ("checkpoint", "preempted", "stopped", "resumed")
GIB = float(1 << 30)
# the latest value of each of these is kept per GPU for the Runs pane's GPU table
LIVE_GPU_FIELDS = (
    "util_pct",
    "sm_active_pct",
    "tensor_active_pct",
    "pcie_tx_mbps",
    "pcie_rx_mbps",
    "nvlink_tx_mbps",
    "nvlink_rx_mbps",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "throttle_reasons",
    "temp_c",
)
# the GPU table's columns: (key, header); a cell reads MISSING_SHORT where the GPU never reported it
GPU_TABLE_COLUMNS = (
    ("util_pct", "Util"),
    ("sm_active_pct", "SM active"),
    ("tensor_active_pct", "Tensor"),
    ("pcie_tx_mbps", "PCIe TX"),
    ("pcie_rx_mbps", "PCIe RX"),
    ("nvlink_tx_mbps", "NVLink TX"),
    ("nvlink_rx_mbps", "NVLink RX"),
    ("sm_clock", "SM clock"),
    ("throttle", "Throttle"),
    ("temp_c", "Temp"),
)
MISSING_SHORT = "not reported"  # a table cell; its tooltip and the caption say MISSING in full
WAITING = "…"  # reported before, not in the latest sample (GPM and NVLink rates need two samples)


@dataclass(frozen=True)
class GpuCell:
    text: str
    state: str  # "value" | "missing" (never reported by this GPU) | "waiting"
    tooltip: str = ""


def _cell(latest: dict[str, Any], reported: set[str], name: str, text: Any) -> GpuCell:
    if name not in reported:
        return GpuCell(MISSING_SHORT, "missing", MISSING)
    value = latest.get(name)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return GpuCell(WAITING, "waiting", "no value in the latest sample")
    return GpuCell(text(value), "value")


def _rate(value: float) -> str:
    return f"{value / 1000:.2f} GB/s" if value >= 1000 else f"{value:.1f} MB/s"


@dataclass(frozen=True)
class Marker:
    x: float
    kind: str  # checkpoint | preempted | resumed | stopped (a preemption the user asked for with Stop)
    label: str


def _num(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


class RunTelemetry:
    """Ring buffers of one run: per-GPU samples, steps, evals, and event markers."""

    def __init__(
        self, run_id: int | None = None, *, gpu_capacity: int = GPU_CAPACITY, step_capacity: int = STEP_CAPACITY
    ) -> None:
        self.run_id = run_id
        self.gpu_capacity = gpu_capacity
        self.gpus: dict[tuple[str, int], RingBuffer] = {}
        self._util_recent: dict[tuple[str, int], deque[tuple[float, float]]] = {}  # for util_mean
        self.steps = RingBuffer(STEP_COLUMNS, step_capacity)
        self.evals = RingBuffer(EVAL_COLUMNS, step_capacity)
        self.markers: list[Marker] = []
        self.t0: float | None = None
        self.last_t: float | None = None
        self.last_seq = -1
        self.records = 0
        self.steps_total: int | None = None
        self.price_per_gpu_hour: float | None = None
        self.gpu_count: int | None = None
        self.budget_usd: float | None = None
        self.planned_cost_usd: float | None = None
        self.planned_hours: float | None = None
        self.simulated: bool | None = None
        self.sm_reported = False
        self.latest_gpu: dict[tuple[str, int], dict[str, Any]] = {}
        self.gpu_reported: dict[tuple[str, int], set[str]] = {}
        self.device: str | None = None
        self.end_status: str | None = None
        self.end_error: str | None = None  # the trainer's run_end "error" (a failed run)
        self.checkpoints = 0  # checkpoint events seen: 0 means there is nothing to resume from
        self.gaps: list[tuple[float, float]] = []  # (x, x) spans without a process (preemption to resume)
        self.user_stopped = False  # the user pressed Stop: the trainer's next "preempted" is that stop
        self.started = False
        self.version = 0

    # -- producer side ---------------------------------------------------------------------------
    def _x(self, t: float) -> float:
        if self.t0 is None:
            self.t0 = t
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        return t - self.t0

    def _add_gap(self, t: float) -> None:
        """No data from the last record until ``t`` (a process ended and another started): lines break there."""
        if self.t0 is None or self.last_t is None or t <= self.last_t:
            return
        start, end = self.last_t - self.t0, t - self.t0
        if self.gaps and self.gaps[-1][1] == start:  # "resumed" right after the new process's run_start
            self.gaps[-1] = (self.gaps[-1][0], end)
        else:
            self.gaps.append((start, end))

    def add_records(self, records: Iterable[dict[str, Any]]) -> int:
        """Take telemetry records (any order within a batch; duplicates by ``seq`` are dropped).
        Returns how many were used."""
        gpu_rows: dict[tuple[str, int], list[list[float]]] = {}
        step_rows: list[list[float]] = []
        eval_rows: list[list[float]] = []
        used = 0
        for rec in sorted(records, key=lambda r: r.get("seq", -1) if isinstance(r.get("seq"), int) else -1):
            seq = rec.get("seq")
            if isinstance(seq, int):
                if seq <= self.last_seq:
                    continue
                self.last_seq = seq
            t = _num(rec.get("t"))
            if math.isnan(t):
                continue
            kind = rec.get("kind")
            used += 1
            if kind == "gpu":
                key = (
                    str(rec.get("node") or ""),
                    int(_num(rec.get("index")) if not math.isnan(_num(rec.get("index"))) else 0),
                )
                sm = _num(rec.get("sm_active_pct"))
                if not math.isnan(sm):
                    self.sm_reported = True
                latest = {name: rec.get(name) for name in LIVE_GPU_FIELDS}
                self.latest_gpu[key] = latest
                reported = self.gpu_reported.setdefault(key, set())
                reported.update(k for k, v in latest.items() if v is not None)
                if rec.get("gpm") is True:  # GPM figures come from the second sample on
                    reported.update(("sm_active_pct", "tensor_active_pct"))
                if isinstance(rec.get("nvlink_links"), int) and rec["nvlink_links"] > 0:
                    reported.update(("nvlink_tx_mbps", "nvlink_rx_mbps"))
                if "simulated" in rec:
                    sim = bool(rec.get("simulated"))
                    self.simulated = sim if self.simulated is None else (self.simulated or sim)
                x, util = self._x(t), _num(rec.get("util_pct"))
                gpu_rows.setdefault(key, []).append(
                    [
                        x,
                        util,
                        sm,
                        _num(rec.get("mem_used_bytes")) / GIB,
                        _num(rec.get("mem_total_bytes")) / GIB,
                        _num(rec.get("power_w")),
                        self._util_mean(key, x, util),
                    ]
                )
            elif kind == "step":
                spend = _num(rec.get("spend_usd"))
                x = self._x(t)
                if math.isnan(spend) and self.price_per_gpu_hour:
                    spend = priced_spend(self.price_per_gpu_hour, self.gpu_count or 1, x)
                step_rows.append(
                    [
                        x,
                        _num(rec.get("step")),
                        _num(rec.get("loss")),
                        _num(rec.get("tokens_per_s")),
                        spend,
                        _num(rec.get("step_time_s")),
                        _num(rec.get("data_wait_s")),
                    ]
                )
            elif kind == "eval":
                eval_rows.append([self._x(t), _num(rec.get("step")), _num(rec.get("eval_loss"))])
            elif kind == "user_stop":  # recorded by the window when the user pressed Stop (history backfill)
                self.user_stopped = True
            elif kind == "run_start":
                if self.started:  # a restart: no process between the last record and this one
                    self._add_gap(t)
                    self.user_stopped = False
                self._x(t)
                self.started = True
                self.end_status = None
                self.end_error = None
                total = rec.get("steps_total")
                if isinstance(total, int) and total > 0:
                    self.steps_total = total
                given = rec.get("config")
                config = given if isinstance(given, dict) else {}
                price = _num(config.get("price_per_gpu_hour"))
                if not math.isnan(price):
                    self.price_per_gpu_hour = price
                budget = _num(config.get("budget_usd"))
                if not math.isnan(budget) and self.budget_usd is None:
                    self.budget_usd = budget
                world = rec.get("world_size")
                if isinstance(world, int) and world > 0:
                    self.gpu_count = world
                if isinstance(rec.get("device"), str):
                    self.device = rec["device"]
            elif kind in MARKER_KINDS:
                if kind == "resumed":
                    self._add_gap(t)
                step = rec.get("step")
                if kind == "preempted" and self.user_stopped:  # the trainer cannot tell a stop from a notice
                    kind = "stopped"
                label = {
                    "checkpoint": "checkpoint",
                    "preempted": "preempted",
                    "resumed": "resumed",
                    "stopped": "stopped",
                }[kind]
                if isinstance(step, int):
                    label += f" @ step {step}"
                if kind == "checkpoint":
                    self.checkpoints += 1
                self.markers.append(Marker(self._x(t), kind, label))
            elif kind == "run_end":
                self._x(t)
                self.end_status = str(rec.get("status") or "finished")
                if self.end_status == "preempted" and self.user_stopped:
                    self.end_status = "stopped"
                self.end_error = str(rec["error"]) if rec.get("error") else None
        for key, rows in gpu_rows.items():
            buf = self.gpus.get(key)
            if buf is None:
                buf = self.gpus[key] = RingBuffer(GPU_COLUMNS, self.gpu_capacity)
            buf.extend(rows)
        if step_rows:
            self.steps.extend(step_rows)
        if eval_rows:
            self.evals.extend(eval_rows)
        if used:
            self.records += used
            self.version += 1
        return used

    def _util_mean(self, key: tuple[str, int], x: float, util: float) -> float:
        """The GPU's utilisation averaged over the samples of the last :data:`UTIL_MEAN_S` seconds up to
        ``x`` (NaN before any): the line the plot draws over the faint raw samples."""
        recent = self._util_recent.setdefault(key, deque())
        if not math.isnan(util):
            recent.append((x, util))
        while recent and recent[0][0] <= x - UTIL_MEAN_S:
            recent.popleft()
        return sum(u for _, u in recent) / len(recent) if recent else math.nan

    def backfill_from_history(self, db: Any, run_id: int) -> int:
        """Load what the history already holds for the run (reattach after a restart)."""
        return self.add_records(stored_records(db, run_id, LIVE_GPU_FIELDS))

    # -- reader side -----------------------------------------------------------------------------
    @property
    def gpu_keys(self) -> list[tuple[str, int]]:
        return sorted(self.gpus)

    def gpu_table(self) -> list[tuple[str, list[GpuCell]]]:
        """The latest sample of each GPU as table cells (:data:`GPU_TABLE_COLUMNS`), missing ones labelled."""
        rows = []
        for key in sorted(self.latest_gpu):
            latest, reported = self.latest_gpu[key], self.gpu_reported.get(key, set())

            cells = []
            for name, _ in GPU_TABLE_COLUMNS:
                if name == "sm_clock":
                    clock, top = latest.get("sm_clock_mhz"), latest.get("sm_clock_max_mhz")
                    if "sm_clock_mhz" not in reported:
                        cells.append(GpuCell(MISSING_SHORT, "missing", MISSING))
                    elif clock is None:
                        cells.append(GpuCell(WAITING, "waiting", "no value in the latest sample"))
                    elif top:
                        tip = f"{clock:.0f} MHz of a maximum {top:.0f} MHz"
                        cells.append(GpuCell(f"{clock:.0f} MHz ({clock / top:.0%})", "value", tip))
                    else:
                        cells.append(GpuCell(f"{clock:.0f} MHz", "value", "maximum clock " + MISSING))
                elif name == "throttle":
                    mask = latest.get("throttle_reasons")
                    names = throttle_reason_names(int(mask)) if isinstance(mask, (int, float)) else None
                    if "throttle_reasons" not in reported:
                        cells.append(GpuCell(MISSING_SHORT, "missing", MISSING))
                    else:
                        cells.append(GpuCell(live_throttle_text(names or []), "value", ", ".join(names or [])))
                elif name.endswith("_mbps"):
                    cells.append(_cell(latest, reported, name, _rate))
                elif name == "temp_c":
                    cells.append(_cell(latest, reported, name, lambda v: f"{v:.0f} °C"))
                else:
                    cells.append(_cell(latest, reported, name, lambda v: f"{v:.1f} %"))
            rows.append((f"{key[0]}:{key[1]}" if key[0] else f"GPU {key[1]}", cells))
        return rows

    def elapsed_s(self) -> float:
        if self.t0 is None or self.last_t is None:
            return 0.0
        return self.last_t - self.t0

    def current_step(self) -> int | None:
        step = self.steps.last("step")
        return None if step is None else int(step)

    def progress(self) -> float | None:
        """Share of the run done (0..1) from steps, or ``None`` before the first step."""
        step = self.current_step()
        if step is None or not self.steps_total:
            return None
        return max(0.0, min(1.0, step / self.steps_total))

    def _recent_steps(self) -> tuple[list[float], list[float]]:
        """The times and step numbers of the last :data:`ETA_WINDOW` step records."""
        return self.steps.view("x")[-ETA_WINDOW:].tolist(), self.steps.view("step")[-ETA_WINDOW:].tolist()

    def steps_per_s(self) -> float | None:
        return steps_per_s(*self._recent_steps())

    def eta_s(self) -> float | None:
        """Seconds left at the recent step rate, or ``None`` when unknown (:func:`gpuplanner.app.eta.eta_s`,
        which `gpuplanner run` shows too)."""
        return eta_s(*self._recent_steps(), self.steps_total)

    def spend_usd(self) -> float | None:
        return self.steps.last("spend_usd")

    def projected_cost_usd(self) -> float | None:
        """Spend at the end of the run if it keeps its pace."""
        spend, frac = self.spend_usd(), self.progress()
        if spend is None or not frac:
            return None
        return spend / frac

    def over_plan(self) -> str | None:
        """A message when spend (or its projection) is over the planned cost, else ``None``."""
        if not self.planned_cost_usd:
            return None
        spend, projected = self.spend_usd(), self.projected_cost_usd()
        if spend is not None and spend > self.planned_cost_usd:
            return (
                f"Over plan: spent {human_money(spend)}, the plan said {human_money(self.planned_cost_usd)} "
                f"({spend / self.planned_cost_usd - 1:+.0%})"
            )
        frac = self.progress() or 0.0
        if projected is not None and frac >= 0.1 and projected > 1.1 * self.planned_cost_usd:
            return (
                f"Heading over plan: at this pace the run costs {human_money(projected)}, the plan said "
                f"{human_money(self.planned_cost_usd)} ({projected / self.planned_cost_usd - 1:+.0%})"
            )
        return None
