"""A test's job that talks across a restart: ``talk_resumable.py READY`` on its first start prints "first
start", writes READY (the test's barrier) and waits; SIGTERM makes it print "stopped" and exit 75
(resume me). A start that finds READY prints "resumed" and exits 0."""

from __future__ import annotations

import signal
import sys
from pathlib import Path


def main() -> int:
    ready = Path(sys.argv[1])
    if ready.exists():
        print("resumed", flush=True)
        return 0

    def stop(*_: object) -> None:
        print("stopped", flush=True)
        sys.exit(75)

    signal.signal(signal.SIGTERM, stop)
    print("first start", flush=True)
    ready.write_text("ready")
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
