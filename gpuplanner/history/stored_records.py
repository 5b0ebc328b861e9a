"""A run's telemetry as the history holds it, read back as protocol records (the Runs pane's backfill after a
restart) and counted (the self-test)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database


def stored_records(db: Database, run_id: int, gpu_fields: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The run's GPU samples (with the further ``gpu_fields`` columns of ``gpu_samples``), steps, evaluations
    and events as protocol records (``seq``, ``t``, ``kind`` and their fields), in no particular order."""
    records: list[dict[str, Any]] = []
    extra = tuple(name for name in gpu_fields if name != "util_pct")
    for seq, t, node, idx, util, used, total, power, sim, *values in db.execute(
        "SELECT seq, t, node, gpu_index, util_pct, mem_used_bytes, mem_total_bytes, power_w, simulated"
        + "".join(f", {name}" for name in extra)
        + " FROM gpu_samples WHERE run_id = ?",
        [run_id],
    ).fetchall():
        record = {
            "seq": seq,
            "t": t,
            "kind": "gpu",
            "node": node,
            "index": idx,
            "util_pct": util,
            "mem_used_bytes": used,
            "mem_total_bytes": total,
            "power_w": power,
            "simulated": bool(sim) if sim is not None else None,
        }
        record.update(zip(extra, values))
        records.append(record)
    for seq, t, step, loss, tps, st, dw, spend in db.execute(
        "SELECT seq, t, step, loss, tokens_per_s, step_time_s, data_wait_s, spend_usd FROM steps WHERE run_id = ?",
        [run_id],
    ).fetchall():
        records.append(
            {
                "seq": seq,
                "t": t,
                "kind": "step",
                "step": step,
                "loss": loss,
                "tokens_per_s": tps,
                "step_time_s": st,
                "data_wait_s": dw,
                "spend_usd": spend,
            }
        )
    for seq, t, step, eval_loss in db.execute(
        "SELECT seq, t, step, eval_loss FROM evals WHERE run_id = ?", [run_id]
    ).fetchall():
        records.append({"seq": seq, "t": t, "kind": "eval", "step": step, "eval_loss": eval_loss})
    for seq, t, kind, step, detail in db.execute(
        "SELECT seq, t, kind, step, detail_json FROM events WHERE run_id = ?", [run_id]
    ).fetchall():
        rec: dict[str, Any] = {}
        if detail:
            try:
                loaded = json.loads(detail)
                rec = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                rec = {}
        rec.update({"seq": seq, "t": t, "kind": kind, "step": step})
        records.append(rec)
    return records


@dataclass(frozen=True)
class RecordCounts:
    steps: int
    gpu_samples: int
    simulated_gpu_samples: int


def record_counts(db: Database, run_id: int) -> RecordCounts:
    """How many step records and GPU samples (and of those, simulated ones) the history holds for the run."""
    steps = db.execute("SELECT COUNT(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0]
    gpu_all, gpu_sim = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(simulated = 1), 0) FROM gpu_samples WHERE run_id = ?", [run_id]
    ).fetchone()
    return RecordCounts(int(steps), int(gpu_all), int(gpu_sim))


def recent_steps(db: Database, run_id: int, limit: int) -> tuple[list[float], list[float], int | None]:
    """The times and step numbers of the run's last ``limit`` step records (oldest first), and the steps in the
    whole run as its latest ``run_start`` record says (None when it does not)."""
    rows = db.execute(
        "SELECT t, step FROM steps WHERE run_id = ? AND step IS NOT NULL ORDER BY seq DESC LIMIT ?", [run_id, limit]
    ).fetchall()[::-1]
    start = db.execute(
        "SELECT detail_json FROM events WHERE run_id = ? AND kind = 'run_start' ORDER BY seq DESC LIMIT 1", [run_id]
    ).fetchone()
    total = None
    if start and start[0]:
        try:
            detail = json.loads(start[0])
        except ValueError:
            detail = None
        value = detail.get("steps_total") if isinstance(detail, dict) else None
        total = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    return [float(t) for t, _ in rows], [float(step) for _, step in rows], total
