"""Process wrapper started detached (``setsid``) on the run's host; standard library only.

``python wrapper.py RUN_DIR TAG -- COMMAND...`` writes ``RUN_DIR/TAG.pid`` (JSON: its pid, which is
the process group id, the child's pid and the command), runs COMMAND, and writes
``RUN_DIR/TAG.exit`` (JSON: exit code, signals received) atomically when it ends, so the launcher can
learn the outcome even if it was not connected at that moment. Stop signals reach the whole process
group (the launcher signals ``-PGID``); the wrapper only notes them and keeps waiting for its child.

No moment of start-up loses a stop signal or dies of it:

- the launcher may start the wrapper with the stop signals blocked (the local backend does); they
  stay pending until the wrapper's own handlers are in place;
- a trainer child (``python -m trainer``) starts with them blocked too and unblocks them once its
  handlers are installed (``trainer.early_signals.install``), so a signal during the interpreter's
  start-up is delivered to the handler instead of killing it (exit 143);
- a stop signal the wrapper received before its child existed is passed on to the child, which
  would otherwise never hear of it and train on.
"""

import json
import os
import signal
import subprocess
import sys
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def _write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(doc, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def catches_stop_signals(command):
    """True for ``PYTHON -m trainer ...``: a child that installs stop-signal handlers before anything else."""
    return len(command) >= 3 and command[1:3] == ["-m", "trainer"]


def _unblock_stop_signals():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: wrapper.py RUN_DIR TAG -- COMMAND...\n")
        return 2
    run_dir, tag, command = argv[1], argv[2], argv[4:]
    received = []

    def note(signum, frame):
        received.append(signal.Signals(signum).name)

    for sig in (*STOP_SIGNALS, signal.SIGHUP):
        signal.signal(sig, note)
    # Held back (pending, not lost) until the child exists: then we know which ones it missed.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    os.makedirs(run_dir, exist_ok=True)
    exit_file = os.path.join(run_dir, tag + ".exit")
    if os.path.exists(exit_file):
        os.unlink(exit_file)
    # A trainer child inherits the blocked mask across exec and unblocks once it can catch them;
    # any other child (torchrun) gets the usual unblocked mask.
    preexec = None if catches_stop_signals(command) else _unblock_stop_signals
    # The monitor of a user's command (``-m trainer exec``) learns from this that it shares our group.
    env = dict(os.environ, GPUPLANNER_WRAPPER_PGID=str(os.getpgid(0)))
    child = subprocess.Popen(command, restore_signals=True, preexec_fn=preexec, env=env)
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
    pending = signal.sigpending() & set(STOP_SIGNALS)
    _unblock_stop_signals()  # pending signals are delivered to ``note`` now
    for sig in sorted(pending):
        # Sent before the child existed (or while it was being started: a second copy is harmless,
        # the trainer's handler only sets its stop flag).
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            pass
    code = child.wait()
    if code < 0:
        code = 128 - code
    _write(exit_file, {"exit_code": code, "signals": received, "ended_at": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
