"""The preemption matrix through ``gpuplanner run --auto-resume`` on this machine.

Each interruption (SIGTERM at start-up, SIGTERM mid-step, SIGTERM during a checkpoint write, SIGKILL
of the whole process group: a lost host) must end with the CLI exiting 0 after one automatic restart,
the history at "finished" with a contiguous ``seq``, and final weights bit-identical to an
uninterrupted run of the same flags. Signals go to the run's process group, as the launcher and a
shutting-down host send them. The trainer is caught at each moment by a barrier of its own
(``trainer/hold.py``, set through ``gpuplanner run --env``), never by racing its steps: inside step 3,
inside the write of checkpoint 3, after step 3.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuplanner.cli import main
from gpuplanner.launch import supervisor
from tests.conftest import REPO_ROOT
from tests.launch.conftest import TINY_GPT2, TRAINER_ENV, all_seqs, events_file_seqs, final_weights, rows, train_flags
from tests.protocol_fake import Barriers
from trainer import hold

pytestmark = pytest.mark.slow

STEPS = 8
HELD = 3  # the step each barrier names

# case -> (the barriers it holds at, in the run's environment; the one(s) to wait for before the signal)
BARRIERS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "sigterm-startup": ({}, ()),
    # inside step 3 (its gradients computed, no optimizer step yet); no write in flight (blocking writes)
    "sigterm-mid-step": ({hold.IN_STEP_ENV: str(HELD)}, (f"in-step-{HELD}",)),
    # inside the background write of checkpoint 3, with training held after step 3: both in place, the
    # stop ends both holds, the write completes and step 4 is the last one
    "sigterm-checkpoint": (
        {hold.CHECKPOINT_ENV: str(HELD), hold.STEPS_ENV: str(HELD)},
        (f"checkpoint-{HELD}", f"step-{HELD}"),
    ),
    # after step 3 (checkpoint 2 complete, 3 handed to the writer): a lost host
    "sigkill-group": ({hold.STEPS_ENV: str(HELD)}, (f"step-{HELD}",)),
}


def _flags(model_config: Path, blocking: bool = False) -> list[str]:
    # A checkpoint after every step: a SIGKILL always finds one to resume from, and every barrier has one
    # around it. Ordinary tiny steps: the barriers, not the step's length, catch the trainer.
    flags = train_flags(model_config, steps=STEPS, checkpoint_every_steps=1)
    return [*flags, "--no-checkpoint-async"] if blocking else flags


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """Final weights of the same flags, uninterrupted (the trainer run directly)."""
    folder = tmp_path_factory.mktemp("reference")
    config = folder / "tiny-gpt2.json"
    config.write_text(json.dumps(TINY_GPT2))
    env = {**os.environ, **TRAINER_ENV, "PYTHONPATH": str(REPO_ROOT)}
    args = [sys.executable, "-m", "trainer", "train", *_flags(config), "--run-dir", str(folder / "run")]
    done = subprocess.run(args, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return final_weights(folder / "run")


class CliRun:
    """``gpuplanner run --auto-resume --json`` in a thread of this process; the launch as it is recorded."""

    def __init__(self, db_path: Path, flags: list[str], options: tuple[str, ...] = ()) -> None:
        self.db_path = db_path
        self.code: int | None = None
        argv = ["run", "--db", str(db_path), "--host", "local", "--auto-resume", "--json", *options, "--", *flags]
        self.thread = threading.Thread(target=self._main, args=(argv,), daemon=True)
        self.thread.start()

    def _main(self, argv: list[str]) -> None:
        self.code = main(argv)

    def launch(self, timeout: float = 60) -> dict[str, Any]:
        """The first node's launch record (pgid, run dir) as soon as its process started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = rows(self.db_path, "SELECT launch_json FROM runs")
            except Exception:  # the history is being created by the CLI thread
                found = []
            if found and found[0][0]:
                node = (json.loads(found[0][0]).get("launch") or {"nodes": [{}]})["nodes"][0]
                if node.get("pgid"):
                    return node
            time.sleep(0.002)
        raise AssertionError("the run did not start")

    def wait(self, timeout: float = 300) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "gpuplanner run did not end"
        assert self.code is not None
        return self.code


