"""`gpuplanner runs` actions that change or move the history: delete, delete-bench, import, export, compact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpuplanner.commands.errors import UsageError
from gpuplanner.commands.runs_args import guard
from gpuplanner.history import export as export_mod
from gpuplanner.history import jsonsafe
from gpuplanner.history.calibration import delete_bench
from gpuplanner.history.db import open_db
from gpuplanner.history.launcher_events import record_launcher_event
from gpuplanner.history.maintenance import downsample, optimize
from gpuplanner.history.plans import get_plan, planned_figures
from gpuplanner.history.runs import delete_run, run_for_stream, update_run
from gpuplanner.history.tail import events_file, ingest_file
from gpuplanner.history.tensorboard_export import TensorBoardMissing, write_tensorboard

TENSORBOARD = "tensorboard"


@guard
def delete_bench_action(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        delete_bench(db, args.bench_id)
    print(
        jsonsafe.dumps({"deleted_bench": args.bench_id})
        if args.fmt == "json"
        else f"deleted bench result {args.bench_id}"
    )
    return 0


@guard
def delete_action(args: argparse.Namespace) -> int:
    with open_db(args.db, create=False) as db:
        delete_run(db, args.run_id)
    print(jsonsafe.dumps({"deleted": args.run_id}) if args.fmt == "json" else f"deleted run {args.run_id}")
    return 0


@guard
def import_action(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.exists():
        raise UsageError(f"RUN_DIR_OR_EVENTS_FILE: {path} does not exist")
    file = events_file(path)
    if not file.is_file():
        raise UsageError(f"RUN_DIR_OR_EVENTS_FILE: {file} is not a file")
    pricing = "spot" if args.spot else "on_demand"
    with open_db(args.db) as db:
        planned = None
        if args.plan is not None:
            planned = planned_figures(get_plan(db, args.plan).document, pricing)
        run_id, stream, created = run_for_stream(
            db,
            file,
            name=args.name,
            host=args.host,
            gpu_type=args.gpu_type,
            gpu_count=args.gpus,
            price_usd_per_gpu_hour=args.price,
            pricing=pricing,
            model_name=args.model,
            plan_id=args.plan,
            planned=planned,
        )
        relabelled = None
        if not created:
            held = db.execute("SELECT gpu_type FROM runs WHERE id = ?", [run_id]).fetchone()[0]
            if args.gpu_type is not None and held and args.gpu_type != held:
                if not args.relabel:
                    raise UsageError(
                        f"--gpu-type: run {run_id} is already recorded on {held!r}; give --relabel to change it to"
                        f" {args.gpu_type!r} (its speed then calibrates {args.gpu_type!r})"
                    )
                relabelled = {"field": "gpu_type", "from": held, "to": args.gpu_type}
            given = {
                "name": args.name,
                "host": args.host,
                "gpu_type": args.gpu_type,
                "gpu_count": args.gpus,
                "price_usd_per_gpu_hour": args.price,
                "model_name": args.model,
                "plan_id": args.plan,
            }
            changes = {k: v for k, v in given.items() if v is not None}
            if args.spot:
                changes["pricing"] = "spot"
            if planned:
                changes.update({f"planned_{k}": v for k, v in planned.items()})
            update_run(db, run_id, **changes)
            if relabelled is not None:
                record_launcher_event(db, run_id, "relabelled", relabelled)
        stats = ingest_file(db, run_id, file, source=stream, follow=args.follow)
        status = db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()[0]
    result = {
        "run_id": run_id,
        "status": status,
        "inserted": stats.inserted,
        "duplicates": stats.duplicates,
        "malformed": stats.malformed,
        "unknown_kind": stats.unknown_kind,
        "offset": stats.offset,
        "relabelled": relabelled,
    }
    if args.fmt == "json":
        print(jsonsafe.dumps(result))
    elif args.fmt in ("csv", "markdown"):
        export_mod.write_table(sys.stdout, args.fmt, tuple(result), [tuple(result.values())])
    else:
        print(
            f"run {run_id} ({status}): {stats.inserted} new records, {stats.duplicates} already stored, "
            f"{stats.malformed} malformed and {stats.unknown_kind} unknown lines skipped"
        )
        if relabelled is not None:
            print(f"relabelled run {run_id}: GPU type {relabelled['from']!r} -> {relabelled['to']!r}")
    return 0


@guard
def export_action(args: argparse.Namespace) -> int:
    if args.format == TENSORBOARD:
        return _export_tensorboard(args)
    with open_db(args.db, create=False) as db:
        if args.out:
            _export_to_file(db, args.run_id, args.format, Path(args.out))
        else:
            export_mod.export_run(db, args.run_id, args.format, sys.stdout)
    return 0


def _export_tensorboard(args: argparse.Namespace) -> int:
    """The run's curves as a TensorBoard event file in the folder ``--out``."""
    if not args.out:
        raise UsageError("--format tensorboard: give the folder for the event file with --out DIR")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} is a file; --format tensorboard writes into a folder")
    with open_db(args.db, create=False) as db:
        try:
            path, count = write_tensorboard(db, args.run_id, out)
        except TensorBoardMissing as exc:
            print(f"gpuplanner runs: error: {exc}", file=sys.stderr)
            return 1
    print(f"wrote {count} scalars of run {args.run_id} to {path} (open it with: tensorboard --logdir {out})")
    return 0


def _export_to_file(db: Any, run_id: int, fmt: str, path: Path) -> None:
    """Write the export to ``path``; a folder, a missing folder or a full device is one clear error, and a
    regular file that could not be written completely is removed rather than left half written."""
    if path.is_dir():
        raise UsageError(f"--out: {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"--out: the folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            export_mod.export_run(db, run_id, fmt, out)
    except OSError as exc:
        if not existed and path.is_file():
            path.unlink(missing_ok=True)
        raise UsageError(f"--out: cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        if not existed and path.is_file():
            path.unlink(missing_ok=True)
        raise


@guard
def compact_action(args: argparse.Namespace) -> int:
    if not args.older_than_days >= 0:
        raise UsageError("--older-than-days: a number of days, 0 or more")
    with open_db(args.db) as db:
        result = downsample(db, older_than_s=args.older_than_days * 86400.0)
        optimize(db)
    data = {"runs": result.runs, "samples_removed": result.samples_removed, "minutes_written": result.minutes_written}
    print(
        jsonsafe.dumps(data)
        if args.fmt == "json"
        else f"downsampled {result.samples_removed} samples of {result.runs} runs into {result.minutes_written} minute rows"
    )
    return 0
