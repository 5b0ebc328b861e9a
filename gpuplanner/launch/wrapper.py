"""Process wrapper started detached (``setsid``) on the run's host; standard library only.

``python wrapper.py RUN_DIR TAG -- COMMAND...`` (or ``python wrapper.py --signal PGID NAME``:
:func:`signal_job` on the host) writes ``RUN_DIR/TAG.pid`` (JSON: its pid, which is
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

Nothing the job started outlives it (issue 27 item 7): the wrapper is the job's child subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), so a process that left the job's process group (``setsid``,
``start_new_session``, a double fork) stays its descendant even when its own parent ends; the wrapper reaps
them, and when its child ends it stops every descendant left (SIGTERM, SIGKILL after ``LEFTOVER_GRACE_S``)
before it exits. :func:`signal_job` is the launcher's way to signal a job: its process group and every
descendant of the wrapper that left it, so ``run kill`` (SIGKILL, which the wrapper cannot outlive) and a
stop reach the escaped processes too.
"""

import json
import os
import signal
import subprocess
import sys
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
LEFTOVER_GRACE_S = 5.0  # what the job left running gets SIGTERM, then SIGKILL after this long
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphaned descendants are re-parented to this process instead of init (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _processes():
    """{pid: (parent pid, process group)} of every live process (Linux ``/proc``; empty elsewhere)."""
    out = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/" + entry + "/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != "Z":  # a zombie is dead (its parent reaps it)
            out[int(entry)] = (int(fields[1]), int(fields[2]))
    return out


def descendants(root):
    """Pids of every live descendant of ``root``, whatever their process group or session."""
    table = _processes()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_job(pgid, sig):
    """Signal a job started by this wrapper (whose pid is ``pgid``): first every descendant that left the
    group (while the wrapper lives they are its descendants), then the group. Twice for SIGKILL, so a
    process forked between the look and the kill is caught too."""
    for _ in range(2 if sig == signal.SIGKILL else 1):
        table = _processes()
        if table.get(pgid, (0, 0))[1] != pgid:  # no wrapper leads that group (any more): only the group
            break
        for pid in descendants(pgid):
            if table.get(pid, (0, pgid))[1] != pgid:
                _kill(pid, sig)
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap():
    """Collect every ended child (adopted orphans included) without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers(grace_s=LEFTOVER_GRACE_S):
    """Stop every descendant still running once the job's main process ended: SIGTERM, then SIGKILL."""
    me = os.getpid()
    left = descendants(me)
    if not left:
        return []
    for pid in left:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not descendants(me):
            return left
        time.sleep(0.05)
    for _ in range(3):
        for pid in descendants(me):
            _kill(pid, signal.SIGKILL)
        _reap()
        time.sleep(0.05)
    _reap()
    return left


def _wait_child(child):
    """The child's exit status, reaping adopted orphans while waiting for it."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # reaped elsewhere: ask the Popen
            return child.wait()
        if pid == child.pid:
            child.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            return child.returncode


def _write(path, doc):
    # a job may delete its own run folder: its outcome is still written (issue 27 item 12)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
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
    if len(argv) == 4 and argv[1] == "--signal":  # wrapper.py --signal PGID NAME: signal_job on this host
        signal_job(int(argv[2]), getattr(signal, "SIG" + argv[3]))
        return 0
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
    become_subreaper()
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
    code = _wait_child(child)
    if code < 0:
        code = 128 - code
    _write(exit_file, {"exit_code": code, "signals": received, "ended_at": time.time()})
    left = end_leftovers()
    if left:
        sys.stderr.write(f"wrapper: stopped {len(left)} process(es) the job left running: {left}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
