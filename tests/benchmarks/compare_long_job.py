"""`compare` for a long job against a short one, first call in a fresh process (issue 24, item 4).

Each figure is the median of ``RUNS`` fresh interpreters, each timing its first ``compare`` call
(the `gpuplanner compare --json` command as a user runs it, with imports and the catalog's first load done before the clock starts): a
70B full fine-tune on 20B tokens with ``--fit-settings`` (hundreds of spot interruptions on the
small GPU counts) against an 8B LoRA on 100M tokens. Target: long / short at most 3x.

    .venv/bin/python tests/benchmarks/compare_long_job.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = 5

ONE_CALL = """
import contextlib, io, json, time
from gpuplanner.cli import main
from gpuplanner.plan.catalog import load_catalog
load_catalog()
out = io.StringIO()
start = time.perf_counter()
with contextlib.redirect_stdout(out):
    main(["compare", *{args!r}, "--json", "--no-calibration"])
print(time.perf_counter() - start, len(json.loads(out.getvalue())))
"""

JOBS = {
    "long: llama-3.1-70b full, 20B tokens, --fit-settings": [
        "--model", "llama-3.1-70b", "--method", "full", "--tokens", "20e9", "--fit-settings",
    ],
    "short: llama-3.1-8b LoRA, 100M tokens": ["--model", "llama-3.1-8b", "--method", "lora", "--tokens", "1e8"],
}  # fmt: skip


def first_call_seconds(args: list[str]) -> tuple[float, int]:
    code = ONE_CALL.format(args=args)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    seconds, rows = out.stdout.split()
    return float(seconds), int(rows)


def main() -> None:
    medians = {}
    for name, args in JOBS.items():
        times = []
        for _ in range(RUNS):
            seconds, rows = first_call_seconds(args)
            times.append(seconds)
        medians[name] = statistics.median(times)
        print(f"{name}: {rows} rows, first call median {medians[name] * 1000:.0f} ms (of {RUNS} processes)")
    long, short = medians.values()
    print(f"long / short: {long / short:.2f}x (target <= 3x)")


if __name__ == "__main__":
    main()
