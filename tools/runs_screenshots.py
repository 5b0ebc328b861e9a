"""Screenshots of the Runs and Hosts panes at 1280x800 with realistic data (no trainer needed).

    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python tools/runs_screenshots.py [OUT_DIR]
    (without a display it renders offscreen on a 1920x1080 screen)

`tools/screenshots.py` calls it for runs.png and hosts.png.

The Runs pane shows an 8-GPU run two hours in, fed through the same record path as a live run
(checkpoints, a preemption and the resume, budget and plan lines, an over-plan alert), with the bar of
where its billed time went so far (the records carry the trainer's phase totals: 4 minutes of start-up
per process, 14 s per checkpoint, 40 s per evaluation; generated, not measured).
"""

from __future__ import annotations

import math
import os
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace


def choose_platform() -> str:
    """The Qt platform the screenshots render on, set unless QT_QPA_PLATFORM already says: the X server
    (xcb) when there is a display, as a user sees the window; otherwise offscreen on a 1920x1080 screen.
    Offscreen's own screen is 800x800, where dialogs shrink to fit and scroll, which no user sees."""
    if "QT_QPA_PLATFORM" not in os.environ:
        if os.environ.get("DISPLAY"):
            os.environ["QT_QPA_PLATFORM"] = "xcb"
        else:
            config = Path(tempfile.gettempdir()) / "gpuplanner-shots-screen.json"
            config.write_text(
                '{"screens": [{"name": "shots", "x": 0, "y": 0, "width": 1920, "height": 1080,'
                ' "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}'
            )
            os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={config}"
    return os.environ["QT_QPA_PLATFORM"]


choose_platform()


def run_records(gpus: int = 8, seconds: int = 7200) -> list[dict]:
    rnd = random.Random(4)
    t0, seq, out = 1_763_800_000.0, 0, []

    def rec(kind: str, t: float, **fields: object) -> None:
        nonlocal seq
        out.append({"v": 1, "seq": seq, "t": t0 + t, "kind": kind, **fields})
        seq += 1

    rec(
        "run_start",
        0,
        config={"budget_usd": 160.0, "price_per_gpu_hour": 2.49},
        steps_total=12_000,
        world_size=gpus,
        device="NVIDIA H100 80GB HBM3",
    )
    step, down = 0, (4210, 4290)
    startup_s, ckpt_s, eval_s = 240.0, 14.0, 40.0
    process = {"start": 0.0, "checkpoints": 0, "evals": 0}

    def phases(at: float) -> dict[str, object]:
        left = at - process["start"]
        startup = min(left, startup_s)
        ckpt, evals = process["checkpoints"] * ckpt_s, process["evals"] * eval_s
        rest = max(0.0, left - startup - ckpt - evals)
        totals = {"startup": startup, "checkpoint": ckpt, "eval": evals, "data": rest * 0.015, "train": rest * 0.985}
        return {"phases": {k: round(v, 3) for k, v in totals.items()}, "phases_start": t0 + process["start"]}

    for s in range(0, seconds, 2):
        if down[0] <= s < down[1]:
            continue
        if s == down[1]:
            rec("run_start", s, config={"budget_usd": 160.0, "price_per_gpu_hour": 2.49}, resumed_from_step=step)
            process.update(start=float(s), checkpoints=0, evals=0)
        loading = s - process["start"] < startup_s
        for i in range(gpus):
            util = min(
                100.0,
                max(0.0, 88 + 8 * math.sin(s / 700 + i) + rnd.gauss(0, 3) - (35 if 2500 < s < 3100 and i == 3 else 0)),
            )
            util = rnd.uniform(0.0, 3.0) if loading else util
            rec(
                "gpu",
                s,
                node="h100-a",
                index=i,
                util_pct=util,
                mem_used_bytes=int((61 + 3 * math.sin(s / 900 + i)) * 2**30),
                mem_total_bytes=80 * 2**30,
                power_w=250 + 4.4 * util,
                temp_c=round(52 + util / 4 + i),
                sm_active_pct=util * 0.82,
                tensor_active_pct=util * 0.55,
                pcie_tx_mbps=round(0.8 + rnd.random(), 2),
                pcie_rx_mbps=round(20 + 10 * rnd.random(), 1),
                nvlink_tx_mbps=round(38_000 + 4_000 * math.sin(s / 300 + i)),
                nvlink_rx_mbps=round(37_500 + 4_000 * math.sin(s / 300 + i)),
                sm_clock_mhz=1755 if i == 5 else 1980,  # GPU 5 sits at its power cap
                sm_clock_max_mhz=1980,
                throttle_reasons=0x4 if i == 5 else 0,
                simulated=False,
            )
        if s % 4 == 0 and not loading:
            step += 3
            rec(
                "step",
                s,
                step=step,
                loss=2.1 + 1.6 * math.exp(-s / 1800) + rnd.gauss(0, 0.03),
                tokens_total=step * 2**17,
                samples_total=step * 64,
                tokens_per_s=94_000 + rnd.gauss(0, 2500),
                step_time_s=1.33,
                data_wait_s=0.02,
                spend_usd=2.49 * gpus * s / 3600,
                **phases(s),
            )
        if s % 600 == 0 and s and not loading:
            process["checkpoints"] += 1
            rec("checkpoint", s, step=step, path=f"checkpoints/step-{step:08d}", bytes=2**34, seconds=14.0, **phases(s))
        if s % 900 == 0 and s and not loading:
            process["evals"] += 1
            rec("eval", s, step=step, eval_loss=2.2 + 1.5 * math.exp(-s / 1800), **phases(s))
        if s == down[0] - 2:
            rec("preempted", s, step=step)
        if s == down[1]:
            rec("resumed", s, step=step)
    return out


