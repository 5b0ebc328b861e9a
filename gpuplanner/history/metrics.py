"""The history as Prometheus gauges: live runs and recent history aggregates, read on each scrape.

:func:`read_metrics` returns every figure `gpuplanner metrics serve` exposes, as plain
:class:`Family` values (no Prometheus library here; ``commands/metrics.py`` turns them into its
metric families). Every figure reuses the history's own function for it, so the endpoint and the CLI
never disagree:

- a run's spend, GPU-hours, effective GPU-hours, tokens/s and queue wait: :func:`run_cost`, i.e.
  :func:`gpuplanner.history.analytics.summarize` (what `runs show` prints);
- its billed cost: ``summary.billed`` (:mod:`gpuplanner.history.billing`);
- its alerts: ``summary.alerts`` (:func:`gpuplanner.history.alerts.current_alerts`, read only);
- its queue wait: ``summary.queue`` (:mod:`gpuplanner.history.slurm_queue`);
- spend by tag and by month: :func:`gpuplanner.history.spend.spend_report` (`runs report`);
- average utilisation and idle GPU time per day: the per-minute rollup rows (``gpu_minutes``, see
  :mod:`gpuplanner.history.rollup`), never the raw samples;
- a live GPU's utilisation, memory and power: its newest sample.

Label cardinality is bounded: per-run and per-GPU series exist only for live runs (:data:`LIVE`) and
for runs that ended within ``recent_s`` (default 7 days), at most :data:`MAX_RUNS` of them, newest
first; months go back :data:`MONTHS` months and days :data:`DAYS` days. Everything is a gauge in base
units (seconds, bytes, watts, ratios 0-1, US dollars); GPU time is in GPU-seconds.
"""

from __future__ import annotations

import calendar
import logging
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sqlite_utils import Database

from gpuplanner.history.alerts import data_stamp
from gpuplanner.history.analytics import RunSummary, summarize
from gpuplanner.history.db import HistoryError, read_snapshot
from gpuplanner.history.diagnosis import ACTIVE as LIVE
from gpuplanner.history.rollup import IDLE_UTIL_PCT
from gpuplanner.history.runs import Run, list_runs
from gpuplanner.history.schema import SCHEMA_VERSION
from gpuplanner.history.spend import UNTAGGED, month_of, spend_report
from gpuplanner.history.tags import tag_keys, tags_of

RECENT_S = 7 * 86400.0
MAX_RUNS = 200
MONTHS = 12
DAYS = 30
WINDOWS = (("1h", 3600.0), ("24h", 86400.0))
NO_HOST = "unknown"  # the host label of a run without a host name (an imported events file)
RUN = ("run", "host", "gpu_type")
GPU = ("run", "host", "node", "gpu")

# name -> (help, label names): the one list of what the endpoint exposes (the dashboard test reads it)
SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpuplanner_history_up": ("1 when the history could be read on this scrape, 0 otherwise (reason logged)", ()),
    "gpuplanner_runs": ("Runs in the history by status", ("status",)),
    "gpuplanner_run_info": (
        "1 per run exposed (live or recently ended), with its name, status and model",
        ("run", "host", "gpu_type", "name", "status", "model"),
    ),
    "gpuplanner_run_live": ("1 while the run is running, starting or preempted, else 0", RUN),
    "gpuplanner_run_tag_info": ("1 per tag of an exposed run", ("run", "key", "value")),
    "gpuplanner_run_spend_usd": ("The run's spend so far: price x GPUs x hours held (runs show's cost_usd)", RUN),
    "gpuplanner_run_billed_usd": ("What the host billed for the run, launch until stop (runs show)", RUN),
    "gpuplanner_run_budget_usd": ("The run's budget", RUN),
    "gpuplanner_run_budget_left_usd": ("The run's budget minus its spend (negative: over budget)", RUN),
    "gpuplanner_run_gpus": ("GPUs the run holds", RUN),
    "gpuplanner_run_gpu_seconds": ("GPU time the run held, in GPU-seconds", RUN),
    "gpuplanner_run_effective_gpu_seconds": ("GPU-seconds x mean utilisation", RUN),
    "gpuplanner_run_utilization_ratio": ("The run's mean GPU utilisation (0-1)", RUN),
    "gpuplanner_run_tokens_per_second": ("The run's median tokens/s over its steps (runs show)", RUN),
    "gpuplanner_run_last_tokens_per_second": ("Tokens/s of the run's newest step", RUN),
    "gpuplanner_run_queue_wait_seconds": ("Time the run's Slurm jobs waited in the queue", RUN),
    "gpuplanner_run_alerts": ("The run's current alerts by kind", (*RUN, "kind")),
    "gpuplanner_gpu_utilization_ratio": ("A live run's GPU utilisation in its newest sample (0-1)", GPU),
    "gpuplanner_gpu_memory_used_bytes": ("A live run's GPU memory in use in its newest sample", GPU),
    "gpuplanner_gpu_memory_total_bytes": ("A live run's GPU memory size", GPU),
    "gpuplanner_gpu_power_watts": ("A live run's GPU power draw in its newest sample", GPU),
    "gpuplanner_gpu_sample_age_seconds": ("Seconds since a live run's GPU was last sampled", GPU),
    "gpuplanner_utilization_avg_ratio": (
        "Mean GPU utilisation over the last hour or day, per host, from the per-minute rollups",
        ("host", "window"),
    ),
    "gpuplanner_gpu_day_seconds": ("GPU-seconds sampled per UTC day and host", ("host", "day")),
    "gpuplanner_idle_gpu_day_seconds": (
        f"GPU-seconds per UTC day and host in minutes whose mean utilisation was under {IDLE_UTIL_PCT:g}%",
        ("host", "day"),
    ),
    "gpuplanner_spend_month_usd": ("Spend of the runs that started in a UTC month (runs report)", ("month",)),
    "gpuplanner_spend_by_tag_usd": (
        "Spend by tag value and UTC month (runs report --by KEY); value (none) for runs without the key",
        ("key", "value", "month"),
    ),
    "gpuplanner_gpu_month_seconds": ("GPU-seconds of the runs that started in a UTC month", ("month",)),
    "gpuplanner_effective_gpu_month_seconds": (
        "Effective GPU-seconds (x utilisation) of the runs that started in a UTC month",
        ("month",),
    ),
}


