"""The history schema and its migrations (sqlite-utils ``Migrations``, one set named ``history``).

Version 1 is the first released layout. Version 2 renames the run price column, replaces the
``spot`` flag with a ``pricing`` name, and adds per-GPU rollups, utilisation/memory intervals,
1-minute downsampled samples and ``trainer bench`` results; it backfills the rollups and
intervals from the raw samples already stored, so no row is lost or left uncounted.
Version 3 adds ``run_streams``: which run owns an events file (its resolved path), a primary key so
that two processes importing one file can never create two runs (the lookup and the insert happen in
one ``BEGIN IMMEDIATE`` transaction). Runs imported before it claim their ``source``; where earlier
concurrent imports left two runs with one source, the oldest keeps it (no row is changed or lost).
Version 4 (``m004_gpu_metrics``) adds the deeper GPU telemetry, all nullable or defaulted columns (a
metric a GPU does not report stays NULL, never 0): on ``gpu_samples`` the SM clock's maximum, GPM SM
activity, SM occupancy and tensor activity, PCIe and NVLink TX/RX throughput (MB/s); on
``gpu_samples_1m`` a mean and a sample count of each (``<metric>_mean``, ``<metric>_n``), the largest
maximum clock and the OR of the minute's throttle masks; on ``run_gpus`` a sum and a count of each and
the samples per throttle reason (``throttle_json``). Runs stored before it have none of these: their
new figures read as not reported.
Version 5 (``m005_alerts``) adds what the alerts need, additively: ``gpu_minutes`` (one row per run,
GPU and minute: utilisation sum and count, the highest memory share, the share of samples throttled
for power, thermal or hardware slowdown, the SM clock), ``gpu_minute_metrics`` (the same per-minute
sums for any further named metric) and ``run_alerts`` (each alert of a run with its diagnosis and the
settings it was evaluated under), and ``run_alert_state`` (per run: those settings and a stamp of the
run's data, so an unchanged run's alerts are read back instead of evaluated again). It backfills ``gpu_minutes`` from the raw and downsampled samples.
Version 6 (``m006_time_breakdown``) adds ``run_phases``: where each trainer process of a run spent its time (seconds per
phase as its newest record reports them, keyed by the process start), for the time breakdown
(``time_breakdown.py``). Runs recorded before it have no rows and say "not recorded".
Version 7 (``m008_tags``) adds ``run_tags``: optional ``key=value`` tags per run (a project, an owner, a search), for
filtering and summing spend (additive: no existing row changes).
Version 8 (``m009_launch_document``) gives the launcher's document its own column: ``runs.config_json`` is the
trainer's own ``run_start`` config (what the trainer really ran: method, sequence length, precision,
checkpointing in its spelling, ``trainer/settings.py``), ``runs.launch_json`` what GPU Planner launched (the
trainer flags or the user's command, and ``launch``: nodes, process groups, restarts ...). Launched runs stored
before it held the launch document in ``config_json``; it moves to ``launch_json`` and the config becomes the
run's newest stored ``run_start`` config (a user command's plan facts stay in the config), so calibration and
diagnosis read one field.
Version 10 (``m011_run_logs``) adds ``run_logs``: per run, node and stream (``out``/``err``) the job output's
last 64 KiB and how far the host's file was read (``run_logs.py``), so a run's output outlives its host.
``PRAGMA user_version`` mirrors the number of applied migrations.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

MIGRATIONS = Migrations("history")

V1 = """
CREATE TABLE hosts (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    address TEXT,
    gpu_type TEXT,
    gpu_count INTEGER,
    price_usd_per_gpu_hour REAL,
    created_at REAL NOT NULL
);
CREATE TABLE plans (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    inputs_json TEXT NOT NULL,
    results_json TEXT NOT NULL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    name TEXT,
    host_id INTEGER REFERENCES hosts(id) ON DELETE SET NULL,
    host TEXT,
    gpu_type TEXT,
    gpu_count INTEGER,
    price_per_gpu_hour REAL,
    spot INTEGER NOT NULL DEFAULT 0,
    model_name TEXT,
    config_json TEXT,
    plan_id INTEGER REFERENCES plans(id) ON DELETE SET NULL,
    status TEXT NOT NULL DEFAULT 'running',
    started_at REAL,
    ended_at REAL,
    first_t REAL,
    last_t REAL,
    planned_hours REAL,
    planned_cost_usd REAL,
    planned_peak_mem_bytes INTEGER,
    planned_tokens_per_s REAL,
    source TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX runs_started ON runs(started_at);
CREATE INDEX runs_source ON runs(source);
CREATE TABLE gpu_samples (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    util_pct REAL,
    mem_used_bytes INTEGER,
    mem_total_bytes INTEGER,
    power_w REAL,
    temp_c REAL,
    sm_clock_mhz REAL,
    throttle_reasons INTEGER,
    simulated INTEGER,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX gpu_samples_run_t ON gpu_samples(run_id, t);
CREATE TABLE steps (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    step INTEGER,
    epoch REAL,
    loss REAL,
    lr REAL,
    tokens_total INTEGER,
    samples_total INTEGER,
    tokens_per_s REAL,
    samples_per_s REAL,
    step_time_s REAL,
    data_wait_s REAL,
    peak_mem_bytes INTEGER,
    mfu REAL,
    spend_usd REAL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE evals (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    step INTEGER,
    eval_loss REAL,
    extra_json TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE events (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    step INTEGER,
    detail_json TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_kind ON events(run_id, kind);
CREATE TABLE stream_positions (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    source TEXT NOT NULL,
    byte_offset INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER,
    malformed INTEGER NOT NULL DEFAULT 0,
    unknown_kind INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, source)
)
"""

V2 = """
ALTER TABLE runs RENAME COLUMN price_per_gpu_hour TO price_usd_per_gpu_hour;
ALTER TABLE runs ADD COLUMN pricing TEXT NOT NULL DEFAULT 'on_demand';
UPDATE runs SET pricing = CASE WHEN spot THEN 'spot' ELSE 'on_demand' END;
DROP INDEX runs_started;
ALTER TABLE runs DROP COLUMN spot;
CREATE INDEX runs_started ON runs(started_at);
ALTER TABLE runs ADD COLUMN planned_samples_per_s REAL;
ALTER TABLE runs ADD COLUMN compacted_before_seq INTEGER NOT NULL DEFAULT 0;
CREATE TABLE run_gpus (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    util_n INTEGER NOT NULL DEFAULT 0,
    util_sum REAL NOT NULL DEFAULT 0,
    idle_n INTEGER NOT NULL DEFAULT 0,
    util_hist TEXT NOT NULL DEFAULT '[0,0,0,0,0,0,0,0,0,0]',
    mem_used_max INTEGER,
    mem_total INTEGER,
    power_sum REAL NOT NULL DEFAULT 0,
    power_n INTEGER NOT NULL DEFAULT 0,
    simulated_n INTEGER NOT NULL DEFAULT 0,
    first_t REAL,
    last_t REAL,
    low_interval_id INTEGER,
    mem_interval_id INTEGER,
    PRIMARY KEY (run_id, node, gpu_index)
);
CREATE TABLE gpu_intervals (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    kind TEXT NOT NULL,
    start_t REAL NOT NULL,
    end_t REAL NOT NULL,
    n INTEGER NOT NULL,
    peak REAL
);
CREATE INDEX gpu_intervals_run ON gpu_intervals(run_id, kind);
CREATE TABLE gpu_samples_1m (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    minute_t REAL NOT NULL,
    n INTEGER NOT NULL,
    util_min REAL, util_mean REAL, util_max REAL,
    mem_used_min INTEGER, mem_used_mean REAL, mem_used_max INTEGER,
    mem_total_bytes INTEGER,
    power_min REAL, power_mean REAL, power_max REAL,
    temp_max REAL,
    PRIMARY KEY (run_id, node, gpu_index, minute_t)
) WITHOUT ROWID;
CREATE TABLE bench_results (
    id INTEGER PRIMARY KEY,
    gpu_type TEXT NOT NULL,
    model_name TEXT NOT NULL,
    host TEXT,
    seq_len INTEGER,
    micro_batch INTEGER,
    tokens_per_s REAL,
    samples_per_s REAL,
    peak_mem_bytes INTEGER,
    mfu REAL,
    result_json TEXT NOT NULL,
    measured_at REAL NOT NULL
);
CREATE INDEX bench_gpu_model ON bench_results(gpu_type, model_name)
"""


V3 = """
CREATE TABLE run_streams (
    source TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE
);
CREATE INDEX run_streams_run ON run_streams(run_id);
INSERT OR IGNORE INTO run_streams (source, run_id)
    SELECT source, MIN(id) FROM runs WHERE source IS NOT NULL AND source NOT LIKE 'launch:%' GROUP BY source
"""

TIME_BREAKDOWN = """
CREATE TABLE run_phases (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    process_t REAL NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    phases_json TEXT NOT NULL,
    PRIMARY KEY (run_id, process_t)
) WITHOUT ROWID
"""


TAGS = """
CREATE TABLE run_tags (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX run_tags_key_value ON run_tags(key, value)
"""


# The metrics added by version 4: the gpu_samples column and the short name used in the rollups and
# the 1-minute rows (``<name>_sum``/``<name>_n`` in run_gpus, ``<name>_mean``/``<name>_n`` per minute).
V4_METRICS: tuple[tuple[str, str], ...] = (
    ("sm_active_pct", "sm_active"),
    ("sm_occupancy_pct", "sm_occupancy"),
    ("tensor_active_pct", "tensor_active"),
    ("pcie_tx_mbps", "pcie_tx"),
    ("pcie_rx_mbps", "pcie_rx"),
    ("nvlink_tx_mbps", "nvlink_tx"),
    ("nvlink_rx_mbps", "nvlink_rx"),
    ("sm_clock_mhz", "sm_clock"),
)
V4 = ";\n".join(
    [
        "ALTER TABLE gpu_samples ADD COLUMN sm_clock_max_mhz REAL",
        *(f"ALTER TABLE gpu_samples ADD COLUMN {column} REAL" for column, _ in V4_METRICS if column != "sm_clock_mhz"),
        *(
            f"ALTER TABLE gpu_samples_1m ADD COLUMN {name}_{part}"
            for _, name in V4_METRICS
            for part in ("mean REAL", "n INTEGER NOT NULL DEFAULT 0")
        ),
        "ALTER TABLE gpu_samples_1m ADD COLUMN sm_clock_max_mhz REAL",
        "ALTER TABLE gpu_samples_1m ADD COLUMN throttle_any INTEGER",
        *(
            f"ALTER TABLE run_gpus ADD COLUMN {name}_{part}"
            for _, name in V4_METRICS
            for part in ("sum REAL NOT NULL DEFAULT 0", "n INTEGER NOT NULL DEFAULT 0")
        ),
        "ALTER TABLE run_gpus ADD COLUMN sm_clock_max_mhz REAL",
        "ALTER TABLE run_gpus ADD COLUMN throttle_n INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE run_gpus ADD COLUMN throttle_json TEXT NOT NULL DEFAULT '{}'",
    ]
)


def _run_script(db: Database, script: str) -> None:
    # executescript() would COMMIT the migration's transaction; run statements one by one.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@MIGRATIONS(name="m001_initial")
def m001_initial(db: Database) -> None:
    _run_script(db, V1)


@MIGRATIONS(name="m002_rollups_pricing_downsampling")
def m002_rollups_pricing_downsampling(db: Database) -> None:
    _run_script(db, V2)
    from gpuplanner.history.rollup import rebuild_rollups

    for (run_id,) in db.execute("SELECT id FROM runs").fetchall():
        rebuild_rollups(db, run_id)


@MIGRATIONS(name="m003_run_streams")
def m003_run_streams(db: Database) -> None:
    _run_script(db, V3)


ALERTS = """
CREATE TABLE gpu_minutes (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    minute_t REAL NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    util_n INTEGER NOT NULL DEFAULT 0,
    util_sum REAL NOT NULL DEFAULT 0,
    mem_frac_max REAL,
    throttle_n INTEGER NOT NULL DEFAULT 0,
    power_throttle_n INTEGER NOT NULL DEFAULT 0,
    thermal_throttle_n INTEGER NOT NULL DEFAULT 0,
    hw_slowdown_n INTEGER NOT NULL DEFAULT 0,
    clock_n INTEGER NOT NULL DEFAULT 0,
    clock_sum REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, node, gpu_index, minute_t)
) WITHOUT ROWID;
CREATE TABLE gpu_minute_metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    minute_t REAL NOT NULL,
    name TEXT NOT NULL,
    n INTEGER NOT NULL,
    total REAL NOT NULL,
    PRIMARY KEY (run_id, node, gpu_index, minute_t, name)
) WITHOUT ROWID;
CREATE TABLE run_alerts (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    node TEXT,
    gpu_index INTEGER,
    start_t REAL,
    end_t REAL,
    minutes REAL,
    value REAL,
    message TEXT NOT NULL,
    diagnosis_json TEXT,
    settings_json TEXT NOT NULL,
    evaluated_at REAL NOT NULL
);
CREATE INDEX run_alerts_run ON run_alerts(run_id);
CREATE TABLE run_alert_state (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    settings_json TEXT NOT NULL,
    stamp TEXT NOT NULL,
    evaluated_at REAL NOT NULL
);
INSERT INTO gpu_minutes (run_id, node, gpu_index, minute_t, n, util_n, util_sum, mem_frac_max, throttle_n,
    power_throttle_n, thermal_throttle_n, hw_slowdown_n, clock_n, clock_sum)
    SELECT run_id, node, gpu_index, CAST(t / 60 AS INTEGER) * 60.0, COUNT(*), COUNT(util_pct),
        COALESCE(SUM(util_pct), 0), MAX(CASE WHEN mem_total_bytes > 0 THEN mem_used_bytes * 1.0 / mem_total_bytes END),
        COUNT(throttle_reasons), COALESCE(SUM((throttle_reasons & 132) != 0), 0),
        COALESCE(SUM((throttle_reasons & 96) != 0), 0), COALESCE(SUM((throttle_reasons & 8) != 0), 0),
        COUNT(sm_clock_mhz), COALESCE(SUM(sm_clock_mhz), 0)
    FROM gpu_samples GROUP BY run_id, node, gpu_index, CAST(t / 60 AS INTEGER);
INSERT OR IGNORE INTO gpu_minutes (run_id, node, gpu_index, minute_t, n, util_n, util_sum, mem_frac_max)
    SELECT run_id, node, gpu_index, minute_t, n, CASE WHEN util_mean IS NULL THEN 0 ELSE n END,
        COALESCE(util_mean * n, 0),
        CASE WHEN mem_total_bytes > 0 THEN mem_used_max * 1.0 / mem_total_bytes END
    FROM gpu_samples_1m
"""


@MIGRATIONS(name="m004_gpu_metrics")
def m004_gpu_metrics(db: Database) -> None:
    # No backfill: samples stored before carry none of the new metrics (their clocks have no maximum to
    # compare with), and a downsampled run's rollups could not be rebuilt from its raw samples.
    _run_script(db, V4)


@MIGRATIONS(name="m005_alerts")
def m005_alerts(db: Database) -> None:
    _run_script(db, ALERTS)


@MIGRATIONS(name="m006_time_breakdown")
def m006_time_breakdown(db: Database) -> None:
    _run_script(db, TIME_BREAKDOWN)


@MIGRATIONS(name="m008_tags")
def m008_tags(db: Database) -> None:
    _run_script(db, TAGS)


# The keys of a launch document (``runs.launch_json``), as launched runs stored them in their config before v8
LAUNCH_KEYS = ("trainer_args", "launch", "command", "workdir")


@MIGRATIONS(name="m009_launch_document")
def m009_launch_document(db: Database) -> None:
    import json

    db.execute("ALTER TABLE runs ADD COLUMN launch_json TEXT")
    rows = db.execute("SELECT id, config_json FROM runs WHERE config_json IS NOT NULL").fetchall()
    for run_id, config_json in rows:
        try:
            config = json.loads(config_json)
        except ValueError:
            continue
        if not isinstance(config, dict) or not any(k in config for k in LAUNCH_KEYS):
            continue
        launch = {k: config[k] for k in LAUNCH_KEYS if k in config}
        rest = {k: v for k, v in config.items() if k not in LAUNCH_KEYS}  # a user command's plan facts
        start = db.execute(
            "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start' ORDER BY seq DESC LIMIT 1", [run_id]
        ).fetchone()
        try:
            detail = json.loads(start[0]) if start and start[0] else {}
        except ValueError:
            detail = {}
        trainer = detail.get("config") if isinstance(detail, dict) else None
        new = {**rest, **trainer} if isinstance(trainer, dict) else rest
        db.execute(
            "UPDATE runs SET config_json = ?, launch_json = ? WHERE id = ?",
            [json.dumps(new) if new else None, json.dumps(launch), run_id],
        )


# v9: a run id is never given twice. runs.id is an INTEGER PRIMARY KEY without AUTOINCREMENT, which SQLite
# reuses after the highest run is deleted (and the new run then found the deleted one's folder and resumed
# from its checkpoint). Every deleted id is kept (a trigger, whatever deletes the row) and create_run takes
# the next id above both.
RUN_ID_TOMBSTONES = """
CREATE TABLE IF NOT EXISTS deleted_run_ids (id INTEGER PRIMARY KEY);
CREATE TRIGGER IF NOT EXISTS runs_keep_deleted_ids AFTER DELETE ON runs
BEGIN
    INSERT OR IGNORE INTO deleted_run_ids (id) VALUES (OLD.id);
END;
"""


@MIGRATIONS(name="m010_run_ids_never_reused")
def m010_run_ids_never_reused(db: Database) -> None:
    # one statement at a time, the trigger whole (its body has a ';' of its own)
    table, trigger = RUN_ID_TOMBSTONES.split(";", 1)
    db.execute(table)
    db.execute(trigger.strip().removesuffix(";"))


# v10: the tail of each node's job output (stdout and stderr), kept so it survives the host (history/run_logs.py)
RUN_LOGS = """
CREATE TABLE IF NOT EXISTS run_logs (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node INTEGER NOT NULL,
    stream TEXT NOT NULL,
    source TEXT NOT NULL,
    byte_offset INTEGER NOT NULL,
    tail BLOB NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, node, stream)
) WITHOUT ROWID
"""


@MIGRATIONS(name="m011_run_logs")
def m011_run_logs(db: Database) -> None:
    _run_script(db, RUN_LOGS)


SCHEMA_VERSION = 10
