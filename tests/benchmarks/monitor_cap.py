"""How far past its cap a user command's monitor records spend: the part of a cap that cannot be controlled.

Each run is the real monitor (``python -m trainer exec``) at $3,600 per GPU-hour ($1 a second) with a $3 budget
and a 0.3 s grace period, over the protocol fake held at step 1 and ignoring SIGTERM, so only the SIGKILL at the
cap ends it. Per run it prints the spend at SIGTERM, at SIGKILL and in ``run_end`` (from ``run_end``'s ``stop``),
and in milliseconds how late the SIGKILL came after the cap and how far past the cap ``run_end`` was written (the
monitor's reaction: waking at the cap's moment, the kill, reaping the job, the last records), then the largest
of each. Run it beside the load you want to measure under (two ``python -c "while True: pass"``, say).

Run: ``PYTHONPATH=. .venv/bin/python tests/benchmarks/monitor_cap.py [--runs 6]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests import protocol_fake as fake  # noqa: E402

BUDGET, GRACE = 3.0, 0.3  # dollars at $1 a second


def one(run_dir: Path) -> tuple[float, float, float]:
    argv = [sys.executable, "-m", "trainer", "exec", "--run-dir", str(run_dir), "--gpu-interval-s", "0"]
    argv += ["--price-per-gpu-hour", "3600", "--budget-usd", str(BUDGET), "--grace-s", str(GRACE), "--"]
    argv += fake.command("--hold-at-step", "1", "--ignore-term")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True, timeout=120)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    end = [json.loads(line) for line in lines if '"run_end"' in line][-1]
    stop = end["stop"]
    return stop["term"]["spend_usd"], stop["kill"]["spend_usd"], end["totals"]["spend_usd"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    late_kill, late_end = [], []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.runs):
            term, kill, end = one(Path(folder) / f"run{i}")
            late_kill.append((kill - BUDGET) * 1000)
            late_end.append((end - BUDGET) * 1000)
            print(
                f"run {i}: SIGTERM at ${term:.4f}, SIGKILL at ${kill:.4f} ({late_kill[-1]:.0f} ms after the cap), "
                f"run_end ${end:.4f} ({late_end[-1]:.0f} ms past the cap)"
            )
    print(f"largest: SIGKILL {max(late_kill):.0f} ms after the cap, run_end {max(late_end):.0f} ms past it")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
