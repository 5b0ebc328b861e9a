"""Telemetry ingestion: records from any byte stream or iterable into the store, in transactions.

An :class:`Ingestor` belongs to one run and one source name (a file path, ``ssh:host:/run/dir``, ...).
It parses bytes with :class:`trainer.protocol.StreamParser`, buffers records and writes them in
batches, each in one write transaction together with the stream position (byte offset just past the
last complete line, last ``seq``, malformed and unknown-kind counts) the batch covers. A record whose
``(run, seq)`` is already stored is ignored, so reading a stream again after a reconnect or a crash
never duplicates anything. Use one ingestor per run at a time (the store serialises writers anyway).

A user's stop: the trainer's ``preempted`` and ``run_end`` records of a process the user stopped are
stored as ``stopped`` (:mod:`gpuplanner.history.stops`), and the record handed in is changed to match.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress
from typing import Any

from sqlite_utils import Database

from gpuplanner.history.db import HistoryError, write_transaction
from gpuplanner.history.rollup import Rollups
from gpuplanner.history.run_cost import known_price
from gpuplanner.history.runs import json_object
from gpuplanner.history.schema import V4_METRICS
from gpuplanner.history.stops import apply_pending_stop
from trainer.protocol import (
    INT64_MAX,
    PHASE_KINDS,
    RUN_END_STATUSES,
    RecordError,
    StreamParser,
    check_values,
    config_model_name,
    validate,
)

DEFAULT_BATCH = 5000
ENVELOPE = ("v", "seq", "t", "kind")
# Kept in ``run_phases`` (the time breakdown), not in the eval's extras or the event's detail.
_PHASE_FIELDS = ("phases", "phases_start")
_SEQ_TABLES = ("gpu_samples", "steps", "evals", "events")
USER_STOP_ANSWERS = ("preempted", "run_end")  # the trainer's records that a user's stop turns into "stopped"
# gpu_samples columns in the order of the rows _write builds (the v4 metrics after the first 13)
_GPU_EXTRA = tuple(column for column, _ in V4_METRICS if column != "sm_clock_mhz")
_METRIC_FIELDS = tuple(column for column, _ in V4_METRICS)  # the rollup's order (sm_clock_mhz last)
_GPU_FLOATS = ("util_pct", "power_w", "temp_c", "sm_clock_max_mhz", *_METRIC_FIELDS)
_GPU_INTS = ("mem_used_bytes", "mem_total_bytes", "throttle_reasons", "index")
_GPU_BASE_COLUMNS = (
    "run_id, seq, t, node, gpu_index, util_pct, mem_used_bytes, mem_total_bytes, power_w, temp_c, sm_clock_mhz,"
    " throttle_reasons, simulated"
)
_GPU_EXTRA_COLUMNS = ("sm_clock_max_mhz", *_GPU_EXTRA)


@functools.cache
def _gpu_insert(present: tuple[bool, ...]) -> str:
    """The INSERT of GPU sample rows that carry the v4 columns marked present. Absent ones are left out
    (NULL by default) rather than bound as None: binding None costs Python's sqlite3 an adapter lookup
    per value, which made ingest a third slower."""
    extra = [column for column, keep in zip(_GPU_EXTRA_COLUMNS, present) if keep]
    columns = ", ".join([_GPU_BASE_COLUMNS, *extra])
    return f"INSERT OR IGNORE INTO gpu_samples ({columns}) VALUES ({', '.join('?' * (13 + len(extra)))})"


_ALL_PRESENT = (True,) * len(_GPU_EXTRA_COLUMNS)


@dataclass(frozen=True)
class StreamPosition:
    offset: int = 0
    last_seq: int | None = None
    malformed: int = 0
    unknown_kind: int = 0


@dataclass
class IngestStats:
    inserted: int = 0
    duplicates: int = 0
    malformed: int = 0
    unknown_kind: int = 0
    offset: int = 0
    last_seq: int | None = None
    batches: int = 0


def stream_position(db: Database, run_id: int, source: str) -> StreamPosition:
    """Where a stream was last read up to (all zero for a new stream)."""
    row = db.execute(
        "SELECT byte_offset, last_seq, malformed, unknown_kind FROM stream_positions WHERE run_id = ? AND source = ?",
        [run_id, source],
    ).fetchone()
    return StreamPosition(*row) if row else StreamPosition()


# The converters never raise and never hand SQLite a value it cannot store: the parser already
# rejected records with impossible values (``check_values``), this is the second line of defence.
def _num(value: Any) -> float | None:
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return float(value) if -INT64_MAX <= value <= INT64_MAX else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        try:
            value = int(value)
        except (OverflowError, ValueError):
            return None
    return value if -INT64_MAX <= value <= INT64_MAX else None


def _json(value: Any) -> str:
    """JSON text of a record part, non-finite numbers as null (so every stored text is valid JSON)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _gpu_count(value: Any) -> int | None:
    if isinstance(value, list):
        return len(value) or None
    count = _int(value)
    return count if count and count > 0 else None


