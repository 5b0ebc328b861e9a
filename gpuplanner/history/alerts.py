"""Alerts as data: long low-utilisation stretches, memory pressure and input-bound steps of a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.rollup import LOW_UTIL_PCT, MEM_PRESSURE_FRACTION

DEFAULT_LOW_UTIL_MINUTES = 10.0
INPUT_BOUND_WAIT_SHARE = 0.2  # a step is input-bound when it waited this share of its time for data
INPUT_BOUND_MIN_SHARE = 0.05  # ... and the alert fires when at least this share of steps is


@dataclass(frozen=True)
class Alert:
    kind: str  # low_util | mem_pressure | input_bound
    message: str
    start_t: float | None
    end_t: float | None
    minutes: float
    value: float
    node: str | None = None
    gpu_index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu_label(node: str, index: int) -> str:
    return f"GPU {index}" + (f" on {node}" if node else "")


def run_alerts(
    db: Database,
    run_id: int,
    *,
    low_util_minutes: float = DEFAULT_LOW_UTIL_MINUTES,
    wait_share: float = INPUT_BOUND_WAIT_SHARE,
    min_share: float = INPUT_BOUND_MIN_SHARE,
) -> list[Alert]:
    """All alerts of a run, in time order within each kind."""
    alerts: list[Alert] = []
    for node, index, start, end, peak in db.execute(
        "SELECT node, gpu_index, start_t, end_t, peak FROM gpu_intervals WHERE run_id = ? AND kind = 'low_util'"
        " AND end_t - start_t > ? ORDER BY start_t, node, gpu_index",
        [run_id, low_util_minutes * 60.0],
    ).fetchall():
        minutes = (end - start) / 60.0
        alerts.append(
            Alert(
                "low_util",
                f"{_gpu_label(node, index)} under {LOW_UTIL_PCT:g}% utilisation for "
                f"{minutes:.1f} min (lowest {peak:.0f}%)",
                start,
                end,
                minutes,
                peak,
                node,
                index,
            )
        )
    for node, index, start, end, minutes, peak in db.execute(
        "SELECT node, gpu_index, MIN(start_t), MAX(end_t), SUM(end_t - start_t) / 60.0, MAX(peak)"
        " FROM gpu_intervals WHERE run_id = ? AND kind = 'mem_pressure' GROUP BY node, gpu_index"
        " ORDER BY MIN(start_t), node, gpu_index",
        [run_id],
    ).fetchall():
        alerts.append(
            Alert(
                "mem_pressure",
                f"{_gpu_label(node, index)} memory above "
                f"{MEM_PRESSURE_FRACTION:.0%} of capacity (peak {peak:.0%}) for {minutes:.1f} min",
                start,
                end,
                minutes,
                peak,
                node,
                index,
            )
        )
    total, bound, start, end = db.execute(
        "SELECT COUNT(*), SUM(data_wait_s > ? * step_time_s), MIN(CASE WHEN data_wait_s > ? * step_time_s THEN t END),"
        " MAX(CASE WHEN data_wait_s > ? * step_time_s THEN t END) FROM steps WHERE run_id = ? AND step_time_s > 0",
        [wait_share, wait_share, wait_share, run_id],
    ).fetchone()
    if total and bound and bound / total >= min_share:
        share = bound / total
        alerts.append(
            Alert(
                "input_bound",
                f"{bound} of {total} steps ({share:.0%}) waited over {wait_share:.0%} of "
                "their time for data: the input pipeline starves the GPU",
                start,
                end,
                (end - start) / 60.0,
                share,
            )
        )
    return alerts
