"""Per-GPU rollups kept up to date while samples arrive, so a summary never scans raw samples.

For each (run, node, GPU index) ``run_gpus`` holds counts, sums, a 10-bucket utilisation histogram
and the peak memory; ``gpu_intervals`` holds the maximal stretches during which a GPU stayed under
:data:`LOW_UTIL_PCT` utilisation (``low_util``) or above :data:`MEM_PRESSURE_FRACTION` of its memory
(``mem_pressure``). An interval runs from its first sample to the sample that ended it (or its last
sample while still open), so its length is the time spent in that state.

``gpu_minutes`` holds one row per (run, node, GPU, minute): the utilisation sum and count, the highest
memory share, how many samples carried throttle reasons and how many of those were throttled for power,
thermal or hardware slowdown, and the SM clock. The alerts' windows (``alerts.py``) read these rows, a
few thousand for a long run, never the raw samples. Any further per-sample metric (the ``extra``
mapping of :meth:`Rollups.add`, e.g. ``{"sm_active_pct": 41.0}``) is summed per minute into
``gpu_minute_metrics`` under its name, where the alert rules find it as a per-minute mean.

The deeper metrics (schema v4: SM and tensor activity, PCIe and NVLink throughput, the SM clock) are
kept as a sum and a count of the samples that reported them (``<name>_sum``, ``<name>_n``), so a metric
a GPU never reported has a count of 0 and reads as missing, never as 0; ``throttle_json`` counts the
samples per decoded throttle reason out of ``throttle_n`` samples that reported a mask.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.schema import V4_METRICS
from trainer.protocol import SLOWDOWN_REASONS, THROTTLE_REASONS

METRIC_NAMES = tuple(name for _, name in V4_METRICS)
ANY_SLOWDOWN = "any_slowdown"  # throttle_json: samples with at least one reason that slows work
_SLOWDOWN_MASK = sum(bit for bit, name in THROTTLE_REASONS if name in SLOWDOWN_REASONS)
_V2_COLUMNS = (
    "run_id, node, gpu_index, n, util_n, util_sum, idle_n, util_hist, mem_used_max, mem_total, power_sum,"
    " power_n, simulated_n, first_t, last_t, low_interval_id, mem_interval_id"
)
_V4_COLUMNS = (
    ", ".join(f"{name}_sum, {name}_n" for name in METRIC_NAMES) + ", sm_clock_max_mhz, throttle_n, throttle_json"
)


def has_v4_columns(db: Database) -> bool:
    """Whether the schema has the v4 metric columns (not yet while the v2 migration rebuilds rollups)."""
    return any(row[1] == "throttle_json" for row in db.execute("PRAGMA table_info(run_gpus)").fetchall())


def _insert_sql(columns: str) -> str:
    return f"INSERT OR REPLACE INTO run_gpus ({columns}) VALUES ({', '.join('?' * (columns.count(',') + 1))})"


IDLE_UTIL_PCT = 10.0
LOW_UTIL_PCT = 50.0
MEM_PRESSURE_FRACTION = 0.85
MIN_STORED_INTERVAL_S = 60.0  # shorter closed blips (low util, memory pressure) are not stored

# NVML clock throttle reason bits (nvmlClocksThrottleReason*): software power cap and hardware power
# brake; software and hardware thermal slowdown; hardware slowdown.
THROTTLE_POWER_BITS = 0x4 | 0x80
THROTTLE_THERMAL_BITS = 0x20 | 0x40
THROTTLE_HW_SLOWDOWN_BITS = 0x8


def minute_of(t: float) -> float:
    """The start of the minute a sample falls in (the same bucket as ``gpu_samples_1m``)."""
    return int(t / 60) * 60.0


class _Minute:
    """Sums of one GPU's samples within one minute, added to its stored row on save."""

    __slots__ = ("clock_n", "clock_sum", "hw", "mem_max", "n", "power", "thermal", "throttle_n", "util_n", "util_sum")

    def __init__(self) -> None:
        self.n = self.util_n = self.throttle_n = self.power = self.thermal = self.hw = self.clock_n = 0
        self.util_sum = self.clock_sum = 0.0
        self.mem_max: float | None = None


@dataclass
class Interval:
    node: str
    gpu_index: int
    kind: str
    start_t: float
    end_t: float
    n: int
    peak: float
    id: int | None = None