def _model_name(config: dict[str, Any]) -> str | None:
    for key in ("model_name", "model"):
        if isinstance(config.get(key), str) and config[key]:
            return str(config[key])
    path = config.get("model_config")
    if isinstance(path, str) and path:
        return config_model_name(path)
    return None


class Ingestor:
    """Feeds one run's telemetry into the store; see the module docstring."""

    def __init__(
        self, db: Database, run_id: int, source: str = "stream", *, batch_size: int = DEFAULT_BATCH, resume: bool = True
    ) -> None:
        if db.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone() is None:
            raise HistoryError(f"no run with id {run_id}")
        self.db = db
        self.run_id = run_id
        self.source = source
        self.batch_size = batch_size
        self._ended = False  # a run_end arrived in the batch being written
        self._base = stream_position(db, run_id, source) if resume else StreamPosition()
        self.parser = StreamParser(offset=self._base.offset)
        self.stats = IngestStats(
            offset=self._base.offset,
            last_seq=self._base.last_seq,
            malformed=self._base.malformed,
            unknown_kind=self._base.unknown_kind,
        )
        self._buffer: list[dict[str, Any]] = []

    @property
    def resume_offset(self) -> int:
        """The byte offset of the stream this ingestor expects its first ``feed_bytes`` chunk to start at."""
        return self._base.offset

    def feed_bytes(self, chunk: bytes) -> None:
        """Parse a chunk of the stream (bytes following the previous chunk); write full batches."""
        self._buffer.extend(self.parser.feed(chunk))
        if len(self._buffer) >= self.batch_size:
            self.flush()

    def feed_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Add already parsed and validated records (no byte position to track)."""
        for record in records:
            self._buffer.append(record)
            if len(self._buffer) >= self.batch_size:
                self.flush()

    def feed_unchecked(self, records: Iterable[Any]) -> None:
        """Add records from elsewhere (not from this ingestor's parser): each is checked as the parser
        checks a line; invalid ones are counted as malformed (or unknown kind) and skipped."""
        valid = []
        for record in records:
            try:
                valid.append(check_values(validate(record)))
            except RecordError as exc:
                if "unknown kind" in str(exc):
                    self.parser.unknown_kind += 1
                else:
                    self.parser.malformed += 1
                self.parser.last_error = str(exc)
        self.feed_records(valid)

    def flush(self) -> IngestStats:
        """Write what is buffered and the stream position in one transaction."""
        records, self._buffer = self._buffer, []
        malformed = self._base.malformed + self.parser.malformed
        unknown = self._base.unknown_kind + self.parser.unknown_kind
        if (
            not records
            and self.parser.offset == self.stats.offset
            and malformed == self.stats.malformed
            and unknown == self.stats.unknown_kind
        ):
            return self.stats
        with write_transaction(self.db):
            if self.db.execute("SELECT 1 FROM runs WHERE id = ?", [self.run_id]).fetchone() is None:
                raise HistoryError(f"run {self.run_id} was deleted while its telemetry was being stored")
            inserted, duplicates, last_seq = self._write(records)
            if self.stats.last_seq is not None and (last_seq is None or last_seq < self.stats.last_seq):
                last_seq = self.stats.last_seq
            self.db.execute(
                "INSERT OR REPLACE INTO stream_positions (run_id, source, byte_offset, last_seq, malformed,"
                " unknown_kind, updated_at) VALUES (?,?,?,?,?,?,?)",
                [self.run_id, self.source, self.parser.offset, last_seq, malformed, unknown, time.time()],
            )
        if self._ended:  # the run is complete: its alerts are evaluated once and stored with it
            self._ended = False
            self._store_alerts()
        self.stats.inserted += inserted
        self.stats.duplicates += duplicates
        self.stats.malformed, self.stats.unknown_kind = malformed, unknown
        self.stats.offset, self.stats.last_seq = self.parser.offset, last_seq
        self.stats.batches += 1
        return self.stats

    def _store_alerts(self) -> None:
        from gpuplanner.history.alerts import refresh_alerts

        try:
            refresh_alerts(self.db, self.run_id)
        except Exception:  # noqa: BLE001 - the telemetry is stored; alerts are evaluated again on reading
            if self.db.conn.in_transaction:
                self.db.conn.rollback()

    def _write(self, records: list[dict[str, Any]]) -> tuple[int, int, int | None]:
        if not records:
            return 0, 0, None
        db, run_id = self.db, self.run_id
        records.sort(key=lambda r: r["seq"])
        lo, hi = records[0]["seq"], records[-1]["seq"]
        seen: set[int] = set()
        for table in _SEQ_TABLES:
            seen.update(
                row[0]
                for row in db.execute(
                    f"SELECT seq FROM {table} WHERE run_id = ? AND seq BETWEEN ? AND ?", [run_id, lo, hi]
                )
            )
        run = db.execute("SELECT compacted_before_seq, first_t, last_t FROM runs WHERE id = ?", [run_id]).fetchone()
        compacted_before, first_t, last_t = run
        gpu_rows: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}  # by which v4 columns are present
        gpu_count = 0
        step_rows: list[tuple[Any, ...]] = []
        eval_rows: list[tuple[Any, ...]] = []
        event_rows: list[tuple[Any, ...]] = []
        events: list[dict[str, Any]] = []
        phases: dict[float, tuple[Any, ...]] = {}  # process start -> its newest totals in this batch
        rollups: Rollups | None = None
        duplicates = 0
        for record in records:
            seq = record["seq"]
            if seq in seen:
                duplicates += 1
                continue
            seen.add(seq)
            if record["kind"] in USER_STOP_ANSWERS:  # a process the user stopped: stored as "stopped"
                apply_pending_stop(db, run_id, record)
            kind = record["kind"]
            t = float(record["t"])
            if kind == "gpu":
                if seq < compacted_before:
                    duplicates += 1
                    continue
                if rollups is None:
                    rollups = Rollups(db, run_id)
                get = record.get
                node = get("node")
                node = str(node) if node is not None else ""
                # Fast paths for the usual types (the parser already checked the ranges): a finite float
                # (v - v == 0) or an in-range int is kept as is, anything else goes through _num/_int.
                # Absent fields stay None (never 0).
                floats = [
                    v if v is None or (type(v) is float and v - v == 0.0) else _num(v) for v in map(get, _GPU_FLOATS)
                ]
                used, total, throttle, index = [
                    v if v is None or (type(v) is int and -INT64_MAX <= v <= INT64_MAX) else _int(v)
                    for v in map(get, _GPU_INTS)
                ]
                index = index or 0
                util, power, temp, clock_max = floats[0], floats[1], floats[2], floats[3]
                metrics = floats[4:]  # in _METRIC_FIELDS order, sm_clock_mhz last
                simulated = bool(get("simulated"))
                row = (
                    run_id,
                    seq,
                    t,
                    node,
                    index,
                    util,
                    used,
                    total,
                    power,
                    temp,
                    metrics[-1],
                    throttle,
                    int(simulated),
                )
                extra = (clock_max, *metrics[:-1])  # _GPU_EXTRA_COLUMNS order
                if None in extra:
                    present = tuple(v is not None for v in extra)
                    gpu_rows.setdefault(present, []).append(row + tuple(compress(extra, present)))
                else:
                    gpu_rows.setdefault(_ALL_PRESENT, []).append(row + extra)
                gpu_count += 1
                rollups.add(t, node, index, util, used, total, power, simulated, throttle, metrics[-1])
                rollups.add_metrics(node, index, metrics, clock_max, throttle)
            elif kind == "step":
                get = record.get
                step_rows.append(
                    (
                        run_id,
                        seq,
                        t,
                        _int(get("step")),
                        _num(get("epoch")),
                        _num(get("loss")),
                        _num(get("lr")),
                        _int(get("tokens_total")),
                        _int(get("samples_total")),
                        _num(get("tokens_per_s")),
                        _num(get("samples_per_s")),
                        _num(get("step_time_s")),
                        _num(get("data_wait_s")),
                        _int(get("peak_mem_bytes")),
                        _num(get("mfu")),
                        _num(get("spend_usd")),
                    )
                )
            elif kind == "eval":
                eval_extra = {
                    k: v
                    for k, v in record.items()
                    if k not in ENVELOPE and k not in ("step", "eval_loss") and k not in _PHASE_FIELDS
                }
                eval_rows.append(
                    (
                        run_id,
                        seq,
                        t,
                        _int(record.get("step")),
                        _num(record.get("eval_loss")),
                        _json(eval_extra) if eval_extra else None,
                    )
                )
            else:
                detail = {k: v for k, v in record.items() if k not in ENVELOPE and k not in _PHASE_FIELDS}
                step = _int(record.get("step", record.get("resumed_from_step")))
                event_rows.append((run_id, seq, t, kind, step, _json(detail)))
                events.append(record)
            if kind in PHASE_KINDS and record.get("phases") is not None:
                process_t = _num(record.get("phases_start"))
                if process_t is not None:
                    phases[process_t] = (run_id, process_t, seq, t, _json(record["phases"]))
            first_t = t if first_t is None or t < first_t else first_t
            last_t = t if last_t is None or t > last_t else last_t
        conn = db.conn
        for present, rows in gpu_rows.items():
            conn.executemany(_gpu_insert(present), rows)
        if step_rows:
            conn.executemany("INSERT OR IGNORE INTO steps VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", step_rows)
        if eval_rows:
            conn.executemany("INSERT OR IGNORE INTO evals VALUES (?,?,?,?,?,?)", eval_rows)
        if event_rows:
            conn.executemany("INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?)", event_rows)
        if phases:  # cumulative totals: the newest record of each process wins, whatever order they came in
            conn.executemany(
                "INSERT INTO run_phases VALUES (?,?,?,?,?) ON CONFLICT (run_id, process_t) DO UPDATE SET"
                " seq = excluded.seq, t = excluded.t, phases_json = excluded.phases_json"
                " WHERE excluded.seq > run_phases.seq",
                list(phases.values()),
            )
        if rollups is not None:
            rollups.save()
        db.execute("UPDATE runs SET first_t = ?, last_t = ? WHERE id = ?", [first_t, last_t, run_id])
        for event in events:
            self._apply_event(event)
        inserted = gpu_count + len(step_rows) + len(eval_rows) + len(event_rows)
        return inserted, duplicates, hi

    def _apply_event(self, record: dict[str, Any]) -> None:
        db, run_id, kind, t = self.db, self.run_id, record["kind"], float(record["t"])
        if kind == "run_end":
            self._ended = True
            status = record.get("status")
            status = status if status in RUN_END_STATUSES else "failed"
            db.execute("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?", [status, t, run_id])
        elif kind in ("run_start", "resumed"):
            db.execute("UPDATE runs SET status = 'running', ended_at = NULL WHERE id = ?", [run_id])
        if kind != "run_start":
            return
        config = record.get("config")
        config = config if isinstance(config, dict) else {}
        host = record.get("host")
        host_name = host.get("name") if isinstance(host, dict) else host
        price = known_price(_num(config.get("price_per_gpu_hour")))  # 0 from an older trainer: no price
        # The run's config is what the trainer really ran: the newest run_start's config, over what the row
        # held (a user command's plan facts; the launcher's own document is in runs.launch_json)
        old = db.execute("SELECT config_json FROM runs WHERE id = ?", [run_id]).fetchone()
        config = {**json_object(old[0] if old else None), **config}
        db.execute(
            "UPDATE runs SET config_json = ?, started_at = COALESCE(started_at, ?),"
            " host = COALESCE(host, ?), gpu_count = COALESCE(gpu_count, ?), model_name = COALESCE(model_name, ?),"
            " price_usd_per_gpu_hour = COALESCE(price_usd_per_gpu_hour, ?) WHERE id = ?",
            [
                _json(config),
                t,
                host_name if isinstance(host_name, str) else None,
                _gpu_count(record.get("gpus")),
                _model_name(config),
                price,
                run_id,
            ],
        )


def ingest_records(
    db: Database,
    run_id: int,
    records: Iterable[dict[str, Any]],
    source: str = "records",
    *,
    batch_size: int = DEFAULT_BATCH,
) -> IngestStats:
    """Store records of a run; duplicates (same run and seq) are ignored, invalid ones counted as malformed."""
    ingestor = Ingestor(db, run_id, source, batch_size=batch_size)
    ingestor.feed_unchecked(records)
    return ingestor.flush()
