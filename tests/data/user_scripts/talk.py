"""A test's job that talks: ``talk.py GATE`` prints a line to stdout and one to stderr, then waits until
the file GATE exists (the test's barrier), prints one more line to each and exits 0."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main() -> int:
    gate = Path(sys.argv[1])
    print("talk: before the gate", flush=True)
    print("talk: a warning before the gate", file=sys.stderr, flush=True)
    while not gate.exists():
        time.sleep(0.05)
    print("talk: after the gate", flush=True)
    print("talk: done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
