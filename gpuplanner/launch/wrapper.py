"""Process wrapper started detached (``setsid``) on the run's host; standard library only.

``python wrapper.py RUN_DIR TAG -- COMMAND...`` writes ``RUN_DIR/TAG.pid`` (JSON: its pid, which is
the process group id, the child's pid and the command), runs COMMAND, and writes
``RUN_DIR/TAG.exit`` (JSON: exit code, signals received) atomically when it ends, so the launcher can
learn the outcome even if it was not connected at that moment. Stop signals reach the whole process
group (the launcher signals ``-PGID``); the wrapper only notes them and keeps waiting for its child.
"""

import json
import os
import signal
import subprocess
import sys
import time


def _write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(doc, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: wrapper.py RUN_DIR TAG -- COMMAND...\n")
        return 2
    run_dir, tag, command = argv[1], argv[2], argv[4:]
    os.makedirs(run_dir, exist_ok=True)
    exit_file = os.path.join(run_dir, tag + ".exit")
    if os.path.exists(exit_file):
        os.unlink(exit_file)
    received = []

    def note(signum, frame):
        received.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(sig, note)
    child = subprocess.Popen(command, restore_signals=True)
    _write(
        os.path.join(run_dir, tag + ".pid"),
        {
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "child_pid": child.pid,
            "command": command,
            "started_at": time.time(),
        },
    )
    code = child.wait()
    if code < 0:
        code = 128 - code
    _write(exit_file, {"exit_code": code, "signals": received, "ended_at": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