@dataclass
class Family:
    name: str
    help: str
    labels: tuple[str, ...]
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, labels: Iterable[object], value: float | None) -> None:
        if value is not None:
            self.samples.append((tuple("" if v is None else str(v) for v in labels), float(value)))


def families() -> dict[str, Family]:
    """One empty family per exposed metric, in :data:`SPECS` order."""
    return {name: Family(name, help_, labels) for name, (help_, labels) in SPECS.items()}


def run_cost(db: Database, run_id: int, *, with_alerts: bool) -> RunSummary:
    """A run's figures as `runs show` computes them (the one call to switch if the cost moves)."""
    return summarize(db, run_id, with_alerts=with_alerts)


class SummaryCache:
    """Summaries of ended runs, kept while their data stamp is unchanged, so a scrape of a long history
    recomputes only what changed."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[str, bool, RunSummary]] = {}

    def get(self, db: Database, run: Run, *, with_alerts: bool) -> RunSummary:
        if run.status in LIVE:
            return run_cost(db, run.id, with_alerts=with_alerts)
        # the launcher's events (billed spans, Slurm jobs) take seqs below the trainer's: count them too
        events = db.execute("SELECT COUNT(*), MIN(seq) FROM events WHERE run_id = ?", [run.id]).fetchone()
        stamp = f"{data_stamp(db, run.id)} {events[0]} {events[1]}"
        kept = self._kept.get(run.id)
        if kept is not None and kept[0] == stamp and (kept[1] or not with_alerts):
            return kept[2]
        summary = run_cost(db, run.id, with_alerts=with_alerts)
        self._kept[run.id] = (stamp, with_alerts, summary)
        return summary

    def forget_except(self, run_ids: Iterable[int]) -> None:
        keep = set(run_ids)
        self._kept = {k: v for k, v in self._kept.items() if k in keep}


def recent_runs(runs: list[Run], now: float, recent_s: float = RECENT_S) -> list[Run]:
    """The runs with per-run series: live ones, then those that ended (or last reported) within
    ``recent_s``, newest first, at most :data:`MAX_RUNS` in all."""
    live = [run for run in runs if run.status in LIVE]
    ended = []
    for run in runs:  # list_runs: newest first
        last = run.ended_at if run.ended_at is not None else run.last_t
        if run.status not in LIVE and last is not None and last >= now - recent_s:
            ended.append(run)
    return [*live, *ended][:MAX_RUNS]


def _months_back(now: float, count: int) -> set[str]:
    year, month = time.gmtime(now)[:2]
    out = set()
    for _ in range(count):
        out.add(f"{year:04d}-{month:02d}")
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return out


def _ratio(pct: float | None) -> float | None:
    return pct / 100.0 if pct is not None else None


def _seconds(hours: float | None) -> float | None:
    return hours * 3600.0 if hours is not None else None


def read_metrics(
    db: Database, *, now: float | None = None, recent_s: float = RECENT_S, cache: SummaryCache | None = None
) -> dict[str, Family]:
    """Every exposed figure of the history ``db`` at ``now`` (see the module docstring)."""
    now = time.time() if now is None else now
    cache = cache or SummaryCache()
    out = families()
    with read_snapshot(db):
        runs = list_runs(db)
        recent = recent_runs(runs, now, recent_s)
        recent_ids = {run.id for run in recent}
        summaries = {run.id: cache.get(db, run, with_alerts=run.id in recent_ids) for run in runs}
        tags = tags_of(db, recent_ids)
        keys = tag_keys(db)
        _run_series(db, out, recent, summaries, tags, now)
        _minute_aggregates(db, out, now)
    cache.forget_except(summaries)
    out["gpuplanner_history_up"].add((), 1)
    statuses: dict[str, int] = {}
    for run in runs:
        statuses[run.status] = statuses.get(run.status, 0) + 1
    for status, count in sorted(statuses.items()):
        out["gpuplanner_runs"].add((status,), count)
    _month_aggregates(db, out, summaries, keys, now)
    return out


def _run_series(
    db: Database,
    out: dict[str, Family],
    recent: list[Run],
    summaries: dict[int, RunSummary],
    tags: dict[int, dict[str, str]],
    now: float,
) -> None:
    for run in recent:
        s = summaries[run.id]
        labels = (run.id, run.host or NO_HOST, run.gpu_type or "")
        live = run.status in LIVE
        out["gpuplanner_run_info"].add((*labels, run.name or "", run.status, run.model_name or ""), 1)
        out["gpuplanner_run_live"].add(labels, 1 if live else 0)
        for key, value in sorted(tags.get(run.id, {}).items()):
            out["gpuplanner_run_tag_info"].add((run.id, key, value), 1)
        out["gpuplanner_run_spend_usd"].add(labels, s.cost_usd)
        out["gpuplanner_run_billed_usd"].add(labels, (s.billed or {}).get("billed_cost_usd"))
        budget = run.config.get("budget_usd")
        if isinstance(budget, (int, float)) and not isinstance(budget, bool):
            out["gpuplanner_run_budget_usd"].add(labels, budget)
            out["gpuplanner_run_budget_left_usd"].add(labels, budget - (s.cost_usd or 0.0))
        out["gpuplanner_run_gpus"].add(labels, s.gpu_count)
        out["gpuplanner_run_gpu_seconds"].add(labels, _seconds(s.gpu_hours))
        out["gpuplanner_run_effective_gpu_seconds"].add(labels, _seconds(s.effective_gpu_hours))
        out["gpuplanner_run_utilization_ratio"].add(labels, _ratio(s.avg_util_pct))
        out["gpuplanner_run_tokens_per_second"].add(labels, s.tokens_per_s)
        out["gpuplanner_run_queue_wait_seconds"].add(labels, s.queue["queue_wait_s"] if s.queue else None)
        counts: dict[str, int] = {}
        for alert in s.alerts:
            counts[alert["kind"]] = counts.get(alert["kind"], 0) + 1
        for kind, count in sorted(counts.items()):
            out["gpuplanner_run_alerts"].add((*labels, kind), count)
        if live:
            _live_series(db, out, run, now)


def _live_series(db: Database, out: dict[str, Family], run: Run, now: float) -> None:
    row = db.execute(
        "SELECT tokens_per_s FROM steps WHERE run_id = ? AND tokens_per_s IS NOT NULL ORDER BY seq DESC LIMIT 1",
        [run.id],
    ).fetchone()
    labels = (run.id, run.host or NO_HOST, run.gpu_type or "")
    out["gpuplanner_run_last_tokens_per_second"].add(labels, row[0] if row else None)
    newest: dict[tuple[str, int], tuple[float, ...]] = {}
    for node, index, t, util, used, total, power in db.execute(
        "SELECT node, gpu_index, t, util_pct, mem_used_bytes, mem_total_bytes, power_w FROM gpu_samples"
        " WHERE run_id = ? AND t >= (SELECT MAX(t) FROM gpu_samples WHERE run_id = ?) - 300 ORDER BY t",
        [run.id, run.id],
    ).fetchall():
        newest[(node, index)] = (t, util, used, total, power)
    for (node, index), (t, util, used, total, power) in sorted(newest.items()):
        gpu = (run.id, run.host or NO_HOST, node, index)
        out["gpuplanner_gpu_utilization_ratio"].add(gpu, _ratio(util))
        out["gpuplanner_gpu_memory_used_bytes"].add(gpu, used)
        out["gpuplanner_gpu_memory_total_bytes"].add(gpu, total)
        out["gpuplanner_gpu_power_watts"].add(gpu, power)
        out["gpuplanner_gpu_sample_age_seconds"].add(gpu, max(0.0, now - t))


def _minute_aggregates(db: Database, out: dict[str, Family], now: float) -> None:
    """Average utilisation per window and idle GPU time per day, from the per-minute rollup rows (each row
    is one GPU's minute: 60 GPU-seconds)."""
    for window, seconds in WINDOWS:
        for host, util_sum, util_n in db.execute(
            "SELECT COALESCE(r.host, ?), SUM(m.util_sum), SUM(m.util_n) FROM gpu_minutes m JOIN runs r"
            " ON r.id = m.run_id WHERE COALESCE(r.last_t, r.ended_at, ?) >= ? AND m.minute_t >= ? GROUP BY 1",
            [NO_HOST, now, now - seconds, now - seconds],
        ).fetchall():
            if util_n:
                out["gpuplanner_utilization_avg_ratio"].add((host, window), util_sum / util_n / 100.0)
    today = calendar.timegm(time.gmtime(now)[:3] + (0, 0, 0))
    since = today - (DAYS - 1) * 86400.0
    for host, day, minutes, idle in db.execute(
        "SELECT COALESCE(r.host, ?), CAST(m.minute_t / 86400 AS INTEGER), COUNT(*),"
        " SUM(CASE WHEN m.util_n > 0 AND m.util_sum < ? * m.util_n THEN 1 ELSE 0 END)"
        " FROM gpu_minutes m JOIN runs r ON r.id = m.run_id"
        " WHERE COALESCE(r.last_t, r.ended_at, ?) >= ? AND m.minute_t >= ? GROUP BY 1, 2",
        [NO_HOST, IDLE_UTIL_PCT, now, since, since],
    ).fetchall():
        label = (host, time.strftime("%Y-%m-%d", time.gmtime(day * 86400)))
        out["gpuplanner_gpu_day_seconds"].add(label, minutes * 60.0)
        out["gpuplanner_idle_gpu_day_seconds"].add(label, idle * 60.0)


def _month_aggregates(
    db: Database, out: dict[str, Family], summaries: dict[int, RunSummary], keys: list[str], now: float
) -> None:
    months = _months_back(now, MONTHS)
    for row in spend_report(db, summaries=summaries).rows:
        if row.month in months:
            out["gpuplanner_spend_month_usd"].add((row.month,), row.cost_usd)
    for key in keys:
        for row in spend_report(db, by=key, summaries=summaries).rows:
            if row.month in months:
                value = row.group if row.group is not None else UNTAGGED
                out["gpuplanner_spend_by_tag_usd"].add((key, value, row.month), row.cost_usd)
    gpu_s: dict[str, float] = {}
    effective_s: dict[str, float] = {}
    for s in summaries.values():
        month = month_of(s.started_at)
        if month in months:
            gpu_s[month] = gpu_s.get(month, 0.0) + s.gpu_hours * 3600.0
            effective_s[month] = effective_s.get(month, 0.0) + (s.effective_gpu_hours or 0.0) * 3600.0
    for month in sorted(gpu_s):
        out["gpuplanner_gpu_month_seconds"].add((month,), gpu_s[month])
        out["gpuplanner_effective_gpu_month_seconds"].add((month,), effective_s[month])


READ_TIMEOUT_S = 2.0
log = logging.getLogger(__name__)


def open_read_only(path: Path, timeout_s: float = READ_TIMEOUT_S) -> Database:
    """A read-only connection to the history file (never creates, migrates or writes it); raises
    ``sqlite3.Error`` or ``ValueError`` with the reason it cannot be read."""
    if not path.is_file():
        raise ValueError(f"no history database at {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"{path} has history schema v{version}, this app reads v{SCHEMA_VERSION}"
                + ("; open it once with `gpuplanner runs list` to migrate it" if version < SCHEMA_VERSION else "")
            )
    except BaseException:
        conn.close()
        raise
    return Database(conn)


class Scraper:
    """Reads the history on each call: its figures, or only ``gpuplanner_history_up`` 0 when the file is
    missing, locked, damaged or of another schema version (the reason is logged once per change)."""

    def __init__(self, path: Path, *, recent_s: float = RECENT_S, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.path, self.recent_s, self.timeout_s = path, recent_s, timeout_s
        self.cache = SummaryCache()
        self.reason: str | None = None

    def scrape(self, now: float | None = None) -> dict[str, Family]:
        try:
            db = open_read_only(self.path, self.timeout_s)
            try:
                result = read_metrics(db, now=now, recent_s=self.recent_s, cache=self.cache)
            finally:
                db.close()
        except (sqlite3.Error, HistoryError, ValueError, OSError) as exc:
            reason = f"cannot read the history: {exc}"
            if reason != self.reason:
                log.warning("%s", reason)
            self.reason = reason
            out = families()
            out["gpuplanner_history_up"].add((), 0)
            return out
        if self.reason is not None:
            log.warning("the history can be read again: %s", self.path)
        self.reason = None
        return result
