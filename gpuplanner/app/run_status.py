"""Run status in words: how the window and the CLI say a run's state and its events (the history and the JSON
exports keep the status names themselves)."""

from __future__ import annotations

from collections.abc import Mapping

from gpuplanner.launch.manager import FINAL_STATES as MANAGER_FINAL_STATES

# The RunManager's states of a live run, in the groups both front ends act on (FINAL_STATES: the manager's)
FINAL_STATES = MANAGER_FINAL_STATES
ACTIVE_STATES = ("starting", "running", "stopping", "resuming", "unreachable")
ENDED_STATES = {"budget_stop": "finished", "early_stop": "finished"}  # history status -> a live run's state

# The history's status names the window shows in words (exports and the CLI keep the names)
STATUS_WORDS: Mapping[str, str] = {"budget_stop": "stopped at the budget", "early_stop": "stopped early"}


def status_text(status: str | None) -> str:
    """A run's status as the window says it: "stopped early" for ``early_stop``."""
    return STATUS_WORDS.get(status or "", status or "–")


def state_words(state: str, exit_code: int | None) -> str:
    """A live run's state with its exit code: "stopped (exit 75)"."""
    return state + (f" (exit {exit_code})" if exit_code is not None else "")


def describe_event(kind: str, detail: Mapping[str, object]) -> str:
    """One event's details in words (the Events tab's last column)."""
    if kind == "run_end":
        text = status_text(str(detail.get("status") or ""))
        if detail.get("error"):
            text += f": {detail['error']}"
        if isinstance(detail.get("exit_code"), int):
            text += f" (exit {detail['exit_code']})"
        return text
    if kind == "failure":
        tail = str(detail.get("stderr_tail") or "").strip().splitlines()
        text = str(detail.get("error") or "failed")
        return text + (f" · stderr: {tail[-1]}" if tail and tail[-1] not in text else "")
    if kind == "restart":
        words = {"stopped": "a stop", "preempted": "a preemption", "failed": "a failure", "killed": "a kill"}
        after = f" after {words.get(str(detail['after']), detail['after'])}" if detail.get("after") else ""
        return f"{detail.get('reason', '')}{after}: {detail.get('from_host', '?')} -> {detail.get('to_host', '?')}"
    if kind == "checkpoint":
        size = detail.get("bytes")
        return str(detail.get("path") or "") + (f" ({size / 1024**3:,.2f} GiB)" if isinstance(size, int) else "")
    if kind == "user_stop":
        by = {"window": "in the window", "cli": "with gpuplanner run stop", "sweep": "by the sweep"}.get(
            str(detail.get("by")), ""
        )
        return " ".join(w for w in ("Stop asked", by, f"({detail['reason']})" if detail.get("reason") else "") if w)
    if kind == "stopped":
        return "the trainer checkpointed and exited after Stop"
    if kind == "run_start":
        host = detail.get("host")
        return f"on {host}" if isinstance(host, str) else ""
    return ""


FAILURE_LINES = 10  # the stderr lines `runs show` and `gpuplanner run` print of a failed run


def failure_lines(failure: Mapping[str, object] | None, lines: int = FAILURE_LINES) -> list[str]:
    """A failed run's exit reason and the last ``lines`` lines of its stderr, as the CLI prints them
    (``failure``: :func:`gpuplanner.history.failures.load_failure`'s document; [] when None)."""
    if not failure:
        return []
    code = failure.get("exit_code")
    head = f"failed{f' (exit {code})' if isinstance(code, int) else ''}: {failure.get('error') or 'no error recorded'}"
    tail = str(failure.get("stderr_tail") or "").splitlines()[-lines:]
    out = [head]
    if tail:
        out.append(f"last {len(tail)} line{'s' if len(tail) != 1 else ''} of stderr:")
        out.extend(f"  {line}" for line in tail)
    elif failure.get("stderr_problem"):
        out.append(f"stderr not read: {failure['stderr_problem']}")
    return out
