"""Metadata watcher against a local HTTP server: notices from AWS, GCP and Azure stop training gracefully."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.conftest import make_config, read_events
from trainer import checkpoint
from trainer.loop import EXIT_RESUME, train
from trainer.preemption import MetadataWatcher, notice_in


class _Metadata(http.server.BaseHTTPRequestHandler):
    body: bytes = b""
    status = 404
    headers_seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).headers_seen.append(dict(self.headers))
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metadata() -> Iterator[tuple[type[_Metadata], str]]:
    handler = type("Handler", (_Metadata,), {"body": b"", "status": 404, "headers_seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/meta"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(
    "provider,status,body,expected",
    [
        ("aws", 200, b'{"action": "terminate", "time": "2026-01-01T00:00:00Z"}', "aws spot terminate"),
        ("aws", 404, b"Not Found", None),
        ("gcp", 200, b"TRUE", "gcp preempted"),
        ("gcp", 200, b"FALSE", None),
        ("azure", 200, b'{"Events": [{"EventType": "Preempt", "NotBefore": "soon"}]}', "azure Preempt soon"),
        ("azure", 200, b'{"Events": [{"EventType": "Reboot"}]}', None),
        ("azure", 200, b"not json", None),
    ],
)
def test_notice_parsing(provider: str, status: int, body: bytes, expected: str | None) -> None:
    result = notice_in(provider, status, body)
    assert (result is None) if expected is None else (result is not None and result.startswith(expected))


@pytest.mark.parametrize(
    "provider,body,header",
    [
        ("aws", b'{"action": "stop", "time": "x"}', None),
        ("gcp", b"TRUE", "Metadata-Flavor"),
        ("azure", b'{"Events": [{"EventType": "Preempt"}]}', "Metadata"),
    ],
)
def test_watcher_polls_until_notice(metadata, provider: str, body: bytes, header: str | None) -> None:
    handler, url = metadata
    notices: list[str] = []
    watcher = MetadataWatcher(url, provider, 0.02, notices.append).start()
    deadline = time.monotonic() + 60  # only ends a test whose watcher died; it waits for two polls
    while watcher.polls < 2:
        assert time.monotonic() < deadline, "the watcher never polled"
        time.sleep(0.01)
    assert notices == []  # 404: no notice yet, after polls that saw it
    handler.status, handler.body = 200, body
    deadline = time.monotonic() + 5
    while not notices and time.monotonic() < deadline:
        time.sleep(0.01)
    watcher.stop()
    assert len(notices) == 1 and watcher.polls >= 2
    if header:
        assert header in handler.headers_seen[-1]


def test_unreachable_endpoint_is_not_a_notice() -> None:
    watcher = MetadataWatcher("http://127.0.0.1:9/none", "aws", 0.01, lambda n: None)
    assert watcher.poll_once() is None and watcher.errors == 1


@pytest.mark.slow  # the real trainer trains until the notice (the trainer's own stop, not the launcher's)
def test_notice_during_training_checkpoints_and_exits_75(metadata, tmp_path: Path, model_config: Path) -> None:
    handler, url = metadata
    notice = json.dumps({"Events": [{"EventType": "Preempt", "NotBefore": "now"}]}).encode()
    events_file = tmp_path / "run" / "events.jsonl"

    def announce_once_training() -> None:
        # The notice comes while steps run: a notice before the first step stops with nothing to save.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if events_file.exists() and '"kind":"step"' in events_file.read_text():
                handler.status, handler.body = 200, notice
                return
            time.sleep(0.02)

    announcer = threading.Thread(target=announce_once_training, daemon=True)
    announcer.start()
    cfg = make_config(
        tmp_path / "run",
        model_config,
        max_steps=100000,
        preemption_url=url,
        preemption_provider="azure",
        preemption_poll_s=0.05,
    )
    assert train(cfg) == EXIT_RESUME
    announcer.join(timeout=5)
    events = read_events(tmp_path / "run")
    assert events[-1]["status"] == "preempted"
    assert "azure Preempt" in [e for e in events if e["kind"] == "preempted"][0]["reason"]
    assert checkpoint.newest_valid(tmp_path / "run").name == f"step-{events[-1]['totals']['steps']:08d}"
