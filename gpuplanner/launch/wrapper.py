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

The job's output is capped: the child writes into pipes, and the wrapper copies each (stdout, stderr) to
its own (``TAG.out``/``TAG.err``, as the backend opened them) up to ``$GPUPLANNER_LOG_CAP_BYTES`` (default
64 MiB) per stream: the first half as it comes, then one line saying output is held back, then, when the
output ends, a line with the bytes skipped and the last half. So the file only grows (readers follow it by
offset) and never past the cap plus two lines.

Nothing the job started outlives it (issue 27 item 7): the wrapper is the job's child subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), so a process that left the job's process group (``setsid``,
``start_new_session``, a double fork) stays its descendant even when its own parent ends; the wrapper reaps
them, and when its child ends it stops every descendant left (SIGTERM, SIGKILL after ``LEFTOVER_GRACE_S``;
SIGKILL at once after a run that ended at its cap, whose ``run_end`` says ``budget_stop``: no grace period is
paid for past a cap) before it exits. :func:`signal_job` is the launcher's way to signal a job: its process group and every
descendant of the wrapper that left it, so ``run kill`` (SIGKILL, which the wrapper cannot outlive) and a
stop reach the escaped processes too.
"""

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
LOG_CAP_BYTES = 64 * 1024 * 1024
DRAIN_AFTER_EXIT_S = 5.0  # a daemon the job left holding its output open: the exit file is written anyway


def log_cap_bytes(environ):
    """The cap per output stream: ``$GPUPLANNER_LOG_CAP_BYTES`` when a whole number of at least 2, else the default."""
    text = environ.get("GPUPLANNER_LOG_CAP_BYTES", "")
    return int(text) if text.isdigit() and int(text) >= 2 else LOG_CAP_BYTES


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:  # the output file went away: the job goes on, its output is dropped
            return


class CappedCopy:
    """Copies a pipe to ``fd``: the first ``cap // 2`` bytes as they come, then the last ``cap // 2`` only,
    written (after a line saying how much was skipped) when the pipe ends or :meth:`finish` is called."""

    def __init__(self, source, fd, cap):
        self.source, self.fd, self.cap = source, fd, cap
        self.head_left = cap // 2
        self.tail_cap = cap - cap // 2
        self.tail = collections.deque()
        self.tail_bytes = 0
        self.skipped = 0
        self.lock = threading.Lock()
        self.finished = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        while True:
            try:
                data = os.read(self.source, 1 << 16)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                break
            self._take(data)
        os.close(self.source)
        self.finish()

    def _take(self, data):
        with self.lock:
            if self.finished:
                return
            if self.head_left > 0:
                head = data[: self.head_left]
                _write_all(self.fd, head)
                self.head_left -= len(head)
                data = data[len(head) :]
                if self.head_left == 0:
                    _write_all(
                        self.fd,
                        f"\n[gpuplanner: this output reached {self.cap // 2} bytes, half its cap of {self.cap};"
                        f" what follows is held back, and its last {self.tail_cap} bytes written when the process"
                        " ends]\n".encode(),
                    )
            if not data:
                return
            self.tail.append(data)
            self.tail_bytes += len(data)
            while self.tail_bytes - len(self.tail[0]) >= self.tail_cap:
                dropped = self.tail.popleft()
                self.tail_bytes -= len(dropped)
                self.skipped += len(dropped)
            if self.tail_bytes > self.tail_cap:  # cut the oldest chunk to the cap
                cut = self.tail_bytes - self.tail_cap
                self.tail[0] = self.tail[0][cut:]
                self.tail_bytes -= cut
                self.skipped += cut

    def finish(self):
        """Write the held-back tail (once)."""
        with self.lock:
            if self.finished:
                return
            self.finished = True
            if self.tail_bytes or self.skipped:
                _write_all(
                    self.fd,
                    f"\n[gpuplanner: {self.skipped} bytes of output skipped here; the last {self.tail_bytes} follow]\n".encode(),
                )
                for chunk in self.tail:
                    _write_all(self.fd, chunk)


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


def ended_at_cap(run_dir):
    """Whether the run's last ``run_end`` (in the tail of its ``events.jsonl``) is a ``budget_stop``."""
    path = os.path.join(run_dir, "events.jsonl")
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - (1 << 16)))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        if '"run_end"' in line:
            try:
                return json.loads(line).get("status") == "budget_stop"
            except (ValueError, AttributeError):
                return False
    return False


def end_leftovers(grace_s=LEFTOVER_GRACE_S):
    """Stop every descendant still running once the job's main process ended: SIGTERM, then SIGKILL after
    ``grace_s`` (at once, without a SIGTERM, for 0)."""
    me = os.getpid()
    left = descendants(me)
    if not left:
        return []
    for pid in left if grace_s > 0 else []:
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
    cap = log_cap_bytes(os.environ)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = subprocess.Popen(command, restore_signals=True, preexec_fn=preexec, env=env, stdout=out_w, stderr=err_w)
    finally:
        os.close(out_w)
        os.close(err_w)
    copies = [CappedCopy(out_r, 1, cap).start(), CappedCopy(err_r, 2, cap).start()]
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
    # What the job left running goes first: an escaped process holding the output pipes open would
    # otherwise keep the copies (and the exit file) waiting.
    left = end_leftovers(0.0 if ended_at_cap(run_dir) else LEFTOVER_GRACE_S)
    deadline = time.monotonic() + DRAIN_AFTER_EXIT_S
    for copy in copies:
        copy.thread.join(max(0.0, deadline - time.monotonic()))
        copy.finish()
    if left:
        sys.stderr.write(f"wrapper: stopped {len(left)} process(es) the job left running: {left}\n")
    _write(exit_file, {"exit_code": code, "signals": received, "ended_at": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
