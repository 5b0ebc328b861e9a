"""Training time lost per checkpoint, blocking writes against background writes (one process, CPU).

Trains the same model three times with the same data and steps: without mid-run checkpoints, with
``--no-checkpoint-async`` (training waits while the state is written, fsynced and hashed: the trainer
before issue 28 item 4) and with background writes (the default: training waits only for the copy to
host memory). The training time lost per checkpoint is measured within each run: what training waited
for (the record's ``blocking_s``) plus, for a background write, the excess over the run's median step
time of the steps that ran while the write went on (the write competes for the CPU). As a cross-check
it also prints the difference of the time spent in the steps (the ``train``, ``data``, ``checkpoint``
and ``compile`` phases at the last step record) to the run without checkpoints, per checkpoint: on a
loaded machine that figure carries the runs' noise. Last, the seconds from SIGTERM to exit 75 with a
complete checkpoint (the grace a scheduler must give).

Default model: a 4-block GPT-2 of width 512 (about 12.8M parameters: about 155 MB per checkpoint
with the AdamW states). Run: ``PYTHONPATH=. .venv/bin/python tests/benchmarks/checkpoint_overlap.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEP_PHASES = ("train", "data", "checkpoint", "compile")


def _cmd(run: Path, config: Path, steps: int, every: int, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "trainer", "train", "--run-dir", str(run), "--model-config", str(config)]
    cmd += ["--data", str(ROOT / "tests" / "data" / "corpus"), "--seq-len", "32", "--micro-batch", "4"]
    cmd += ["--max-steps", str(steps), "--checkpoint-every-steps", str(every), "--checkpoint-every-minutes", "0"]
    cmd += ["--log-interval-s", "0", "--gpu-interval-s", "0", "--no-events-stdout", "--device", "cpu"]
    cmd += ["--precision", "fp32", "--seed", "7", "--keep-checkpoints", "2", *extra]
    return cmd


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def _train(run: Path, config: Path, steps: int, every: int, extra: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run(_cmd(run, config, steps, every, extra), cwd=ROOT, env=_env(), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr[-3000:])
    return _events(run)


def _step_seconds(events: list[dict[str, Any]]) -> float:
    last = [e for e in events if e["kind"] == "step"][-1]
    return sum(float(last["phases"].get(p, 0.0)) for p in STEP_PHASES)


def _lost_per_checkpoint(events: list[dict[str, Any]], last_step: int) -> list[float]:
    """Per mid-run checkpoint, within one run: what training waited for (``blocking_s``) plus the excess
    over the run's median step time of the steps that ran while its write went on in the background
    (those logged before its record, which follows the completion marker, and the one it ends in)."""
    steps = [e for e in events if e["kind"] == "step"]
    median = statistics.median(e["step_time_s"] for e in steps)
    out = []
    for ck in (e for e in events if e["kind"] == "checkpoint" and e["step"] < last_step):
        lost = float(ck["blocking_s"])
        if ck.get("asynchronous"):
            for st in (e for e in steps if e["step"] > ck["step"]):
                lost += st["step_time_s"] - median
                if st["t"] >= ck["t"]:
                    break
        out.append(lost)
    return out


def _sigterm_seconds(run: Path, config: Path, at_step: int) -> tuple[float, int]:
    """Seconds from SIGTERM (sent once ``at_step`` is logged) to the trainer's exit, and its exit code."""
    proc = subprocess.Popen(
        _cmd(run, config, 100000, 4, []), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    events = run / "events.jsonl"
    while True:
        if proc.poll() is not None:
            sys.exit(f"the trainer exited before step {at_step}: {proc.returncode}")
        if events.exists() and any(
            e.get("kind") == "step" and e["step"] >= at_step
            for e in (json.loads(x) for x in events.read_text().splitlines() if x.strip())
        ):
            break
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait()
    return time.monotonic() - t0, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--every", type=int, default=4, help="steps between checkpoints")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the runs go (default: a temporary folder on disk)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        config = Path(tmp) / "model.json"
        config.write_text(
            json.dumps(
                {"model_type": "gpt2", "n_layer": args.layers, "n_embd": args.hidden, "n_head": 8}
                | {"n_positions": 64, "vocab_size": 257}
            )
        )
        modes = {"none": ([], 0), "blocking": (["--no-checkpoint-async"], args.every), "async": ([], args.every)}
        spent: dict[str, list[float]] = {m: [] for m in modes}
        waited: dict[str, list[float]] = {m: [] for m in modes}
        within: dict[str, list[float]] = {m: [] for m in modes}
        sizes: list[int] = []
        for r in range(args.repeats):
            for mode, (extra, every) in modes.items():
                events = _train(Path(tmp) / f"{mode}-{r}", config, args.steps, every, extra)
                spent[mode].append(_step_seconds(events))
                mid = [e for e in events if e["kind"] == "checkpoint" and e["step"] < args.steps]
                waited[mode] += [e["blocking_s"] for e in mid]
                within[mode] += _lost_per_checkpoint(events, args.steps)
                sizes += [e["bytes"] for e in mid]
        sigterm = _sigterm_seconds(Path(tmp) / "sigterm", config, 6)
    n = args.steps // args.every - (1 if args.steps % args.every == 0 else 0)  # checkpoints before the last step
    base = statistics.median(spent["none"])
    print(f"{args.steps} steps, a checkpoint every {args.every} ({n} before the last step), {args.repeats} repeats")
    print(f"checkpoint size {statistics.median(sizes) / 1e6:.0f} MB; steps without checkpoints: {base:.2f} s")
    for mode in ("blocking", "async"):
        across = (statistics.median(spent[mode]) - base) / n
        print(
            f"{mode:8s}: training time lost per checkpoint {statistics.median(within[mode]):.3f} s "
            f"(median; waited {statistics.median(waited[mode]):.3f} s by the records, the rest slower steps "
            f"overlapping the write); against the run without checkpoints {across:+.3f} s"
        )
    print(f"SIGTERM at step 6 to exit {sigterm[1]} with a complete checkpoint: {sigterm[0]:.2f} s")


if __name__ == "__main__":
    main()
