"""GPU truth in one command: the trainer, the planner and NVML measured on the GPU we get (issue 26).

    python3 -m tests.gpu.check --out DIR [--time-limit-s 420] [--dry-run] [--only NAME,...]
    python3 -m tests.gpu.check --record DIR      # here, afterwards: DIR's measured rows into the data

For each configuration of :mod:`tests.gpu.matrix` (in priority order) it plans the configuration with
the planner for the GPU found (:mod:`tests.gpu.predict`), trains it in a process of its own
(:mod:`tests.gpu.worker`: the bundled trainer's benchmark, or the Hugging Face ``Trainer``) under the
configuration's time budget, and records measured against predicted with the error in %. It stops
itself before ``--time-limit-s``: a configuration whose budget no longer fits is listed as skipped with
the reason, as is one that cannot run here (QLoRA without bitsandbytes, with the command that carries
it). It writes ``DIR/results.json`` and ``DIR/summary.md`` (:mod:`tests.gpu.report`) and prints the
summary.

``results.json``: ``schema``, ``complete``, ``environment`` (GPU name and its catalog GPU, driver, torch,
transformers, peft and bitsandbytes versions, commit, date, ``dry_run``), ``time_limit_s``, ``wall_s`` and
``records``, one per configuration in matrix order: ``name``, the environment's GPU, driver, torch, commit
and date, ``settings``, ``status`` (measured, skipped, oom, failed, timed_out) with ``reason`` unless
measured, ``measured`` (``tests/gpu/worker.py``), ``predicted`` (``tests/gpu/predict.py``) or
``plan_error``, ``errors`` (% per compared figure, ``tests/gpu/report.py``), ``ratio_ours_over_hf`` on
the Hugging Face rows, ``oom_verdict`` and ``planner_does_not_fit_held`` on the OOM probe, and the end
of the configuration's output (``log_tail``).

It runs with a plain ``python3`` that has torch, transformers, peft and nvidia-ml-py (the GPU machine's):
it imports ``trainer/``, ``gpuplanner.plan`` (pure) and the standard library only. ``--dry-run`` runs
the same code paths on the CPU at tiny shapes with the fake NVML (``tests/gpu/test_check_dry_run.py``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.gpu import matrix, report, shapes
from tests.gpu.predict import catalog_gpu_name, does_not_fit_micro_batch, predict
from tests.gpu.smi import SmiReader, default_command

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "corpus"
DRY_RUN_GPU = "H100 SXM"  # the catalog GPU the dry run plans for
RECORD_ENVIRONMENT = ("gpu_name", "gpu_catalog", "driver", "torch", "commit", "date", "dry_run")
WRITE_RESERVE_S = 10.0  # kept back from --time-limit-s for writing the results
# bitsandbytes 0.50.2's wheel (43 MB, py3-none-manylinux_2_24_x86_64) holds libbitsandbytes_cuda130.so, for
# the GPU machine's torch cu130; torch, numpy and packaging, its only needs, are there already.
BNB_CARRY = (
    "bitsandbytes is not installed: carry its wheel (43 MB). Here, in the repository root: "
    "echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: "
    "--python-version 3.12 --implementation cp --platform manylinux_2_24_x86_64 -d .whl bitsandbytes==0.50.2; "
    "then run with carry [.whl] and start the command with: python3 -m pip install -q --no-index --no-deps "
    "--no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site"
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _commit(given: str | None) -> str:
    if given:
        return given
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def environment(dry_run: bool, commit: str | None, smi_command: list[str] | None) -> dict[str, Any]:
    smi = SmiReader(smi_command, fields=("name", "driver_version")).read() or {}
    name = smi.get("name")
    return {
        "dry_run": dry_run,
        "gpu_name": name,
        "gpu_catalog": DRY_RUN_GPU if dry_run else catalog_gpu_name(name),
        "driver": smi.get("driver_version"),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "bitsandbytes": _version("bitsandbytes"),
        "python": sys.version.split()[0],
        "commit": _commit(commit),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_data(folder: Path, n_bytes: int) -> Path:
    """Training text: the shipped corpus's documents in a fixed shuffled order, repeated to ``n_bytes``
    (the trainer and the HF side read the same file)."""
    docs = []
    for path in sorted(CORPUS.iterdir()):
        if path.suffix == ".jsonl":
            docs += [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif path.suffix == ".txt":
            docs += [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    rng, lines, size = random.Random(0), [], 0
    while size < n_bytes:
        rng.shuffle(docs)
        for doc in docs:
            lines.append(json.dumps({"text": doc}))
            size += len(doc.encode("utf-8")) + 1
    path = folder / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


WORKER = ("-m", "tests.gpu.worker")  # python3 arguments before SPEC OUT


def run_worker(
    spec: dict[str, Any], folder: Path, timeout_s: float, worker: tuple[str, ...] = WORKER
) -> dict[str, Any]:
    """Runs one configuration; returns status (measured, oom, failed, timed_out), measured and the reason.
    Its whole process group is killed at ``timeout_s``."""
    spec_path, out_path = folder / f"{spec['name']}.spec.json", folder / f"{spec['name']}.out.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    proc = subprocess.Popen(
        [sys.executable, *worker, str(spec_path), str(out_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends its DataLoader workers too
    )
    started = time.monotonic()
    try:
        output, _ = proc.communicate(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        tail = (output or "")[-1500:]
        return {"status": "timed_out", "reason": f"stopped at its budget of {timeout_s:.0f} s", "log_tail": tail}
    wall = time.monotonic() - started
    tail = (output or "")[-1500:]
    if proc.returncode == 0 and out_path.exists():
        return {"status": "measured", "measured": json.loads(out_path.read_text()), "wall_s": wall, "log_tail": tail}
    if "out of memory" in (output or "").lower():
        return {"status": "oom", "reason": "CUDA out of memory", "wall_s": wall, "log_tail": tail}
    return {"status": "failed", "reason": f"exit {proc.returncode}", "wall_s": wall, "log_tail": tail}


def _why_not(row: dict[str, Any], dry_run: bool, env: dict[str, Any], only: set[str] | None) -> str | None:
    if row["method"] == "qlora" and not env["bitsandbytes"]:
        return BNB_CARRY  # (bitsandbytes' CPU backend runs the dry run's QLoRA row where it is installed)
    if row["oom_probe"] and dry_run:
        return "the CPU has no device memory to exceed (the planner's verdict is recorded)"
    if only is not None and row["name"] not in only:
        return "not selected (--only)"
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole check. After each configuration the results so far are written to ``args.out``
    (``complete: false``), so a run cut off from outside still leaves what it measured."""
    started = time.monotonic()
    dry = args.dry_run
    smi_command = [sys.executable, "-m", "tests.gpu.fake_smi"] if dry else default_command()
    doc: dict[str, Any] = {
        "schema": report.SCHEMA,
        "complete": False,
        "environment": environment(dry, args.commit, smi_command),
        "time_limit_s": args.time_limit_s,
        "wall_s": 0.0,
        "records": [],
    }

    def progress() -> None:
        doc["wall_s"] = time.monotonic() - started
        _pair_ratios(doc["records"])
        report.write(args.out, doc)

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        _run_rows(args, doc, smi_command, Path(tmp), started, progress)
    doc["complete"] = True
    progress()
    return doc


