"""Planning with the run history: the speeds measured for a model, and one whole planner answer.

This is where the planning engine (:mod:`gpuplanner.plan`, pure) meets the run history
(:mod:`gpuplanner.history`): ``gpuplanner plan``/``compare`` take the measured speeds from here, and
the Plan pane computes its :class:`PlanResult` (plan, ranked table, recommendation, what the history
said) with :func:`compute` on a worker thread and only shows it. No Qt and no argparse here.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuplanner.history.calibration import Calibration, measurements, not_calibrating
from gpuplanner.history.db import HistoryError, open_db
from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.compare import CompareRow, compare, recommendation
from gpuplanner.plan.planner import MeasuredSpeed, Plan, PlanRequest, make_plan
from gpuplanner.plan.setup import TrainSetup

MAX_CACHED = 64  # measured-speed answers kept before the cache starts afresh


def measured_speeds(request: PlanRequest, db_path: Path, catalog: Catalog) -> dict[str, MeasuredSpeed]:
    """Per catalog GPU name, the speed measured in the history for this model, training method (full or
    LoRA) and arithmetic (fp32 or 16-bit). A measurement at the request's sequence length wins; one at
    another length still calibrates the step model (it carries the sequence length and micro-batch it was
    measured at, so the planner corrects its efficiency instead of using the speed as is)."""
    if not db_path.exists():
        return {}
    db = open_db(db_path, create=False)
    try:
        found = measurements(
            db,
            model_name=request.model.name,
            method=request.setup.method,
            precision=request.setup.precision,
        )
    finally:
        db.close()
    best: dict[str, Calibration] = {}
    for calibration in found.values():
        gpu = catalog.find_gpu(calibration.gpu_type)
        if gpu is None or calibration.tokens_per_s_per_gpu is None:
            continue
        held = best.get(gpu.name)
        if held is None or _closer(calibration, held, request.setup.seq_len):
            best[gpu.name] = calibration
    measured: dict[str, MeasuredSpeed] = {}
    for name, calibration in best.items():
        speed = calibration.tokens_per_s_per_gpu
        if speed is None:  # left out above; narrows the type
            continue
        where = "runs" if calibration.source == "run" else "trainer bench results"
        source = f"{where} {', '.join(f'#{i}' for i in calibration.ids)} on {calibration.gpu_type}"
        peak = calibration.peak_mem_bytes / 1024**3 if calibration.peak_mem_bytes else None
        exact = calibration.seq_len == request.setup.seq_len
        measured[name] = MeasuredSpeed(
            name,
            speed,
            source,
            peak if exact else None,
            seq_len=calibration.seq_len,
            micro_batch=calibration.micro_batch if not exact else None,
        )
    return measured


def calibration_skips(model_name: str, db_path: Path, limit: int = 3) -> list[str]:
    """Why the finished runs of ``model_name`` in the history at ``db_path`` calibrate nothing, newest first
    (at most ``limit``, then how many more): for the plan's source line when its speed is estimated."""
    if not db_path.exists():
        return []
    db = open_db(db_path, create=False)
    try:
        skipped = not_calibrating(db, model_name)
    finally:
        db.close()
    lines = [f"run #{run_id} does not calibrate: {use.detail}" for run_id, use in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"and {len(skipped) - limit} more finished run(s) of {model_name} that do not")
    return lines


def _closer(candidate: Calibration, held: Calibration, seq_len: int) -> bool:
    """Whether ``candidate`` was measured nearer ``seq_len`` than ``held`` (ties: the newer one)."""

    def distance(c: Calibration) -> float:
        return abs((c.seq_len or 0) - seq_len)

    if distance(candidate) != distance(held):
        return distance(candidate) < distance(held)
    return candidate.measured_at > held.measured_at


def calibrated_request(request: PlanRequest, db_path: Path, catalog: Catalog) -> PlanRequest:
    """The request with the speeds measured for its model in the history at ``db_path`` (unchanged when the
    file does not exist or holds nothing that applies). Opens and closes its own connection, so any thread
    may call it; raises HistoryError or sqlite3.Error when the file cannot be read."""
    measured = measured_speeds(request, db_path, catalog)
    return replace(request, measured=measured) if measured else request


