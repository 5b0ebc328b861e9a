"""A test's barrier: a command that holds still until it is stopped, so a stop lands at a known point.

``hold.py READY``: on its first start it installs a SIGTERM handler (exit 75: "checkpointed, resume
me"), then writes its pid to READY and waits for a signal. A start that finds READY already there (the
resume) writes READY.resumed and exits 0. ``hold.py --fail``: prints a traceback to stderr, exits 3.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def main() -> int:
    if sys.argv[1] == "--fail":
        print("loading the data", file=sys.stderr)
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "hold.py", line 1, in <module>', file=sys.stderr)
        print("ValueError: no rows in the data set", file=sys.stderr)
        return 3
    ready = Path(sys.argv[1])
    if ready.exists():
        ready.with_name(ready.name + ".resumed").write_text(str(os.getpid()))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
    ready.write_text(str(os.getpid()))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