def _records(run_dir: Path) -> list[dict[str, Any]]:
    from trainer.protocol import StreamParser

    path = run_dir / "events.jsonl"
    return StreamParser().feed(path.read_bytes()) if path.exists() else []


def _interrupt(case: str, pgid: int, barriers: Barriers) -> float:
    """Send the case's signal at its barrier(s) (at once for start-up); returns when it was sent (Unix time)."""
    for name in BARRIERS[case][1]:
        barriers.wait(name, 180)
    sent = time.time()
    os.killpg(pgid, signal.SIGKILL if case == "sigkill-group" else signal.SIGTERM)
    if case == "sigkill-group":  # the restart may resume from checkpoint 2 and pass step 3 again
        barriers.release(f"step-{HELD}")
    return sent


@pytest.mark.parametrize("case", ["sigterm-startup", "sigterm-mid-step", "sigterm-checkpoint", "sigkill-group"])
def test_interrupted_run_resumes_to_identical_weights(
    case: str,
    reference: dict[str, torch.Tensor],
    db_path: Path,
    model_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A short back-off, but longer than the CLI's 0.5 s poll: it must see the waiting state and go on.
    monkeypatch.setattr(supervisor, "BACKOFF_BASE_S", 1.0)
    barriers = Barriers(tmp_path / "barriers")
    env = {**BARRIERS[case][0], hold.DIR_ENV: str(barriers.folder)}
    options = tuple(word for name, value in env.items() for word in ("--env", f"{name}={value}"))
    cli = CliRun(db_path, _flags(model_config, blocking=case == "sigterm-mid-step"), options)
    node = cli.launch()
    run_dir = Path(node["run_dir"])
    sent = _interrupt(case, node["pgid"], barriers)
    assert cli.wait() == 0, capsys.readouterr().err[-3000:]
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (doc["state"], doc["exit_code"], doc["restarts"]) == ("finished", 0, 1), doc
    run_id = doc["run_id"]
    assert rows(db_path, "SELECT status FROM runs WHERE id = ?", run_id) == [("finished",)]

    records = _records(run_dir)
    ends = [r for r in records if r["kind"] == "run_end"]
    (restart,) = [json.loads(d) for (d,) in rows(db_path, "SELECT detail_json FROM events WHERE kind = 'restart'")]
    if case == "sigkill-group":  # no exit code, no run_end: a lost process, restarted from its checkpoint
        assert restart["reason"] == "process lost" and len(ends) == 1
        resumed = [r for r in records if r["kind"] == "resumed"]
        assert resumed and resumed[0]["step"] in (HELD - 1, HELD)  # checkpoint 3 may not have been complete
    else:
        assert restart["reason"] == "preempted (exit 75)"
        assert [e["status"] for e in ends] == ["preempted", "finished"]
        if case == "sigterm-startup":
            assert "start-up" in ends[0]["reason"]
            assert not [r for r in records if r["kind"] == "step" and r["seq"] < ends[0]["seq"]]
        else:
            stopped_at = next(r for r in records if r["kind"] == "preempted")["step"]
            # the held step itself; past checkpoint 3 (written after step 3's stop check), the next one
            assert stopped_at == (HELD if case == "sigterm-mid-step" else HELD + 1)
        spans = [(c["t"] - c["seconds"], c["t"]) for c in records if c["kind"] == "checkpoint"]
        during_write = any(begin - 0.002 <= sent <= end for begin, end in spans)
        if case == "sigterm-checkpoint":  # the signal landed while a checkpoint was being written
            assert during_write, (sent, spans)
        if case == "sigterm-mid-step":  # ... and here between two writes, in a step: no write had begun when it
            # was sent (the stop's own final save, which the signal starts, may begin within the 2 ms allowed above)
            assert not any(begin <= sent <= end for begin, end in spans), (sent, spans)

    stored = all_seqs(db_path, run_id)
    assert stored == list(range(len(stored))), "gap or duplicate seq in the history"
    assert stored == sorted(set(events_file_seqs(run_dir)))
    weights = final_weights(run_dir)
    assert weights.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(weights[name], tensor), name