def _pair_ratios(records: list[dict[str, Any]]) -> None:
    """Each Hugging Face row's ``ratio_ours_over_hf``: the bundled trainer's tokens/s over its own."""
    by_name = {r["name"]: r for r in records}
    for rec in records:
        ours = by_name.get(rec["pairs_with"] or "")
        if ours and rec["status"] == "measured" and ours["status"] == "measured":
            rec["ratio_ours_over_hf"] = ours["measured"]["tokens_per_s"] / rec["measured"]["tokens_per_s"]


def _run_rows(
    args: argparse.Namespace,
    doc: dict[str, Any],
    smi_command: list[str] | None,
    work: Path,
    started: float,
    progress: Callable[[], None],
) -> None:
    dry, env, records = args.dry_run, doc["environment"], doc["records"]
    only = {n.strip() for n in args.only.split(",") if n.strip()} if args.only else None
    warmup, steps = (1, 2) if dry else (args.warmup_steps, args.steps)
    configs = {name: shapes.write_config(name, dry, work / "configs") for name in shapes.SHAPES}
    # the OOM probe is planned at the published shape even in the dry run (which does not run it): no
    # micro-batch of a tiny model exceeds a GPU's memory
    full_size = {name: shapes.write_config(name, False, work / "configs") for name in shapes.SHAPES}
    rows = matrix.rows(dry)
    data = write_data(work, max(r["micro_batch"] * (r["seq_len"] + 1) for r in rows) * 64 + 100_000)
    for row in rows:
        spec = {
            **row,
            "config_path": str((full_size if row["oom_probe"] else configs)[row["shape"]]),
            "data": str(data),
            "cache_dir": str(work / "token-cache"),
            "work_dir": str(work),
            "device": "cpu" if dry else "cuda",
            "precision": "bf16-mixed",
            "compile_backend": "eager" if dry else "inductor",
            "warmup_steps": 0 if row["oom_probe"] else warmup,
            "steps": 1 if row["oom_probe"] else steps,
            "nvml_interval_s": 0.5 if dry else 1.0,
            "dry_run": dry,
            "smi_command": smi_command,
        }
        rec: dict[str, Any] = {
            "name": row["name"],
            **{key: env[key] for key in RECORD_ENVIRONMENT},  # each record stands on its own
            "oom_probe": row["oom_probe"],
            "pairs_with": row["pairs_with"],
        }
        predicted, plan_error = _plan(spec, env["gpu_catalog"], env)
        rec["settings"] = {k: spec[k] for k in (*row.keys(), "device", "precision", "warmup_steps", "steps")}
        rec["predicted"], rec["plan_error"] = predicted, plan_error
        left = args.time_limit_s - (time.monotonic() - started) - WRITE_RESERVE_S
        reason = _why_not(row, dry, env, only)
        if reason is None and row["oom_probe"] and predicted is None:
            reason = f"no configuration the planner says does not fit ({plan_error})"
        if reason is None and left < row["expect_s"]:
            reason = (
                f"out of time: it needs about {row['expect_s']} s (budget {row['budget_s']} s) and "
                f"{max(0.0, left):.0f} s of --time-limit-s were left"
            )
        if reason is not None:
            rec.update(status="skipped", reason=reason)
        else:
            print(f"gpu-check: {row['name']} (budget {row['budget_s']} s) ...", file=sys.stderr, flush=True)
            rec.update(run_worker(spec, work, min(row["budget_s"], left)))
        rec["errors"] = report.errors(predicted, rec.get("measured"))
        if row["oom_probe"] and predicted is not None:
            _oom_verdict(rec, spec["micro_batch"], predicted)
        records.append(rec)
        progress()


