"""The supervisor's decisions, kept pure so they are easy to test and to read.

After every node of a run has ended (or its host stopped answering), :func:`decide` says what
happens next: a final state, or a restart (same host after a stop with exit 75 or a lost process;
the next host of the fallback list when the host is unreachable), after a delay with exponential
backoff, at most ``max_restarts`` times. A user's stop or kill always wins.

A state with ``restart=True`` is a waiting state (``preempted``), never a final one: whoever follows
the run (``gpuplanner run``, the window) keeps following until the restarted process ends.

Ending resumably: exit 75 (the trainer checkpointed after a stop signal), death by a stop signal
(exit 143, 130 or 138: the signal arrived before the process could catch it, i.e. during its
start-up, when nothing since the newest checkpoint can be lost), and a process that vanished after
the user asked it to stop (its wrapper was killed by that same signal).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

EXIT_RESUME = 75
BACKOFF_BASE_S = 2.0
BACKOFF_MAX_S = 60.0
# Exit codes of a process killed by SIGTERM, SIGINT or SIGUSR1 (128 + signal number): the stop signals
# the trainer turns into a checkpoint and exit 75 once its handlers are installed.
STOP_SIGNAL_EXITS = {128 + s: s.name for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}


@dataclass(frozen=True)
class Decision:
    state: str  # final state (finished, failed, stopped, killed, preempted) or, with restart, waiting (preempted)
    restart: bool = False
    host: str | None = None
    delay_s: float = 0.0
    reason: str = ""


def backoff_s(restarts: int) -> float:
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2**restarts)) if restarts else BACKOFF_BASE_S


def next_host(current: str, hosts: Sequence[str]) -> str:
    """The host after ``current`` in ``hosts`` (wrapping round); ``current`` if it is the only one."""
    if current not in hosts or len(hosts) < 2:
        return hosts[0] if hosts and current not in hosts else current
    return hosts[(list(hosts).index(current) + 1) % len(hosts)]


def _resumable_reason(exit_code: int | None) -> str | None:
    """Why an ended process can be resumed from its newest checkpoint, or None when it failed."""
    if exit_code == EXIT_RESUME:
        return "preempted (exit 75)"
    if exit_code in STOP_SIGNAL_EXITS:
        return f"stopped by {STOP_SIGNAL_EXITS[exit_code]} during start-up (exit {exit_code})"
    return None


def decide(
    exit_code: int | None,
    *,
    user_action: str | None,
    auto_resume: bool,
    restarts: int,
    max_restarts: int,
    host: str,
    resume_after_s: float | None = None,
) -> Decision:
    """What to do once the run's processes ended with ``exit_code`` (None: died without a trace)."""
    if user_action == "kill":
        return Decision("killed")
    if exit_code == 0:
        return Decision("finished")
    reason = _resumable_reason(exit_code)
    if reason is None and exit_code is None and user_action in ("stop", "preempt"):
        reason = "process ended after a stop request without a trace"
    if reason is not None:
        if user_action == "stop":
            return Decision("stopped")
        if user_action == "preempt":
            return Decision("preempted", True, host, resume_after_s or 0.0, "simulated preemption")
        if auto_resume and restarts < max_restarts:
            return Decision("preempted", True, host, backoff_s(restarts), reason)
        return Decision("preempted")
    if exit_code is None and auto_resume and restarts < max_restarts and user_action is None:
        return Decision("preempted", True, host, backoff_s(restarts), "process lost")
    return Decision("failed")


def decide_unreachable(
    *, auto_resume: bool, restarts: int, max_restarts: int, host: str, hosts: Sequence[str]
) -> Decision | None:
    """A host that stopped answering: move to the next fallback host, or None to keep reconnecting."""
    if not auto_resume or restarts >= max_restarts:
        return None
    target = next_host(host, hosts)
    if target == host:
        return None
    return Decision("unreachable", True, target, 0.0, f"host {host} unreachable")
