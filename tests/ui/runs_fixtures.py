"""Fixtures and helpers for the Runs and Hosts pane tests: a pane on a fresh database, tiny trainer args."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

CORPUS = REPO_ROOT / "tests" / "data" / "corpus"
TINY_ARGS = [
    "--seq-len",
    "32",
    "--micro-batch",
    "4",
    "--lr",
    "2e-3",
    "--warmup-steps",
    "2",
    "--device",
    "cpu",
    "--checkpoint-every-minutes",
    "0",
    "--log-interval-s",
    "0",
    "--gpu-interval-s",
    "0.2",
    "--no-events-stdout",
]


class FakeHostKeyError(Exception):
    """Stands in for the launcher's UnknownHostKey/ChangedHostKey in dialog tests."""

    def __init__(self) -> None:
        super().__init__("host key")
        self.hostname = "gpu-box.example.org"
        self.port = 2222
        self.key_type = "ssh-ed25519"
        self.fingerprint_sha256 = "SHA256:q0bX3vO7Zc2mU1tq9mB2m3S7eXwQzTq+0x2fYlq8n5E"
        self.trusted = 0

    def trust(self) -> None:
        self.trusted += 1


def tiny_request(max_steps: int, *, name: str = "tiny") -> Any:
    from gpuplanner.ui.launch_dialog import LaunchRequest, demo_dir

    args = [
        "--model-config",
        str(demo_dir() / "tiny-gpt2.json"),
        "--data",
        str(CORPUS),
        "--max-steps",
        str(max_steps),
        *TINY_ARGS,
    ]
    return LaunchRequest(host_name="local", trainer_args=args, name=name)


@pytest.fixture
def services(tmp_path: Path) -> Any:
    from gpuplanner.ui.services import AppServices

    return AppServices(db_path=tmp_path / "history.sqlite", config_dir=tmp_path / "config")


@pytest.fixture
def runs_pane(qtbot: Any, services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from gpuplanner.ui import runs_pane as module

    monkeypatch.setattr(
        module.RunsPane,
        "_make_manager",
        lambda self: __import__("gpuplanner.launch.manager", fromlist=["RunManager"]).RunManager(
            self.services.db_path, local_runs_root=tmp_path / "runs"
        ),
    )
    pane = module.RunsPane(services)
    qtbot.addWidget(pane)
    pane.resize(1280, 800)
    pane.show()
    yield pane
    for entry in list(pane.runs.values()):
        if entry.state not in module.FINAL_STATES:
            try:
                pane.controller.manager.kill(entry.run_id)
            except Exception:
                pass
    pane.shutdown(stop_runs=False)
