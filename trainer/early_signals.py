"""Stop signals that arrive while the trainer is still starting up (standard library only).

``python -m trainer`` installs :func:`install` before anything heavy is imported (torch and
transformers take seconds), so a SIGTERM, SIGINT or SIGUSR1 sent during start-up is recorded instead
of killing the process with exit 143. :class:`trainer.preemption.SignalHandlers` picks a recorded
request up when the training loop's handlers take over, so the run stops gracefully at its first
step boundary (or before the first step, with nothing to lose) and exits 75.
"""

import signal

SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")
_received: list[int] = []


def _note(signum, frame):
    _received.append(signum)


def install():
    """Record stop signals from now on (only in the main thread, where handlers can be set).

    A launcher may start the trainer with these signals blocked (GPU Planner's wrapper does), so one
    sent while the interpreter itself was starting stays pending instead of killing it; they are
    unblocked here, once the handler is in place, and a pending one is recorded at once.
    """
    installed = []
    for name in SIGNALS:
        try:
            signal.signal(getattr(signal, name), _note)
            installed.append(getattr(signal, name))
        except (ValueError, OSError, AttributeError):
            pass
    if installed and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, installed)


def pending():
    """The first stop signal recorded since :func:`install`, or None."""
    return _received[0] if _received else None


def restore_defaults():
    """Back to the default dispositions (commands that do not stop gracefully); a recorded signal is re-raised."""
    for name in SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    if _received:
        signal.raise_signal(_received[0])
