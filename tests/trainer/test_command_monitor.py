"""The monitor of a user's own command (``python -m trainer exec``): real child processes, real signals,
a real HTTP metadata service on loopback; the tiny user script trains a real torch model on CPU."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import protocol_fake as fake
from tests.conftest import REPO_ROOT
from trainer.command_monitor import visible_devices
from trainer.preemption import MetadataWatcher
from trainer.protocol import StreamParser

SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"
PLAIN = SCRIPTS / "plain_loop.py"
ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def run_monitor(run_dir: Path, *monitor_flags: str, command: list[str], timeout: float = 120) -> tuple[int, float]:
    env = {**os.environ, **ENV, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "exec",
            "--run-dir",
            str(run_dir),
            "--simulate-gpu",
            *monitor_flags,
            "--",
            *command,
        ],
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, time.monotonic() - started


def records(run_dir: Path) -> list[dict[str, Any]]:
    parser = StreamParser()
    out = parser.feed((run_dir / "events.jsonl").read_bytes())
    assert parser.malformed == 0 and parser.unknown_kind == 0
    return out


def kinds(recs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in recs if r["kind"] == kind]


@pytest.mark.slow  # the one real script (torch) under the monitor here; the others use the protocol fake
def test_plain_script_runs_watched_to_the_end(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, _ = run_monitor(
        run_dir,
        "--price-per-gpu-hour",
        "36",
        "--gpus",
        "2",
        "--gpu-interval-s",
        "0.2",
        command=[sys.executable, str(PLAIN), "--steps", "30", "--step-sleep", "0.03"],
    )
    assert code == 0
    recs = records(run_dir)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    start, end = recs[0], recs[-1]
    assert start["kind"] == "run_start" and start["config"]["kind"] == "command"
    assert start["gpu_source"] == "simulated" and start["world_size"] == 2
    assert end["kind"] == "run_end" and (end["status"], end["exit_code"]) == ("finished", 0)
    steps = kinds(recs, "step")
    assert [s["step"] for s in steps] == list(range(1, 31))
    assert steps[-1]["tokens_total"] == 30 * 16 * 32 and steps[-1]["samples_total"] == 30 * 16
    assert steps[0]["tokens_per_s"] is None and all(s["tokens_per_s"] > 0 for s in steps[1:])
    # spend: 2 GPUs x $36/h = $0.02/s, rising with the monitor's clock
    spend = [s["spend_usd"] for s in steps]
    assert spend == sorted(spend) and spend[-1] > 0
    assert end["totals"]["spend_usd"] == pytest.approx(0.02 * end["totals"]["elapsed_s"], rel=1e-3)
    assert end["totals"]["steps"] == 30
    assert [e["step"] for e in kinds(recs, "eval")] == [10, 20, 30]
    gpus = kinds(recs, "gpu")
    assert len(gpus) >= 2 and all(g["simulated"] is True for g in gpus)
    assert max(g["util_pct"] for g in gpus) > 0  # the job's CPU time drives the simulated utilisation
    assert (run_dir / "final.pt").exists()


def test_budget_stops_a_command_with_sigterm_then_sigkill(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # the fake holds at step 1 and ignores SIGTERM: only SIGKILL after the grace period ends it. The budget is
    # spend over time by nature; the 2.7 s before its SIGTERM (a grace period before the cap) leave the fake's
    # Python (no torch) time to set its handler on a loaded machine.
    code, _ = run_monitor(
        run_dir,
        "--price-per-gpu-hour",
        "3600",  # $1 per second
        "--budget-usd",
        "3",
        "--grace-s",
        "0.3",
        "--gpu-interval-s",
        "0",
        command=fake.command("--steps", "5", "--hold-at-step", "1", "--ignore-term"),
    )
    assert code == 0  # a budget stop is a finished run: nothing to resume
    end = records(run_dir)[-1]
    assert end["status"] == "budget_stop" and "budget" in end["reason"]
    assert end["exit_code"] == 137  # it ignored SIGTERM and was killed after the grace period
    assert (run_dir / "got_term").read_text().split() == ["SIGTERM"]
    assert end["totals"]["spend_usd"] >= 3
    assert not (run_dir / "final.json").exists()


def test_gpu_hour_cap_stops_a_command_that_checkpoints(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, _ = run_monitor(
        run_dir,
        "--max-gpu-hours",
        str(3.0 / 3600),  # 3 GPU-seconds: SIGTERM 0.3 s before (a tenth), after the fake set its handler at load 12
        "--gpu-interval-s",
        "0",
        command=fake.command("--steps", "5", "--hold-at-step", "2"),
    )
    assert code == 0
    end = records(run_dir)[-1]
    assert (end["status"], end["exit_code"]) == ("budget_stop", 75)
    assert json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"] == 2


class _Metadata(http.server.BaseHTTPRequestHandler):
    """An AWS metadata service that requires IMDSv2 tokens and announces a spot stop once ``notice_when()``
    holds (a state of the job, e.g. it has logged steps; never a clock)."""

    token = "test-token-123"
    notice_when: Callable[[], bool] = staticmethod(lambda: True)  # type: ignore[assignment]
    seen: list[tuple[str, str | None]] = []

    def do_PUT(self) -> None:  # noqa: N802
        assert self.path == "/latest/api/token"
        self.seen.append(("PUT", self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))
        self._answer(200, self.token)

    def do_GET(self) -> None:  # noqa: N802
        got = self.headers.get("X-aws-ec2-metadata-token")
        self.seen.append(("GET", got))
        if got != self.token:
            self._answer(401, "")
        elif not type(self).notice_when():
            self._answer(404, "")
        else:
            self._answer(200, json.dumps({"action": "terminate", "time": "2026-11-23T17:00:00Z"}))

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metadata() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    _Metadata.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/latest/meta-data/spot/instance-action"
    server.shutdown()
    server.server_close()


def test_aws_watcher_sends_an_imdsv2_token(metadata: str) -> None:
    _Metadata.notice_when = staticmethod(lambda: True)  # type: ignore[assignment]
    watcher = MetadataWatcher(metadata, "aws", 0.5, lambda notice: None)
    assert watcher.poll_once() == "aws spot terminate at 2026-11-23T17:00:00Z"
    assert _Metadata.seen[0] == ("PUT", "21600") and _Metadata.seen[1] == ("GET", "test-token-123")
    assert watcher.poll_once() is not None
    assert [s[0] for s in _Metadata.seen].count("PUT") == 1  # the token is reused


def test_preemption_notice_reaches_the_command_and_exit_75_resumes(tmp_path: Path, metadata: str) -> None:
    run_dir = tmp_path / "run"
    # The notice comes once the command holds after its step 3 (its SIGTERM handler set): the metadata
    # service answers from the state of the job, never from a clock, and the command waits for the stop.
    barriers = fake.Barriers(run_dir)
    _Metadata.notice_when = staticmethod(lambda: barriers.reached("step-3"))  # type: ignore[assignment]
    flags = ["--gpu-interval-s", "0", "--preemption-provider", "aws", "--preemption-url", metadata]
    flags += ["--preemption-interval-s", "0.05", "--price-per-gpu-hour", "1"]
    code, _ = run_monitor(run_dir, *flags, command=fake.command("--steps", "8", "--hold-at-step", "3"))
    assert code == 75
    recs = records(run_dir)
    preempted = kinds(recs, "preempted")
    assert len(preempted) == 1 and "aws spot terminate" in preempted[0]["reason"]
    end = recs[-1]
    assert (end["status"], end["exit_code"]) == ("preempted", 75)
    assert [s["step"] for s in kinds(recs, "step")] == [1, 2, 3]
    assert json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"] == 3
    # The next start continues the run: the command resumes from its checkpoint, the totals go on.
    code, _ = run_monitor(
        run_dir, "--gpu-interval-s", "0", "--price-per-gpu-hour", "1", command=fake.command("--steps", "8")
    )
    assert code == 0
    recs = records(run_dir)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    resumed = kinds(recs, "resumed")
    assert len(resumed) == 1 and resumed[0]["spend_usd"] == end["totals"]["spend_usd"]
    steps = [s["step"] for s in kinds(recs, "step")]
    assert steps == list(range(1, 9))  # each step once: resumed after the checkpointed one
    assert recs[-1]["totals"]["spend_usd"] > end["totals"]["spend_usd"]


def test_missing_command_and_bad_flags_are_named(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    base = [sys.executable, "-m", "trainer", "exec", "--run-dir", str(tmp_path)]
    out = subprocess.run([*base, "--budget-usd", "5", "--", "true"], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "--budget-usd needs a price" in out.stderr
    out = subprocess.run(base, env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "give the command to run after --" in out.stderr
    code, _ = run_monitor(tmp_path / "run", command=["/nonexistent/program"])
    assert code == 127
    end = records(tmp_path / "run")[-1]
    assert end["status"] == "failed" and "/nonexistent/program" in end["reason"]


class _FakeNvml:
    """NVML's device-listing calls over a fixed set of UUIDs (for the CUDA_VISIBLE_DEVICES mapping only)."""

    UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333", "GPU-dddd-4444"]

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.UUIDS)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:  # noqa: N802
        return self.UUIDS[handle].encode()


@pytest.mark.parametrize(
    ("spec", "gpus", "expected"),
    [
        (None, 2, [0, 1]),
        (None, 8, [0, 1, 2, 3]),
        ("2,0", 1, [2, 0]),
        ("GPU-cccc-3333,1", 1, [2, 1]),
        ("dddd", 1, [3]),  # a unique UUID prefix, as CUDA accepts
        ("1,7,2", 1, [1]),  # CUDA stops at the first invalid entry
        ("GPU-a,GPU-", 1, [0]),  # an ambiguous prefix ends the list
        ("", 1, []),
    ],
)
def test_cuda_visible_devices_map_to_nvml_indices(spec: str | None, gpus: int, expected: list[int]) -> None:
    assert visible_devices(spec, _FakeNvml(), gpus) == expected