def breakdown_of(db_path: Path, records: list[dict]) -> object:
    """Where the run's billed time went so far, as the pane reads it from the history."""
    from gpuplanner.history.analytics import summarize
    from gpuplanner.history.db import open_db
    from gpuplanner.history.ingest import ingest_records
    from gpuplanner.history.runs import create_run
    from gpuplanner.history.time_breakdown import from_dict

    with open_db(db_path) as db:
        run_id = create_run(db, name="screenshot", gpu_count=8, price_usd_per_gpu_hour=2.49)
        ingest_records(db, run_id, records)
        return from_dict(summarize(db, run_id, with_alerts=False).time_breakdown)


def failed_run_records() -> tuple[list[dict], str]:
    """A real failure: the demo model (64 positions) trained with sequences of 512 tokens. Runs the trainer
    on this machine and returns its telemetry records and its stderr."""
    import json
    import subprocess

    from gpuplanner.trainer_python import trainer_env
    from gpuplanner.ui.runs.launch_request import demo_dir

    run_dir = Path(tempfile.mkdtemp()) / "run"
    demo = demo_dir()
    command = [sys.executable, "-m", "trainer", "train", "--model-config", str(demo / "tiny-gpt2.json")]
    command += ["--data", str(demo / "corpus"), "--seq-len", "512", "--max-steps", "5", "--device", "cpu"]
    command += ["--run-dir", str(run_dir), "--no-events-stdout"]
    proc = subprocess.run(command, capture_output=True, text=True, env=trainer_env(), timeout=300)
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    # the picture shows what a user would see: their own paths, not this build machine's
    stderr = proc.stderr.replace(sys.prefix, "/home/me/.venv").replace(str(run_dir.parent), "/home/me/runs")
    return records, stderr.replace(str(Path(__file__).resolve().parents[1]), "/home/me/gpuplanner")


def grab_launch_dialogs(out: Path, theme: str = "") -> None:
    """launch-dialog{theme}.png (the bundled trainer, from a plan) and launch-command{theme}.png (a command
    of your own on an 8-GPU host), on the palette in use."""
    from PySide6.QtWidgets import QApplication

    from gpuplanner.ui.dialogs.launch_dialog import LaunchDialog

    app = QApplication.instance()
    hosts = [("local", "This machine", None), ("h100-a", "h100-a", 2.49)]
    pictures = {
        "launch-dialog": {
            "model": "llama-3.2-3b",
            "method": "lora",
            "seq_len": 2048,
            "micro_batch": 4,
            "data": ["~/data/chat.jsonl"],
        },
        "launch-command": {
            "host": "h100-a",
            "mode": "command",
            "gpus": 8,
            "command": "torchrun --nproc-per-node 8 train.py --config configs/llama-3b.yaml",
            "workdir": "/home/me/llm-finetune",
            "env": "HF_HOME=/data/hf\nWANDB_MODE=offline",
            "budget_usd": 400.0,
            "auto_resume": True,
        },
    }
    for name, settings in pictures.items():
        dialog = LaunchDialog(hosts, settings, remember=False)
        dialog.show()
        for _ in range(5):
            app.processEvents()
        path = out / f"{name}{theme}.png"
        dialog.grab().save(str(path))
        print(f"wrote {path} ({dialog.width()}x{dialog.height()})")
        dialog.close()


