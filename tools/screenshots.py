"""Render each pane of the window at 1280x800 with realistic data into docs/screenshots/*.png.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/screenshots.py [--out docs/screenshots] [--only plan,history]

Everything happens in a temporary data and settings directory (the user's history is never touched):
- plan.png: the planner with the example LoRA workload, a deadline and a budget;
- plan-dark.png: the same on the dark palette, a full fine-tune that does not fit, with the advice;
- runs.png and hosts.png: by tools/runs_screenshots.py (an 8-GPU run two hours in, fed through the
  same record path as a live run; hosts with probes and a refused host key);
- history.png / history-compare.png: five past runs generated as telemetry and ingested into the
  history (one run's plots and events; two runs side by side).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SIZE = (1280, 800)
GIB = 1 << 30
DAY0 = 1_763_000_000.0


def generated_runs(db_path: Path) -> list[int]:
    """Five past runs of different GPUs, models and endings, as real telemetry records."""
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run
    from trainer.protocol import make_record

    specs = [  # name, host, gpu, n, price, pricing, model, hours, util, status, planned cost factor
        ("llama8b-lora-a", "lambda-h100", "H100 SXM", 1, 2.49, "on_demand", "llama-3.1-8b", 3.6, 88, "finished", 0.93),
        ("llama8b-lora-spot", "runpod-spot", "H100 SXM", 1, 1.75, "spot", "llama-3.1-8b", 4.1, 84, "finished", 0.9),
        ("qwen7b-full", "gcp-a100x8", "A100 80GB", 8, 3.67, "on_demand", "qwen2.5-7b", 2.2, 71, "finished", 1.1),
        ("gpt2-sweep-3", "workstation", "RTX 4090", 1, 0.0, "on_demand", "gpt2", 0.8, 46, "early_stop", None),
        ("mistral-qlora", "aws-l4", "L4", 1, 0.8, "spot", "mistral-7b-v0.3", 1.3, 92, "failed", None),
    ]
    rng = random.Random(7)
    db = open_db(db_path)
    ids = []
    try:
        for k, (name, host, gpu, n, price, pricing, model, hours, util, status, factor) in enumerate(specs):
            t0 = DAY0 + k * 86400 * 1.7
            span = hours * 3600.0
            planned = None
            if factor and price:
                planned = {
                    "hours": hours * factor,
                    "cost_usd": price * n * hours * factor,
                    "peak_mem_bytes": int(40 * GIB),
                    "tokens_per_s": 9000.0 * n,
                }
            run_id = create_run(
                db,
                name=name,
                host=host,
                gpu_type=gpu,
                gpu_count=n,
                price_usd_per_gpu_hour=price,
                pricing=pricing,
                model_name=model,
                planned=planned,
                started_at=t0,
            )
            records = []
            seq = 0

            def add(kind: str, at: float, records: list = records, t0: float = t0, **fields: object) -> None:
                nonlocal seq
                records.append(make_record(kind, seq, t0 + at, **fields))
                seq += 1

            add("run_start", 0.0, config={"model_name": model}, host=host, gpus=n, resumed_from_step=None)
            every = max(30.0, span / 400)
            preempt_at = span * 0.55 if pricing == "spot" and status == "finished" else None
            steps = int(span / every)
            for i in range(steps):
                at = i * every + 1
                if preempt_at and preempt_at <= at < preempt_at + 600:
                    if not any(r["kind"] == "preempted" for r in records):
                        add("preempted", preempt_at, step=i * 10)
                        add("resumed", preempt_at + 600, step=(i // 60) * 600)
                    continue
                for g in range(n):
                    u = max(0.0, min(100.0, util + rng.gauss(0, 6) - (35 if i % 97 == 5 else 0)))
                    add(
                        "gpu",
                        at,
                        node="n0",
                        index=g,
                        util_pct=u,
                        mem_used_bytes=int((38 + rng.gauss(0, 1)) * GIB),
                        mem_total_bytes=int(80 * GIB if "4090" not in gpu and gpu != "L4" else 24 * GIB),
                        power_w=120 + 5.5 * u,
                        temp_c=55 + u / 5,
                        sm_clock_mhz=1980,
                        throttle_reasons=0,
                        simulated=False,
                    )
                loss = 2.6 * math.exp(-i / (steps / 3)) + 0.9 + rng.gauss(0, 0.03)
                add(
                    "step",
                    at + 0.5,
                    step=i * 10,
                    epoch=i / steps,
                    loss=loss,
                    lr=2e-4,
                    tokens_total=i * 10 * 8192 * n,
                    samples_total=i * 40 * n,
                    tokens_per_s=8000 * n * util / 88 + rng.gauss(0, 150),
                    samples_per_s=4.0 * n,
                    step_time_s=every / 10,
                    data_wait_s=0.02 if util > 60 else 0.4,
                    peak_mem_bytes=int(39 * GIB),
                    mfu=0.38,
                    spend_usd=price * n * at / 3600,
                )
                if i and i % 60 == 0:
                    add(
                        "checkpoint",
                        at + 0.7,
                        step=i * 10,
                        path=f"/runs/{name}/ckpt-{i * 10}",
                        bytes=int(2e9),
                        seconds=6.0,
                    )
            add("run_end", span, status=status, totals={})
            ingest_records(db, run_id, records)
            ids.append(run_id)
    finally:
        db.close()
    return ids


def grab(window: object, path: Path) -> None:
    from PySide6.QtWidgets import QApplication

    for _ in range(5):
        QApplication.processEvents()
        time.sleep(0.02)
    image = window.grab().toImage()  # type: ignore[attr-defined]
    if not image.save(str(path), "PNG"):
        raise OSError(f"cannot write {path}")
    print(f"wrote {path} ({image.width()}x{image.height()})")


def wait(seconds: float, until: object = None) -> None:
    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        if until is not None and until():  # type: ignore[operator]
            return
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument(
        "--only", default="plan,hosts,runs,history", help="comma-separated places to write (default: all)"
    )
    args = parser.parse_args(argv)
    only = {name.strip() for name in args.only.split(",")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpuplanner-shots-"))
    os.environ.update(
        GPUPLANNER_DATA_DIR=str(tmp / "data"),
        GPUPLANNER_CONFIG_DIR=str(tmp / "config"),
        XDG_CONFIG_HOME=str(tmp / "xdg"),
    )
    os.environ.pop("GPUPLANNER_DB", None)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings

    from gpuplanner.ui.app import create_application, create_window
    from gpuplanner.ui.palette import apply_scheme

    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp / "settings"))
    app = create_application((), theme="light")
    from gpuplanner.history.db import resolve_db_path

    run_ids = generated_runs(resolve_db_path())
    window = create_window()
    window.resize(*SIZE)
    window.show()
    try:
        plan = window.plan_pane
        wait(20, lambda: window.is_built("Runs"))  # the chart and the Runs pane come after the first frame
        plan.form.set_values({"deadline-hours": "12", "budget-usd": "40"})
        plan.recalculate()
        wait(10, lambda: not plan.is_busy() and plan.result is not None)
        window.show_place("Plan")
        if "plan" in only:
            grab(window, out / "plan.png")

        history = window.history_pane
        window.show_place("History")
        wait(20, lambda: not history.is_loading())
        history.select_runs([run_ids[1]])
        history.detail_tabs.setCurrentWidget(history.plots)
        wait(20, lambda: not history.is_loading())
        if "history" in only:
            grab(window, out / "history.png")
            history.select_runs([run_ids[0], run_ids[1], run_ids[2]])
            grab(window, out / "history-compare.png")

        apply_scheme(app, dark=True)
        for pane in (plan.chart, history.plots):
            pane.apply_palette()
        plan.form.set_values(
            {"method": "full", "gpu": "L40S", "grad-checkpointing": "none", "deadline-hours": "", "budget-usd": ""}
        )
        plan.recalculate()
        wait(10, lambda: not plan.is_busy() and plan.result is not None)
        window.show_place("Plan")
        if "plan" in only:
            grab(window, out / "plan-dark.png")
    finally:
        window.shutdown(stop_runs=True)
        window._closing_done = True
        window.close()
    if only & {"runs", "hosts"}:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import runs_screenshots

        runs_screenshots.main(str(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
