"""Where the test suite's CPU goes: reads the lines ``GPUPLANNER_TEST_CPU_LOG`` made (tests/conftest.py) and
prints the CPU seconds per file and the costliest tests, with the share of the whole each takes.

    GPUPLANNER_TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python tests/benchmarks/suite_cpu.py /tmp/cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def read(path: Path) -> list[dict[str, float | str]]:
    rows = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            rows.append(json.loads(text))
        except json.JSONDecodeError:
            print(f"{path}:{number}: not a JSON line, skipped", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the file GPUPLANNER_TEST_CPU_LOG named")
    parser.add_argument("--top", type=int, default=30, help="how many files and tests to list (30)")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        parser.error(f"{args.log}: no such file")
    rows = read(args.log)
    cost = {str(r["test"]): float(r["cpu_s"]) + float(r["children_cpu_s"]) for r in rows}
    wall = {str(r["test"]): float(r["wall_s"]) for r in rows}
    total = sum(cost.values()) or 1.0
    per_file: dict[str, float] = defaultdict(float)
    for test, seconds in cost.items():
        per_file[test.split("::")[0]] += seconds
    print(
        f"{len(rows)} tests, {total:.0f} CPU-s in all (workers and the processes they reaped), wall summed "
        f"{sum(wall.values()):.0f} s"
    )
    print(f"\n{'CPU-s':>8} {'share':>6}  file")
    for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{seconds:8.1f} {seconds / total:6.1%}  {name}")
    print(f"\n{'CPU-s':>8} {'wall s':>7}  test")
    for name, seconds in sorted(cost.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{seconds:8.1f} {wall[name]:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