def _plan(spec: dict[str, Any], gpu: str | None, env: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The planner's prediction for a configuration, or why there is none. For the OOM probe, first the
    micro-batch the planner says does not fit (written into ``spec``)."""
    if gpu is None:
        return None, f"the catalog knows no GPU called {env['gpu_name']!r}: nothing predicted"
    try:
        if spec["oom_probe"]:
            mb = does_not_fit_micro_batch(spec, gpu)
            if mb is None:
                return None, "no micro-batch up to 4096 the planner says does not fit"
            spec["micro_batch"] = mb
        predicted = predict(spec, gpu)
    except Exception as exc:  # the planner refusing a configuration is a finding, not a crash
        return None, f"{type(exc).__name__}: {exc}"
    if spec["kind"] == "hf":
        predicted["note"] = "the planner has no hf-trainer engine: these are the bundled engine's figures"
    return predicted, None


def _oom_verdict(rec: dict[str, Any], micro_batch: int, predicted: dict[str, Any]) -> None:
    """Whether the planner's "does not fit" held: the probe ran out of memory."""
    verdict = (
        f"the planner says micro-batch {micro_batch} does not fit "
        f"({predicted['total_bytes'] / report.GIB:.0f} GiB of {predicted['capacity_gib']} GiB)"
    )
    if rec["status"] == "skipped":
        rec["oom_verdict"] = f"{verdict}; not run: {rec['reason']}"
        return
    held = rec["status"] == "oom" and predicted["fits"] is False
    rec["planner_does_not_fit_held"] = held
    rec["oom_verdict"] = f"{verdict}; it " + ("ran out of memory: held" if held else f"ended {rec['status']}: NOT held")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.gpu.check", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for results.json and summary.md")
    p.add_argument("--time-limit-s", type=float, default=420.0, help="stop starting configurations before this")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, fake NVML: the same code paths")
    p.add_argument("--only", help="comma-separated configuration names; the others are listed as skipped")
    p.add_argument("--commit", help="the product commit measured (default: git rev-parse HEAD, else unknown)")
    p.add_argument("--warmup-steps", type=int, default=3, help="steps not measured (GPU)")
    p.add_argument("--steps", type=int, default=10, help="steps measured after warm-up (GPU)")
    p.add_argument(
        "--record", type=Path, metavar="DIR", help=f"append DIR/results.json's rows to {report.MEASURED_CSV}"
    )
    args = p.parse_args(argv)
    if args.record:
        try:
            added = report.record(args.record)
        except (OSError, ValueError, KeyError) as exc:
            print(f"gpu-check: {exc}", file=sys.stderr)
            return 2
        print(f"gpu-check: {added} rows added to {report.MEASURED_CSV}")
        return 0
    if args.out is None:
        p.error("give --out DIR (or --record DIR)")
    if not args.dry_run and default_command() is None:
        print(
            "gpu-check: no nvidia-smi here: the check measures an NVIDIA GPU; --dry-run runs it on the CPU",
            file=sys.stderr,
        )
        return 2
    doc = run(args)
    print(report.summary_markdown(doc))
    return 0 if any(r["status"] == "measured" for r in doc["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