@dataclass
class GpuState:
    node: str
    gpu_index: int
    n: int = 0
    util_n: int = 0
    util_sum: float = 0.0
    idle_n: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * 10)
    mem_used_max: int | None = None
    mem_total: int | None = None
    power_sum: float = 0.0
    power_n: int = 0
    simulated_n: int = 0
    first_t: float | None = None
    last_t: float | None = None
    low: Interval | None = None
    mem: Interval | None = None
    minute_t: float = -1.0  # the minute being summed (not stored: gpu_minutes holds the sums)
    minute: _Minute | None = None
    metric_sum: list[float] = field(default_factory=lambda: [0.0] * len(METRIC_NAMES))
    metric_n: list[int] = field(default_factory=lambda: [0] * len(METRIC_NAMES))
    clock_max: float | None = None
    throttle_n: int = 0
    throttle: dict[str, int] = field(default_factory=dict)


class Rollups:
    """Rollup state of one run, read from and written to the database inside the caller's transaction."""

    def __init__(self, db: Database, run_id: int, *, minutes: bool = True) -> None:
        self.db = db
        self.run_id = run_id
        self.minutes = minutes  # keep gpu_minutes (False only while migrating to v2, before v4's table)
        self.gpus: dict[tuple[str, int], GpuState] = {}
        self._touched: dict[int, Interval] = {}
        self._minutes: dict[tuple[str, int, float], _Minute] = {}
        self._extra: dict[tuple[str, int, float, str], list[float]] = {}
        self.v4 = has_v4_columns(db)
        columns = f"{_V2_COLUMNS}, {_V4_COLUMNS}" if self.v4 else _V2_COLUMNS
        self._insert = _insert_sql(columns)
        intervals = {
            row[0]: Interval(row[1], row[2], row[3], row[4], row[5], row[6], row[7] or 0.0, row[0])
            for row in db.execute(
                "SELECT id, node, gpu_index, kind, start_t, end_t, n, peak FROM gpu_intervals WHERE id IN "
                "(SELECT low_interval_id FROM run_gpus WHERE run_id = ? UNION "
                "SELECT mem_interval_id FROM run_gpus WHERE run_id = ?)",
                [run_id, run_id],
            ).fetchall()
        }
        for row in db.execute(
            f"SELECT {columns.split(', ', 1)[1]} FROM run_gpus WHERE run_id = ?", [run_id]
        ).fetchall():
            state = GpuState(
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                row[5],
                json.loads(row[6]),
                row[7],
                row[8],
                row[9],
                row[10],
                row[11],
                row[12],
                row[13],
                intervals.get(row[14]) if row[14] is not None else None,
                intervals.get(row[15]) if row[15] is not None else None,
            )
            k = len(METRIC_NAMES)
            if not self.v4:
                self.gpus[(state.node, state.gpu_index)] = state
                continue
            state.metric_sum = list(row[16 : 16 + 2 * k : 2])
            state.metric_n = list(row[17 : 17 + 2 * k : 2])
            state.clock_max, state.throttle_n = row[16 + 2 * k], row[17 + 2 * k]
            state.throttle = _json_counts(row[18 + 2 * k])
            self.gpus[(state.node, state.gpu_index)] = state

    def add(
        self,
        t: float,
        node: str,
        gpu_index: int,
        util: float | None,
        mem_used: int | None,
        mem_total: int | None,
        power: float | None,
        simulated: bool,
        throttle: int | None = None,
        sm_clock: float | None = None,
        extra: Mapping[str, float | None] | None = None,
    ) -> None:
        """Count one sample; samples of one GPU must come in time order. ``extra``: further named metrics
        of the sample (absent or None: not measured), kept as per-minute sums in ``gpu_minute_metrics``."""
        key = (node, gpu_index)
        state = self.gpus.get(key)
        if state is None:
            state = self.gpus[key] = GpuState(node, gpu_index)
        minute_t = int(t / 60) * 60.0  # minute_of(t), inlined: this runs for every sample
        minute = state.minute
        if minute is None or state.minute_t != minute_t:
            minute = self._minutes.get((node, gpu_index, minute_t))
            if minute is None:
                minute = self._minutes[(node, gpu_index, minute_t)] = _Minute()
            state.minute, state.minute_t = minute, minute_t
        minute.n += 1
        if util is not None:
            minute.util_n += 1
            minute.util_sum += util
        if mem_used is not None and mem_total:
            frac = mem_used / mem_total
            if minute.mem_max is None or frac > minute.mem_max:
                minute.mem_max = frac
        if throttle is not None:
            minute.throttle_n += 1
            if throttle:
                if throttle & THROTTLE_POWER_BITS:
                    minute.power += 1
                if throttle & THROTTLE_THERMAL_BITS:
                    minute.thermal += 1
                if throttle & THROTTLE_HW_SLOWDOWN_BITS:
                    minute.hw += 1
        if sm_clock is not None:
            minute.clock_n += 1
            minute.clock_sum += sm_clock
        if extra:
            for name, value in extra.items():
                if value is not None:
                    sums = self._extra.get((node, gpu_index, minute_t, name))
                    if sums is None:
                        self._extra[(node, gpu_index, minute_t, name)] = [1.0, float(value)]
                    else:
                        sums[0] += 1.0
                        sums[1] += float(value)
        state.n += 1
        if state.first_t is None:
            state.first_t = t
        state.last_t = t
        if simulated:
            state.simulated_n += 1
        if power is not None:
            state.power_sum += power
            state.power_n += 1
        if mem_total:
            state.mem_total = mem_total
        if util is not None:
            state.util_n += 1
            state.util_sum += util
            if util < IDLE_UTIL_PCT:
                state.idle_n += 1
            state.hist[min(max(int(util // 10), 0), 9)] += 1
            state.low = self._track(state, state.low, "low_util", t, util < LOW_UTIL_PCT, util, lower=True)
        if mem_used is not None:
            if state.mem_used_max is None or mem_used > state.mem_used_max:
                state.mem_used_max = mem_used
            if state.mem_total:
                frac = mem_used / state.mem_total
                state.mem = self._track(
                    state, state.mem, "mem_pressure", t, frac > MEM_PRESSURE_FRACTION, frac, lower=False
                )

    def add_metrics(
        self,
        node: str,
        gpu_index: int,
        values: Sequence[float | None],
        clock_max: float | None,
        throttle: int | None,
    ) -> None:
        """Count one sample's deeper metrics (``values`` in :data:`METRIC_NAMES` order), after :meth:`add`."""
        state = self.gpus[(node, gpu_index)]
        sums, counts = state.metric_sum, state.metric_n
        k = 0
        for value in values:
            if value is not None:
                sums[k] += value
                counts[k] += 1
            k += 1
        if clock_max is not None and (state.clock_max is None or clock_max > state.clock_max):
            state.clock_max = clock_max
        if throttle is not None:
            state.throttle_n += 1
            if throttle:
                counts_by_reason = state.throttle
                for bit, name in THROTTLE_REASONS:
                    if throttle & bit:
                        counts_by_reason[name] = counts_by_reason.get(name, 0) + 1
                if throttle & _SLOWDOWN_MASK:
                    counts_by_reason[ANY_SLOWDOWN] = counts_by_reason.get(ANY_SLOWDOWN, 0) + 1

    def _track(
        self, state: GpuState, current: Interval | None, kind: str, t: float, inside: bool, value: float, lower: bool
    ) -> Interval | None:
        if current is None:
            if not inside:
                return None
            interval = Interval(state.node, state.gpu_index, kind, t, t, 1, value)
            self._touched[id(interval)] = interval
            return interval
        current.end_t = t
        self._touched[id(current)] = current
        if not inside:
            return None
        current.n += 1
        current.peak = min(current.peak, value) if lower else max(current.peak, value)
        return current

    def save(self) -> None:
        still_open = {id(i) for state in self.gpus.values() for i in (state.low, state.mem) if i is not None}
        for key, interval in self._touched.items():
            if key not in still_open and interval.end_t - interval.start_t < MIN_STORED_INTERVAL_S:
                if interval.id is not None:  # stored while open, closed short: drop it
                    self.db.execute("DELETE FROM gpu_intervals WHERE id = ?", [interval.id])
                continue
            if interval.id is None:
                cursor = self.db.execute(
                    "INSERT INTO gpu_intervals (run_id, node, gpu_index, kind, start_t, end_t, n, peak)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        self.run_id,
                        interval.node,
                        interval.gpu_index,
                        interval.kind,
                        interval.start_t,
                        interval.end_t,
                        interval.n,
                        interval.peak,
                    ],
                )
                interval.id = cursor.lastrowid
            else:
                self.db.execute(
                    "UPDATE gpu_intervals SET end_t = ?, n = ?, peak = ? WHERE id = ?",
                    [interval.end_t, interval.n, interval.peak, interval.id],
                )
        rows: list[tuple[Any, ...]] = []
        for state in self.gpus.values():
            rows.append(
                (
                    self.run_id,
                    state.node,
                    state.gpu_index,
                    state.n,
                    state.util_n,
                    state.util_sum,
                    state.idle_n,
                    json.dumps(state.hist),
                    state.mem_used_max,
                    state.mem_total,
                    state.power_sum,
                    state.power_n,
                    state.simulated_n,
                    state.first_t,
                    state.last_t,
                    state.low.id if state.low else None,
                    state.mem.id if state.mem else None,
                )
            )
            if self.v4:
                rows[-1] += (
                    *(v for pair in zip(state.metric_sum, state.metric_n) for v in pair),
                    state.clock_max,
                    state.throttle_n,
                    json.dumps(state.throttle, sort_keys=True),
                )
        self.db.conn.executemany(self._insert, rows)
        self._touched.clear()
        if self.minutes:
            self._save_minutes()

    def _save_minutes(self) -> None:
        self.db.conn.executemany(
            "INSERT INTO gpu_minutes (run_id, node, gpu_index, minute_t, n, util_n, util_sum, mem_frac_max,"
            " throttle_n, power_throttle_n, thermal_throttle_n, hw_slowdown_n, clock_n, clock_sum)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id, node, gpu_index, minute_t) DO UPDATE SET"
            " n = n + excluded.n, util_n = util_n + excluded.util_n, util_sum = util_sum + excluded.util_sum,"
            " mem_frac_max = MAX(COALESCE(mem_frac_max, excluded.mem_frac_max),"
            " COALESCE(excluded.mem_frac_max, mem_frac_max)),"
            " throttle_n = throttle_n + excluded.throttle_n,"
            " power_throttle_n = power_throttle_n + excluded.power_throttle_n,"
            " thermal_throttle_n = thermal_throttle_n + excluded.thermal_throttle_n,"
            " hw_slowdown_n = hw_slowdown_n + excluded.hw_slowdown_n,"
            " clock_n = clock_n + excluded.clock_n, clock_sum = clock_sum + excluded.clock_sum",
            [
                (self.run_id, node, index, minute_t, m.n, m.util_n, m.util_sum, m.mem_max, m.throttle_n, m.power)
                + (m.thermal, m.hw, m.clock_n, m.clock_sum)
                for (node, index, minute_t), m in self._minutes.items()
            ],
        )
        self._minutes.clear()
        for state in self.gpus.values():  # the next batch adds to the stored rows
            state.minute = None
        if self._extra:
            self.db.conn.executemany(
                "INSERT INTO gpu_minute_metrics (run_id, node, gpu_index, minute_t, name, n, total)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (run_id, node, gpu_index, minute_t, name) DO UPDATE SET"
                " n = n + excluded.n, total = total + excluded.total",
                [(self.run_id, *key, int(n), total) for key, (n, total) in self._extra.items()],
            )
            self._extra.clear()


def _json_counts(text: str | None) -> dict[str, int]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int)} if isinstance(value, dict) else {}


def rebuild_rollups(db: Database, run_id: int) -> None:
    """Recompute a run's rollups and intervals from its raw samples (used by the v2 migration)."""
    db.execute("DELETE FROM gpu_intervals WHERE run_id = ?", [run_id])
    db.execute("DELETE FROM run_gpus WHERE run_id = ?", [run_id])
    minutes = db["gpu_minutes"].exists()  # from v5 on (the v2 migration runs before v5's tables exist)
    if minutes:
        db.execute("DELETE FROM gpu_minutes WHERE run_id = ?", [run_id])
        db.execute("DELETE FROM gpu_minute_metrics WHERE run_id = ?", [run_id])
    rollups = Rollups(db, run_id, minutes=minutes)
    metric_columns = ", ".join(column for column, _ in V4_METRICS) if rollups.v4 else "sm_clock_mhz"
    clock_max_column = "sm_clock_max_mhz" if rollups.v4 else "NULL"
    for t, node, index, util, used, total, power, simulated, clock_max, throttle, *values in db.execute(
        "SELECT t, node, gpu_index, util_pct, mem_used_bytes, mem_total_bytes, power_w, simulated,"
        f" {clock_max_column}, throttle_reasons, {metric_columns} FROM gpu_samples WHERE run_id = ? ORDER BY seq",
        [run_id],
    ).fetchall():
        rollups.add(t, node, index, util, used, total, power, bool(simulated), throttle, values[-1])
        if rollups.v4:
            rollups.add_metrics(node, index, tuple(values), clock_max, throttle)
    rollups.save()
