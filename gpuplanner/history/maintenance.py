"""Keeping long histories small: downsample old GPU samples to 1-minute min/mean/max rows.

The deeper metrics of schema v4 keep a mean and the number of samples that reported them
(``sm_active_mean``/``sm_active_n``, ...), so a minute in which a GPU reported none stays NULL;
``throttle_any`` is the OR of the minute's throttle masks.

Rollups (and so every summary figure) were counted when the samples arrived and do not change.
The downsampled seq range is remembered per run (``compacted_before_seq``) so re-reading an old
stream never brings raw samples back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlite_utils import Database

from gpuplanner.history.db import write_transaction
from gpuplanner.history.schema import V4_METRICS
from trainer.protocol import THROTTLE_REASONS

DEFAULT_KEEP_RAW_S = 7 * 24 * 3600.0
_V4_INSERT = ", ".join(f"{name}_mean, {name}_n" for _, name in V4_METRICS)
_V4_SELECT = ", ".join(f"AVG({column}), COUNT({column})" for column, _ in V4_METRICS)
# a mean over the samples that reported the metric: a minute where none did keeps NULL (never 0)
_V4_UPDATE = ",\n    ".join(
    f"{name}_mean = CASE WHEN {name}_n + excluded.{name}_n = 0 THEN NULL ELSE"
    f" (COALESCE({name}_mean, 0) * {name}_n + COALESCE(excluded.{name}_mean, 0) * excluded.{name}_n)"
    f" / ({name}_n + excluded.{name}_n) END,\n    {name}_n = {name}_n + excluded.{name}_n"
    for _, name in V4_METRICS
)
# the OR of the minute's throttle masks, bit by bit (SQLite has no bitwise OR aggregate)
_THROTTLE_OR = " | ".join(f"MAX(throttle_reasons & {bit})" for bit, _ in THROTTLE_REASONS)
_MERGE = f"""
INSERT INTO gpu_samples_1m (run_id, node, gpu_index, minute_t, n, util_min, util_mean, util_max, mem_used_min,
       mem_used_mean, mem_used_max, mem_total_bytes, power_min, power_mean, power_max, temp_max,
       {_V4_INSERT}, sm_clock_max_mhz, throttle_any)
SELECT run_id, node, gpu_index, CAST(t / 60 AS INTEGER) * 60.0 AS minute_t, COUNT(*),
       MIN(util_pct), AVG(util_pct), MAX(util_pct), MIN(mem_used_bytes), AVG(mem_used_bytes), MAX(mem_used_bytes),
       MAX(mem_total_bytes), MIN(power_w), AVG(power_w), MAX(power_w), MAX(temp_c),
       {_V4_SELECT}, MAX(sm_clock_max_mhz), {_THROTTLE_OR}
FROM gpu_samples WHERE run_id = ? AND t < ? GROUP BY node, gpu_index, minute_t
ON CONFLICT (run_id, node, gpu_index, minute_t) DO UPDATE SET
    n = n + excluded.n,
    util_min = MIN(COALESCE(util_min, excluded.util_min), COALESCE(excluded.util_min, util_min)),
    util_mean = (COALESCE(util_mean, 0) * n + COALESCE(excluded.util_mean, 0) * excluded.n) / (n + excluded.n),
    util_max = MAX(COALESCE(util_max, excluded.util_max), COALESCE(excluded.util_max, util_max)),
    mem_used_min = MIN(COALESCE(mem_used_min, excluded.mem_used_min), COALESCE(excluded.mem_used_min, mem_used_min)),
    mem_used_mean = (COALESCE(mem_used_mean, 0) * n + COALESCE(excluded.mem_used_mean, 0) * excluded.n)
                    / (n + excluded.n),
    mem_used_max = MAX(COALESCE(mem_used_max, excluded.mem_used_max), COALESCE(excluded.mem_used_max, mem_used_max)),
    mem_total_bytes = COALESCE(excluded.mem_total_bytes, mem_total_bytes),
    power_min = MIN(COALESCE(power_min, excluded.power_min), COALESCE(excluded.power_min, power_min)),
    power_mean = (COALESCE(power_mean, 0) * n + COALESCE(excluded.power_mean, 0) * excluded.n) / (n + excluded.n),
    power_max = MAX(COALESCE(power_max, excluded.power_max), COALESCE(excluded.power_max, power_max)),
    temp_max = MAX(COALESCE(temp_max, excluded.temp_max), COALESCE(excluded.temp_max, temp_max)),
    {_V4_UPDATE},
    sm_clock_max_mhz = MAX(COALESCE(sm_clock_max_mhz, excluded.sm_clock_max_mhz),
                           COALESCE(excluded.sm_clock_max_mhz, sm_clock_max_mhz)),
    throttle_any = CASE WHEN throttle_any IS NULL THEN excluded.throttle_any
                        WHEN excluded.throttle_any IS NULL THEN throttle_any
                        ELSE throttle_any | excluded.throttle_any END
"""


@dataclass(frozen=True)
class DownsampleResult:
    runs: int
    samples_removed: int
    minutes_written: int


def downsample(db: Database, *, older_than_s: float = DEFAULT_KEEP_RAW_S, now: float | None = None) -> DownsampleResult:
    """Replace raw GPU samples older than ``older_than_s`` by 1-minute rows, one transaction per run."""
    cutoff = ((now if now is not None else time.time()) - older_than_s) // 60 * 60.0
    runs = removed = written = 0
    run_ids = [r[0] for r in db.execute("SELECT DISTINCT run_id FROM gpu_samples WHERE t < ?", [cutoff]).fetchall()]
    for run_id in run_ids:
        with write_transaction(db):
            max_seq = db.execute(
                "SELECT MAX(seq) FROM gpu_samples WHERE run_id = ? AND t < ?", [run_id, cutoff]
            ).fetchone()[0]
            if max_seq is None:
                continue
            written += db.execute(_MERGE, [run_id, cutoff]).rowcount
            removed += db.execute("DELETE FROM gpu_samples WHERE run_id = ? AND t < ?", [run_id, cutoff]).rowcount
            db.execute(
                "UPDATE runs SET compacted_before_seq = MAX(compacted_before_seq, ?) WHERE id = ?",
                [max_seq + 1, run_id],
            )
            runs += 1
    return DownsampleResult(runs, removed, written)


def optimize(db: Database) -> None:
    """Let SQLite refresh its statistics and fold the WAL back into the main file."""
    db.execute("PRAGMA optimize")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
