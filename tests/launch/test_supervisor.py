"""The supervisor's pure decisions: restart with backoff after 75, finish, fail, fail over, keep retrying."""

from __future__ import annotations

import pytest

from gpuplanner.launch import supervisor
from gpuplanner.launch.supervisor import Decision, backoff_s, decide, decide_unreachable, next_host

BASE = dict(user_action=None, auto_resume=True, max_restarts=3, host="a")


def test_exit_75_restarts_on_the_same_host_with_backoff_until_max_restarts() -> None:
    delays = []
    for restarts in range(3):
        d = decide(75, restarts=restarts, **BASE)
        assert (d.state, d.restart, d.host) == ("preempted", True, "a")
        assert d.reason == "preempted (exit 75)"
        delays.append(d.delay_s)
    assert delays == [2.0, 4.0, 8.0]
    assert decide(75, restarts=3, **BASE) == Decision("preempted")  # max reached: stays resumable, no restart
    assert backoff_s(10) == supervisor.BACKOFF_MAX_S


def test_exit_75_without_auto_resume_or_after_a_user_stop() -> None:
    assert decide(75, restarts=0, **{**BASE, "auto_resume": False}) == Decision("preempted")
    assert decide(75, restarts=0, **{**BASE, "user_action": "stop"}) == Decision("stopped")
    sim = decide(75, restarts=5, resume_after_s=1.5, **{**BASE, "user_action": "preempt"})
    assert (sim.state, sim.restart, sim.host, sim.delay_s) == ("preempted", True, "a", 1.5)


def test_exit_0_is_done() -> None:
    assert decide(0, restarts=0, **BASE) == Decision("finished")
    assert decide(0, restarts=0, **{**BASE, "user_action": "stop"}) == Decision("finished")


@pytest.mark.parametrize("code", [1, 2, 124, 137, 139])
def test_failure_codes_fail_without_restart(code: int) -> None:
    assert decide(code, restarts=0, **BASE) == Decision("failed")


@pytest.mark.parametrize(("code", "name"), [(143, "SIGTERM"), (130, "SIGINT"), (138, "SIGUSR1")])
def test_death_by_a_stop_signal_is_resumable(code: int, name: str) -> None:
    # Killed by a stop signal before its handlers were installed (start-up): nothing since the newest
    # checkpoint is lost, so it resumes like exit 75.
    d = decide(code, restarts=0, **BASE)
    assert (d.state, d.restart, d.host, d.delay_s) == ("preempted", True, "a", 2.0)
    assert d.reason == f"stopped by {name} during start-up (exit {code})"
    assert decide(code, restarts=0, **{**BASE, "auto_resume": False}) == Decision("preempted")
    assert decide(code, restarts=0, **{**BASE, "user_action": "stop"}) == Decision("stopped")
    assert decide(code, restarts=3, **BASE) == Decision("preempted")


def test_kill_always_wins() -> None:
    for code in (0, 75, 1, None):
        assert decide(code, restarts=0, **{**BASE, "user_action": "kill"}) == Decision("killed")


def test_lost_process_restarts_with_resume_only_when_supervised() -> None:
    d = decide(None, restarts=1, **BASE)
    # A waiting state, never "failed": whoever follows the run must not take it for the end.
    assert (d.state, d.restart, d.host, d.delay_s, d.reason) == ("preempted", True, "a", 4.0, "process lost")
    assert decide(None, restarts=3, **BASE) == Decision("failed")
    assert decide(None, restarts=0, **{**BASE, "auto_resume": False}) == Decision("failed")


def test_lost_after_a_stop_request_is_a_stop() -> None:
    # The wrapper itself died of the stop signal (before its handlers were in place): stopped, resumable.
    assert decide(None, restarts=0, **{**BASE, "user_action": "stop"}) == Decision("stopped")
    sim = decide(None, restarts=0, resume_after_s=0.5, **{**BASE, "user_action": "preempt"})
    assert (sim.state, sim.restart, sim.delay_s) == ("preempted", True, 0.5)


def test_a_restart_is_never_announced_with_a_final_state() -> None:
    from gpuplanner.launch.manager import FINAL_STATES

    for code in (None, 0, 1, 75, 130, 137, 143):
        for action in (None, "stop", "preempt", "kill"):
            for auto in (True, False):
                d = decide(code, restarts=0, **{**BASE, "user_action": action, "auto_resume": auto})
                assert not (d.restart and d.state in FINAL_STATES), (code, action, auto, d)


def test_unreachable_moves_to_the_next_fallback_host() -> None:
    d = decide_unreachable(auto_resume=True, restarts=0, max_restarts=3, host="a", hosts=["a", "b", "c"])
    assert d is not None and (d.state, d.restart, d.host, d.delay_s) == ("unreachable", True, "b", 0.0)
    assert "a unreachable" in d.reason
    d = decide_unreachable(auto_resume=True, restarts=1, max_restarts=3, host="c", hosts=["a", "b", "c"])
    assert d is not None and d.host == "a"  # wraps round


def test_unreachable_without_fallback_keeps_retrying_the_same_host() -> None:
    assert decide_unreachable(auto_resume=True, restarts=0, max_restarts=3, host="a", hosts=["a"]) is None
    assert decide_unreachable(auto_resume=False, restarts=0, max_restarts=3, host="a", hosts=["a", "b"]) is None
    assert decide_unreachable(auto_resume=True, restarts=3, max_restarts=3, host="a", hosts=["a", "b"]) is None


def test_next_host() -> None:
    assert next_host("a", ["a", "b"]) == "b"
    assert next_host("b", ["a", "b"]) == "a"
    assert next_host("a", ["a"]) == "a"
    assert next_host("x", ["a", "b"]) == "a"
