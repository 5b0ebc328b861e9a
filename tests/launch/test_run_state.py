"""The run manager's in-memory run without processes: records are delivered once per node lane and in
``seq`` order, a failing callback neither stops the others nor the caller, and the nodes' exit codes
combine into the one the supervisor decides on."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpuplanner.launch.run_state import ManagedNode, ManagedRun, RunStatus
from gpuplanner.launch.supervisor import EXIT_RESUME
from gpuplanner.launch.watcher import combined_exit
from trainer.telemetry import NODE_SEQ_STRIDE


def _run(*codes: int | None, action: str | None = None) -> ManagedRun:
    nodes = [
        ManagedNode(f"h{i}", f"/runs/{i}", f"node{i}", 100 + i, done=True, exit_code=c) for i, c in enumerate(codes)
    ]
    return ManagedRun(7, [], nodes, user_action=action)


def test_records_are_delivered_once_per_lane_in_seq_order() -> None:
    run = _run(0, 0)
    got: list[tuple[int, list[int]]] = []
    run.on_records.append(lambda run_id, records: got.append((run_id, [r["seq"] for r in records])))
    node1 = NODE_SEQ_STRIDE
    run.deliver([{"seq": 2}, {"seq": 0}, {"seq": node1 + 1}, {"seq": 1}])
    run.deliver([{"seq": 1}, {"seq": 3}, {"seq": node1 + 1}, {"seq": node1 + 2}])  # 1 and node1 + 1 again
    run.deliver([{"seq": 2}])  # nothing new: no call
    assert got == [(7, [0, 1, 2, node1 + 1]), (7, [3, node1 + 2])]
    assert run.last_seq == 3 and run.lane_seq == {1: node1 + 2}
    assert run.status().last_seq == 3


def test_a_failing_callback_is_logged_and_the_others_still_hear(caplog: pytest.LogCaptureFixture) -> None:
    run = _run(None)
    heard: list[RunStatus] = []
    records: list[Any] = []

    def broken(*_: Any) -> None:
        raise RuntimeError("the pane is gone")

    run.on_status += [broken, heard.append]
    run.on_records += [broken, lambda run_id, batch: records.extend(batch)]
    with caplog.at_level(logging.ERROR, logger="gpuplanner.launch.manager"):
        run.set_state("running")
        run.deliver([{"seq": 0}])
    assert [(s.run_id, s.state, s.host, s.run_dir, s.pid) for s in heard] == [(7, "running", "h0", "/runs/0", 100)]
    assert records == [{"seq": 0}] and run.state == "running"
    assert [r.getMessage() for r in caplog.records] == ["on_status callback failed", "on_records callback failed"]


@pytest.mark.parametrize(
    ("codes", "action", "combined"),
    [
        ((0, 0), None, 0),
        ((0, EXIT_RESUME), None, EXIT_RESUME),  # one node preempted: the run resumes
        ((EXIT_RESUME, 3, 0), None, 3),
        ((0, None), None, None),  # a node whose exit is unknown
        ((0, 2, EXIT_RESUME), "node-failed", 2),
        ((0, EXIT_RESUME), "node-failed", 1),  # stopped because another node failed without a code
    ],
)
def test_the_nodes_exit_codes_combine(codes: tuple[int | None, ...], action: str | None, combined: int | None) -> None:
    assert combined_exit(_run(*codes, action=action)) == combined


def test_the_launch_document_is_what_another_process_attaches_by() -> None:
    run = _run(0)
    run.orphans.append(ManagedNode("gone", "/runs/old", "node0", 55, command=["python"]))
    doc = run.launch_doc()
    assert doc["nodes"] == [{"host": "h0", "run_dir": "/runs/0", "tag": "node0", "pgid": 100, "command": []}]
    assert doc["orphans"] == [{"host": "gone", "run_dir": "/runs/old", "tag": "node0", "pgid": 55}]
    assert (doc["gpus"], doc["max_restarts"], doc["restarts"], doc["user_command"]) == (1, 3, 0, [])
