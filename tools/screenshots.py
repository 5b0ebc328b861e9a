"""Render each pane and dialog of the window at 1280x800 and 1920x1080 (light and dark) into docs/screenshots/.

    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python tools/screenshots.py [--out DIR] [--only plan,history]
    (without a display it renders offscreen on a 1920x1080 screen, see runs_screenshots.choose_platform)

Names: ``<place>.png`` at 1280x800, ``<place>-1920.png`` at 1920x1080, ``<place>-dark.png`` and
``<place>-1920-dark.png`` on the dark palette; the dialogs ``launch-dialog.png``, ``launch-command.png``,
``own-hardware-dialog.png``, ``welcome-dialog.png``, ``host-dialog.png`` (Hosts > Add, after Test
connection), ``alert-settings-dialog.png`` (Runs > Alert settings), each but the own-hardware one also as
``*-dark.png``; ``runs-failed.png``,
``history-failed.png`` and the PDF reports' first pages ``report-plan.png`` and ``report-history.png``
(rendered with poppler's pdftoppm).

Everything happens in a temporary data and settings directory (the user's history is never touched):
- plan.png: the planner with the example LoRA workload, a deadline and a budget;
- plan-dark.png: the same on the dark palette, a full fine-tune that does not fit the form's GPU (its note at the top);
- runs.png and hosts.png: by tools/runs_screenshots.py (an 8-GPU run two hours in, fed through the
  same record path as a live run; hosts with probes and a refused host key);
- history-alerts.png: the summary of a run whose alerts fired (low utilisation, input-bound), each
  with its diagnosis and a "Carry to plan" link.
- history.png / history-compare.png: five past runs generated as telemetry and ingested into the
  history (one run's plots and events; two runs side by side);
- history-time.png: the Time tab, where the five runs' billed time went (the generated runs carry
  the trainer's phase totals: start-up, compilation, tokenising, checkpoints, evaluations and, for
  two of them, GPUs left idle after the job);
  history-telemetry.png: a Hopper run's summary (both effective GPU-hour figures, the GPU's
  telemetry, NVLink not reported).
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
        ("gpt2-sweep-3", "workstation", "RTX 4090", 1, 0.0, "on_demand", "gpt2", 1.6, 46, "early_stop", None),
        ("mistral-qlora", "aws-l4", "L4", 1, 0.8, "spot", "mistral-7b-v0.3", 1.3, 92, "failed", None),
    ]
    # the phases of each run (seconds): start-up and model load, compilation, tokenising, one
    # checkpoint write, one evaluation, GPUs held after the job (generated, not measured)
    phase_specs = {
        "llama8b-lora-a": (540.0, 0.0, 150.0, 40.0, 35.0, 1500.0),
        "llama8b-lora-spot": (600.0, 0.0, 150.0, 40.0, 35.0, 0.0),
        "qwen7b-full": (780.0, 300.0, 240.0, 170.0, 60.0, 0.0),
        "gpt2-sweep-3": (95.0, 0.0, 40.0, 3.0, 8.0, 600.0),
        "mistral-qlora": (480.0, 0.0, 120.0, 30.0, 30.0, 0.0),
    }
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

            if model == "gpt2":  # a trainer run with its settings: its alerts get a planner-backed diagnosis
                config = {"model_name": model, "model": model, "micro_batch": 8, "grad_accum": 4, "seq_len": 1024}
                add("run_start", 0.0, config={**config, "num_workers": 2}, host=host, gpus=n, cpu_count=16)
            else:
                add("run_start", 0.0, config={"model_name": model}, host=host, gpus=n, resumed_from_step=None)
            every = max(30.0, span / 400)
            preempt_at = span * 0.55 if pricing == "spot" and status == "finished" else None
            steps = int(span / every)
            startup_s, compile_s, tokenise_s, ckpt_s, eval_s, idle_s = phase_specs[name]
            job_end = span - idle_s
            wait_share = (0.02 if util > 60 else 0.4) / (every / 10)
            process = {"start": 0.0, "checkpoints": 0, "evals": 0, "t0": t0, "wait": wait_share}
            process.update(zip(("startup", "compile", "data", "checkpoint", "eval"), phase_specs[name]))

            def phases(at: float, process: dict = process) -> dict[str, object]:
                return phase_totals(process, at)

            for i in range(steps):
                at = i * every + 1
                if at > job_end:
                    for g in range(n):  # the job is over; nobody released the GPUs
                        add("gpu", at, node="n0", index=g, util_pct=0.0, mem_used_bytes=0,
                            mem_total_bytes=int(80 * GIB), power_w=62.0, temp_c=38.0, sm_clock_mhz=210,
                            throttle_reasons=0, simulated=False)  # fmt: skip
                    continue
                if preempt_at and preempt_at <= at < preempt_at + 600:
                    if not any(r["kind"] == "preempted" for r in records):
                        add("preempted", preempt_at, step=i * 10)
                        add("run_start", preempt_at + 600, config={"model_name": model}, host=host, gpus=n,
                            resumed_from_step=(i // 60) * 600)  # fmt: skip
                        add("resumed", preempt_at + 600, step=(i // 60) * 600)
                        process.update(start=preempt_at + 600, checkpoints=0, evals=0)
                    continue
                loading = at - process["start"] < startup_s + compile_s + tokenise_s
                gpm = gpu.startswith("H100")  # SM and tensor activity: Hopper only; NVLink: the 8-GPU box
                clock_max = {"H100 SXM": 1980, "A100 80GB": 1410, "RTX 4090": 2520, "L4": 2040}[gpu]
                for g in range(n):
                    u = max(0.0, min(100.0, util + rng.gauss(0, 6) - (35 if i % 97 == 5 else 0)))
                    u = rng.uniform(0.0, 4.0) if loading else u
                    capped = gpu == "RTX 4090" and i % 3 == 0
                    add(
                        "gpu",
                        at,
                        node="n0",
                        index=g,
                        util_pct=u,
                        mem_used_bytes=int(
                            (38 if "4090" not in gpu and gpu != "L4" else 15) * GIB + rng.gauss(0, 1) * GIB
                        ),
                        mem_total_bytes=int(80 * GIB if "4090" not in gpu and gpu != "L4" else 24 * GIB),
                        power_w=120 + 5.5 * u,
                        temp_c=55 + u / 5,
                        sm_clock_mhz=clock_max * (0.88 if capped else 1.0),
                        sm_clock_max_mhz=clock_max,
                        throttle_reasons=0x4 if capped else 0,
                        sm_active_pct=u * 0.68 if gpm else None,
                        tensor_active_pct=u * 0.47 if gpm else None,
                        pcie_tx_mbps=1.0 + rng.random(),
                        pcie_rx_mbps=30.0 + 20 * rng.random(),
                        nvlink_tx_mbps=21_000 + 3_000 * rng.random() if n > 1 else None,
                        nvlink_rx_mbps=21_000 + 3_000 * rng.random() if n > 1 else None,
                        simulated=False,
                    )
                if loading:
                    continue
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
                    **phases(at + 0.5),
                )
                if i and i % 60 == 0:
                    add(
                        "checkpoint",
                        at + 0.7,
                        step=i * 10,
                        path=f"/runs/{name}/ckpt-{i * 10}",
                        bytes=int(2e9),
                        seconds=ckpt_s,
                        **phases(at + 0.7),
                    )
                    process["checkpoints"] += 1
                if i % 100 == 50:
                    process["evals"] += 1
                    add("eval", at + 0.8, step=i * 10, eval_loss=loss + 0.05, **phases(at + 0.8))
            end_at = min(span, job_end + 1.0)
            if status == "failed":  # out of memory at a long batch, as the trainer and torch report it
                error = "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB"
                add("run_end", end_at, status=status, totals={}, error=error, exit_code=1, **phases(end_at))
            else:
                add("run_end", end_at, status=status, totals={}, **phases(end_at))
            if idle_s:  # the last sample of the GPUs still held
                add("gpu", span, node="n0", index=0, util_pct=0.0, mem_used_bytes=0, mem_total_bytes=int(80 * GIB),
                    power_w=62.0, temp_c=38.0, sm_clock_mhz=210, throttle_reasons=0, simulated=False)  # fmt: skip
            ingest_records(db, run_id, records)
            if status == "failed":
                from gpuplanner.history.failures import record_failure

                tail = "\n".join(
                    [
                        "Traceback (most recent call last):",
                        '  File "trainer/loop.py", line 612, in _train_step',
                        "    loss.backward()",
                        '  File "torch/_tensor.py", line 648, in backward',
                        "    torch.autograd.backward(",
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total"
                        " capacity of 22.03 GiB of which 1.21 GiB is free.",
                        "trainer: training failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB",
                    ]
                )
                record_failure(db, run_id, {"error": error, "exit_code": 1, "stderr_tail": tail, "host": host})
            ids.append(run_id)
    finally:
        db.close()
    return ids


def phase_totals(process: dict, at: float) -> dict[str, object]:
    """The trainer's phase totals at ``at`` (seconds since the run's start) of the running process:
    start-up, compilation and tokenising first, then each checkpoint and evaluation so far, and the
    rest training and waiting for data."""
    left = at - process["start"]
    out = {}
    for phase, seconds in (
        ("startup", process["startup"]),
        ("compile", process["compile"]),
        ("data", process["data"]),
        ("checkpoint", process["checkpoints"] * process["checkpoint"]),
        ("eval", process["evals"] * process["eval"]),
    ):
        out[phase] = max(0.0, min(left, seconds))
        left -= out[phase]
    left = max(0.0, left)
    out["data"] += left * process["wait"]
    out["train"] = left * (1 - process["wait"])
    return {"phases": {k: round(v, 3) for k, v in out.items()}, "phases_start": process["t0"] + process["start"]}


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


SIZES = (("", (1280, 800)), ("-1920", (1920, 1080)))  # file-name suffix, window size


def render_pdf_page(pdf: Path, png: Path) -> None:
    """Page 1 of a PDF as a PNG (poppler's pdftoppm), as a reader sees it."""
    import subprocess

    subprocess.run(["pdftoppm", "-r", "80", "-png", "-singlefile", str(pdf), str(png.with_suffix(""))], check=True)
    print(f"wrote {png}")


def grab_dialogs(window: object, out: Path, theme: str) -> None:
    """The small dialogs on the palette in use: the welcome of a first start, Hosts > Add (an SSH host
    with its interpreter filled in, after Test connection) and Runs > Alert settings."""
    from gpuplanner.history.alert_rules import AlertSettings
    from gpuplanner.ui.dialogs.alert_settings_dialog import AlertSettingsDialog

    welcome = window.show_welcome()  # type: ignore[attr-defined]
    grab(welcome, out / f"welcome-dialog{theme}.png")
    welcome.close()
    host = window.hosts_pane.make_host_dialog()  # type: ignore[attr-defined]
    host.name_edit.setText("a100-box")
    host.hostname_edit.setText("203.0.113.40")
    host.user_edit.setText("ubuntu")
    host.python_edit.setText("~/venv/bin/python")
    host.show()
    # what Test connection says for an 8-GPU box (the probe as `python -m trainer probe` reports one)
    gpu = {"name": "NVIDIA A100-SXM4-80GB", "mem_total_bytes": 80 * 2**30}
    host._on_tested(
        {
            "ok": True,
            "gpus": [gpu] * 8,
            "driver": "550.127.05",
            "cuda_runtime": "12.4",
            "torch": "2.5.1+cu124",
            "python": "3.11.9",
            "cpu_cores": 128,
            "ram_bytes": 1024 * 2**30,
            "disk_free_bytes": 3 * 2**40,
        }
    )
    grab(host, out / f"host-dialog{theme}.png")
    host.close()
    if theme:  # the light ones come with the Runs pictures (tools/runs_screenshots.py)
        import runs_screenshots

        runs_screenshots.grab_launch_dialogs(out, theme)
    alerts = AlertSettingsDialog(AlertSettings(), window)  # type: ignore[arg-type]
    alerts.show()
    grab(alerts, out / f"alert-settings-dialog{theme}.png")
    alerts.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument(
        "--only",
        default="plan,hosts,runs,history,alerts,dialogs,reports",
        help="comma-separated places to write (default: all)",
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
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import runs_screenshots  # chooses the Qt platform: the X server when there is one
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
    dark_plan = {"method": "full", "gpu": "L40S", "grad-checkpointing": "none", "deadline-hours": "", "budget-usd": ""}
    try:
        plan, history = window.plan_pane, window.history_pane
        wait(20, lambda: window.is_built("Runs"))  # the chart and the Runs pane come after the first frame
        start = plan.form.values()
        light_plan = {**{k: start[k] for k in dark_plan}, "deadline-hours": "12", "budget-usd": "40"}
        for dark in (False, True):
            apply_scheme(app, dark=dark)
            theme = "-dark" if dark else ""
            plan.form.set_values(dark_plan if dark else light_plan)
            plan.recalculate()
            wait(10, lambda: not plan.is_busy() and plan.result is not None)
            for suffix, size in SIZES:
                window.resize(*size)
                wait(0.3)
                window.show_place("Plan")
                if "plan" in only:
                    grab(window, out / f"plan{suffix}{theme}.png")
                if "dialogs" in only and not suffix:
                    grab_dialogs(window, out, theme)
                window.show_place("History")
                wait(20, lambda: not history.is_loading())
                history.select_runs([run_ids[4] if dark else run_ids[1]])
                history.detail_tabs.setCurrentWidget(history.plots_page)
                wait(20, lambda: not history.is_loading())
                if "history" in only:
                    grab(window, out / f"history{suffix}{theme}.png")
                    if not dark:
                        history.select_runs([run_ids[0], run_ids[1], run_ids[2]])
                        wait(20, lambda: not history.is_loading())
                        history.detail_tabs.setCurrentWidget(history.plots_page)  # the runs overlaid
                        wait(0.3)
                        grab(window, out / f"history-compare{suffix}.png")
                        if not suffix:
                            history.select_runs([run_ids[4]])
                            wait(20, lambda: not history.is_loading())
                            history.detail_tabs.setCurrentWidget(history.summary_view)
                            grab(window, out / "history-failed.png")
                            history.select_runs([run_ids[0]])  # Hopper: SM activity, no NVLink on one GPU
                            wait(20, lambda: not history.is_loading())
                            history.detail_tabs.setCurrentWidget(history.summary_view)
                            grab(window, out / "history-telemetry.png")
                            history.select_runs([])  # the sum over all runs, and the first run's bar
                            history.select_runs([run_ids[0]])
                            wait(20, lambda: not history.is_loading())
                            history.detail_tabs.setCurrentWidget(history.time_scroll)
                            wait(0.3)
                            grab(window, out / "history-time.png")
                        if not suffix and "alerts" in only:  # a run under 50% on average: its alerts
                            history.select_runs([run_ids[3]])
                            wait(20, lambda: not history.is_loading())
                            history.detail_tabs.setCurrentWidget(history.summary_view)
                            grab(window, out / "history-alerts.png")
        apply_scheme(app, dark=False)
        window.resize(*SIZE)
        if "reports" in only:
            plan.form.set_values(light_plan)
            plan.recalculate()
            wait(10, lambda: not plan.is_busy() and plan.result is not None)
            window.show_place("Plan")
            wait(0.3)
            plan.export_pdf(tmp / "plan.pdf")
            render_pdf_page(tmp / "plan.pdf", out / "report-plan.png")
            window.show_place("History")
            history.select_runs([run_ids[1]])
            wait(20, lambda: not history.is_loading())
            history.export_pdf(tmp / "history.pdf")
            render_pdf_page(tmp / "history.pdf", out / "report-history.png")
        if "dialogs" in only:  # File > Own hardware price, with a two-GPU workstation filled in
            dialog = window.open_own_hardware()
            wait(10, lambda: not dialog.is_busy())  # noqa: B023 (waited for here)
            dialog.gpu_combo.setCurrentText("RTX 4090")
            dialog.gpus_spin.setValue(2)
            dialog.purchase_spin.setValue(6500)
            dialog.lifetime_spin.setValue(3)
            dialog.electricity_spin.setValue(0.3)
            dialog.utilisation_spin.setValue(60)
            grab(dialog, out / "own-hardware-dialog.png")
            dialog.close()
    finally:
        window.shutdown(stop_runs=True)
        window._closing_done = True
        window.close()
    for suffix, size in SIZES:
        for dark in (False, True):
            apply_scheme(app, dark=dark)
            runs_screenshots.main(
                str(out), size=size, suffix=suffix + ("-dark" if dark else ""), places=only, extras=not (suffix or dark)
            )
    apply_scheme(app, dark=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
