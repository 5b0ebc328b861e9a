"""One run's curves as TensorBoard event files (`gpuplanner runs export ID --format tensorboard --out DIR`).

Scalars, each at its record's wall time:

- ``train/loss``, ``train/lr``, ``train/tokens_per_s``: every stored step, at its training step;
- ``eval/loss``: every evaluation, at its training step;
- ``gpu/utilization_pct/NODE:INDEX``: each GPU's per-minute mean utilisation (the rollup rows the alerts
  read, kept after `runs compact` too), at the seconds since the run's first record as its "step".

The files are written with TensorBoard's own event writer (the one PyTorch's ``SummaryWriter`` uses), so
no PyTorch is needed on the desktop; the ``tensorboard`` package is an optional extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from gpuplanner.history.alerts import gpu_minutes
from gpuplanner.history.runs import get_run

INSTALL_HINT = "--format tensorboard needs the tensorboard package: pip install 'gpuplanner[tensorboard]'"
STEP_CURVES = (("train/loss", "loss"), ("train/lr", "lr"), ("train/tokens_per_s", "tokens_per_s"))


class TensorBoardMissing(RuntimeError):
    """The tensorboard package is not installed (the message says how to install it)."""


@dataclass(frozen=True)
class Point:
    tag: str
    step: int
    wall_time: float
    value: float


def run_curves(db: Database, run_id: int) -> list[Point]:
    """The run's scalars in the order they are written (raises HistoryError for an unknown run)."""
    run = get_run(db, run_id)
    points = []
    for tag, column in STEP_CURVES:
        for step, t, value in db.execute(
            f"SELECT step, t, {column} FROM steps WHERE run_id = ? AND {column} IS NOT NULL ORDER BY seq", [run_id]
        ).fetchall():
            points.append(Point(tag, int(step or 0), float(t), float(value)))
    for step, t, value in db.execute(
        "SELECT step, t, eval_loss FROM evals WHERE run_id = ? AND eval_loss IS NOT NULL ORDER BY seq", [run_id]
    ).fetchall():
        points.append(Point("eval/loss", int(step or 0), float(t), float(value)))
    minutes = gpu_minutes(db, run_id)
    start = run.first_t
    if start is None:
        start = min((m[0].minute_t for m in minutes.values() if m), default=0.0)
    for (node, index), rows in sorted(minutes.items()):
        for minute in rows:
            if minute.util_pct is not None:
                step = max(0, int(round(minute.minute_t - start)))
                points.append(Point(f"gpu/utilization_pct/{node}:{index}", step, minute.minute_t, minute.util_pct))
    return points


def write_tensorboard(db: Database, run_id: int, out_dir: Path) -> tuple[Path, int]:
    """Write the run's curves as one event file in ``out_dir`` (created); returns the file and the number
    of scalars. Raises :class:`TensorBoardMissing` without the tensorboard package."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise TensorBoardMissing(INSTALL_HINT) from None
    points = run_curves(db, run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = f".gpuplanner-run{run_id}"
    before = set(out_dir.glob(f"events.out.tfevents.*{suffix}"))
    writer = EventFileWriter(str(out_dir), filename_suffix=suffix)
    try:
        for p in points:
            summary = Summary(value=[Summary.Value(tag=p.tag, simple_value=p.value)])
            writer.add_event(Event(wall_time=p.wall_time, step=p.step, summary=summary))
    finally:
        writer.close()
    (written,) = set(out_dir.glob(f"events.out.tfevents.*{suffix}")) - before
    return written, len(points)