def main(
    out_dir: str = "docs/screenshots",
    size: tuple[int, int] = (1280, 800),
    suffix: str = "",
    places: set[str] | None = None,
    extras: bool = True,
) -> None:
    """runs{suffix}.png and hosts{suffix}.png at ``size``; with ``extras`` also runs-failed.png (a real
    failed run), launch-dialog.png and launch-command.png."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from gpuplanner.launch.hosts import Host, add_host, local_host, update_host
    from gpuplanner.ui.hosts.hosts_pane import HostsPane
    from gpuplanner.ui.runs.launch_request import LaunchRequest
    from gpuplanner.ui.runs.runs_pane import RunsPane
    from gpuplanner.ui.services import AppServices

    tmp = Path(tempfile.mkdtemp())
    services = AppServices(db_path=tmp / "history.sqlite", config_dir=tmp / "config")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    places = places or {"runs", "hosts", "dialogs"}
    pane = RunsPane(services)
    pane.resize(*size)
    pane.show()
    request = LaunchRequest(
        host_name="h100-a",
        trainer_args=[],
        name="llama-3.2-3b LoRA r16",
        gpus=8,
        budget_usd=160.0,
        price_per_gpu_hour=2.49,
        planned_cost_usd=36.0,
    )
    entry = pane._add_entry(41, request.name, "h100-a", request=request)
    records = run_records()
    entry.telemetry.add_records(records)
    entry.time_breakdown = breakdown_of(services.db_path, records)
    pane._apply_status(
        entry,
        SimpleNamespace(run_id=41, state="running", run_dir="~/.gpuplanner/runs/41", exit_code=None, host="h100-a"),
    )
    pane._update_item(entry)
    entry.alerts = [
        (
            "idle_gpu",
            "GPU 3 on h100-a of 8 did nothing (under 10%) for 12 min while the others worked (40% of that time)",
            "GPU 3 on h100-a is held but unused 40% of the time: check that the job starts one process per GPU "
            "(torchrun --nproc-per-node 8, CUDA_VISIBLE_DEVICES, the world size), or run on 7 GPUs. Expected saving: "
            "no time, $1.20 of the idle GPU.",
        )
    ]
    pane.window_combo.setCurrentIndex(2)  # full history
    pane._on_redraw_timer()
    pane._update_text()
    pane._update_time_bars(entry)
    for _ in range(5):
        app.processEvents()
    if "runs" in places:
        pane.grab().save(str(out / f"runs{suffix}.png"))
        print(f"wrote {out / f'runs{suffix}.png'}")
    if extras and "runs" in places:
        from gpuplanner.launch.run_failure import error_line, tail_text

        records, stderr = failed_run_records()
        failed = pane._add_entry(42, "tiny GPT-2, sequences of 512", "local")
        failed.telemetry.add_records(records)
        tail = tail_text(stderr.encode())
        failed.failure = {"error": failed.telemetry.end_error or error_line(tail), "exit_code": 1, "stderr_tail": tail}
        failed.failure_requested = True
        pane._apply_status(
            failed,
            SimpleNamespace(
                run_id=42, state="failed", run_dir=str(Path(tempfile.gettempdir()) / "run"), exit_code=1, host="local"
            ),
        )
        pane._update_item(failed)
        pane.run_list.setCurrentItem(failed.item)
        pane._update_text()
        for _ in range(5):
            app.processEvents()
        pane.grab().save(str(out / "runs-failed.png"))
        print(f"wrote {out / 'runs-failed.png'}")
    if extras and "dialogs" in places:
        grab_launch_dialogs(out)
    pane.shutdown(stop_runs=False)
    if "hosts" not in places:
        return

    db = services.db_path
    update_host(
        db,
        Host(
            **{
                **local_host().__dict__,
                "probe": {
                    "ok": True,
                    "gpus": [],
                    "torch": "2.5.1+cpu",
                    "driver": None,
                    "cuda_runtime": None,
                    "cpu_cores": 16,
                    "ram_bytes": 64 * 2**30,
                    "disk_free_bytes": 412 * 2**30,
                },
            }
        ),
    )
    h100 = {
        "ok": True,
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "mem_total_bytes": 80 * 2**30}] * 8,
        "torch": "2.5.1+cu124",
        "driver": "550.127.05",
        "cuda_runtime": "12.4",
        "cpu_cores": 208,
        "ram_bytes": 1800 * 2**30,
        "disk_free_bytes": 21_400 * 2**30,
    }
    add_host(
        db,
        Host(
            name="h100-a",
            kind="ssh",
            hostname="203.0.113.17",
            user="ubuntu",
            price_usd_per_gpu_hour=2.49,
            pricing="on-demand",
            gpu_type="NVIDIA H100 80GB HBM3",
            gpu_count=8,
            probe=h100,
        ),
    )
    add_host(
        db,
        Host(
            name="a10g-spot",
            kind="ssh",
            hostname="ec2-198-51-100-4.compute.amazonaws.com",
            user="ec2-user",
            price_usd_per_gpu_hour=0.36,
            pricing="spot",
            gpu_type="NVIDIA A10G",
            gpu_count=1,
            probe={
                "ok": True,
                "gpus": [{"name": "NVIDIA A10G", "mem_total_bytes": 24 * 2**30}],
                "torch": "2.4.0+cu121",
                "driver": "535.183.01",
                "cuda_runtime": "12.1",
                "cpu_cores": 4,
                "ram_bytes": 16 * 2**30,
                "disk_free_bytes": 180 * 2**30,
            },
        ),
    )
    add_host(db, Host(name="lab-4090", kind="ssh", hostname="lab-4090.internal", port=2222, user="ml"))
    hosts = HostsPane(services)
    hosts.resize(*size)
    hosts.show()
    hosts.model.set_error("lab-4090", "REFUSED: host key changed")
    hosts.select("h100-a")
    hosts._say("h100-a: 8 GPU(s), torch 2.5.1+cu124.")
    for _ in range(5):
        app.processEvents()
    hosts.grab().save(str(out / f"hosts{suffix}.png"))
    print(f"wrote {out / f'hosts{suffix}.png'}")
    hosts.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