class MeasuredCache:
    """The history's measured speeds per (model, method, precision, sequence length), until the database
    file changes. Thread-safe; the window keeps one for its planning worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], dict[str, MeasuredSpeed]] = {}

    @staticmethod
    def _stamp(path: Path) -> tuple[int, ...]:
        out: list[int] = []
        for name in (str(path), str(path) + "-wal"):
            try:
                st = os.stat(name)
                out += [st.st_mtime_ns, st.st_size]
            except OSError:
                out += [0, 0]
        return tuple(out)

    def speeds(self, request: PlanRequest, db_path: Path, catalog: Catalog) -> dict[str, MeasuredSpeed]:
        key = (
            str(db_path),
            request.model.name,
            request.setup.seq_len,
            request.setup.method,
            request.setup.precision,
            self._stamp(db_path),
        )  # everything measured_speeds matches on
        with self._lock:
            if key in self._entries:
                return self._entries[key]
        found = measured_speeds(request, db_path, catalog)
        with self._lock:
            if len(self._entries) >= MAX_CACHED:
                self._entries.clear()
            self._entries[key] = found
        return found


# settings the Plan pane's comparison always keeps as given when it fits options (see compute): the
# bundled trainer has no 8-bit optimizer states to launch
WINDOW_PINNED = ("optimizer",)


def launch_setup(request: PlanRequest, plan: Plan, rows: list[CompareRow]) -> tuple[TrainSetup, tuple[str, ...]]:
    """The settings "Launch this plan" runs with, and what compare changed to get them.

    When the plan's option (its GPU, count and pricing) appears in the comparison with fitted settings
    (the requested ones do not fit that GPU), those; otherwise the plan's own settings.
    """
    gpu = plan.gpu.name if plan.gpu is not None else request.gpu
    for row in rows:
        if row.fitted and row.gpu == gpu and row.gpus == plan.setup.gpus and row.pricing == request.pricing_mode:
            return row.plan.setup, row.fitted
    return plan.setup, ()


def comparison_request(request: PlanRequest) -> PlanRequest:
    """What the Plan pane's table ranks: every catalog GPU (as `gpuplanner compare`), or only the chosen GPU
    when the user gave their own price (a price belongs to one GPU)."""
    if request.pricing.price is not None:
        return request
    return replace(request, gpu=None)


@dataclass(frozen=True)
class PlanResult:
    """One answer of the Plan pane: the plan of the chosen option and the ranked comparison."""

    generation: int
    request: PlanRequest  # with the history's measured speeds, when the form uses them
    values: dict[str, str]
    plan: Plan
    rows: list[CompareRow]
    recommendation: str
    compute_s: float
    calibration_note: str = ""  # what the history said (nothing measured, unreadable ...)

    @property
    def throughput_source(self) -> str:
        return self.plan.throughput.source

    @property
    def memory_source(self) -> str:
        """Which memory model answered (``memory.source`` of ``gpuplanner plan --json``)."""
        return self.plan.memory.source

    @property
    def memory_note(self) -> str:
        """The memory source in words, with the reason when trace mode fell back to the formulas."""
        fallback = next((w for w in self.plan.warnings if w.startswith("trace mode unavailable")), None)
        if fallback:
            return fallback[0].upper() + fallback[1:] + "."
        if self.memory_source == "trace":
            return "Answered by trace: one training step on fake tensors (the table uses the formulas)."
        return "Answered by the formulas."


def compute(
    generation: int,
    request: PlanRequest,
    values: Mapping[str, str],
    catalog: Catalog,
    db_path: Path | None = None,
    cache: MeasuredCache | None = None,
    *,
    pinned: Collection[str] = WINDOW_PINNED,
    allow_qlora: bool = False,
) -> PlanResult:
    """The engine's answer for one request (any thread).

    With ``db_path`` the speeds measured in that run history are added first (``gpuplanner plan``'s
    calibration); a history that cannot be read is reported in ``calibration_note``, not raised.
    ``pinned`` names the TrainSetup fields the comparison keeps as given when it fits options (the
    form's "Keep as given"; the optimizer always, see :data:`WINDOW_PINNED`); ``allow_qlora`` lets it
    turn a LoRA that nothing else fits into QLoRA (the method unticked there)."""
    start = time.perf_counter()
    note = ""
    if db_path is not None:
        try:
            measured = (cache or MeasuredCache()).speeds(request, db_path, catalog)
        except (HistoryError, sqlite3.Error, OSError) as exc:
            measured, note = {}, f"Cannot read the run history ({exc}): speeds are estimated."
        if measured:
            request = replace(request, measured=measured)
    plan = make_plan(request, catalog)
    # each option that the given settings do not fit gets the fastest settings that do (Launch uses them),
    # the pinned ones kept
    rows = compare(
        comparison_request(request), catalog, fit_settings=True, pinned=tuple(pinned), allow_qlora=allow_qlora
    )
    if db_path is not None and not note:
        if plan.throughput.source.startswith("calibrated"):
            note = f"Speed {plan.throughput.source}."
        else:
            elsewhere = ", ".join(sorted(request.measured))
            note = (
                f"Measured only on {elsewhere}: estimated here."
                if elsewhere
                else f"Nothing measured for {request.model.name} at {request.setup.seq_len:,} tokens: estimated."
            )
            try:
                skips = calibration_skips(request.model.name, db_path)
            except (HistoryError, sqlite3.Error, OSError):
                skips = []
            note += "".join(f" {line[0].upper()}{line[1:]}." for line in skips)
    return PlanResult(
        generation, request, dict(values), plan, rows, recommendation(rows), time.perf_counter() - start, note
    )
