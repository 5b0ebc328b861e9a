"""Helpers of the window tests (fixtures live in conftest.py): tiny trainer runs, a fake host key, waits."""

from __future__ import annotations

from typing import Any

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
    from gpuplanner.ui.runs.launch_request import LaunchRequest, demo_dir

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


def wait_for_history(qtbot: Any, pane: Any, timeout: int = 10_000) -> None:
    """Wait until the History pane's worker has answered every load it was asked for."""
    qtbot.waitUntil(lambda: not pane.is_loading(), timeout=timeout)


def wait_for_result(qtbot: Any, pane: Any, timeout: int = 10_000) -> None:
    """Wait until the Plan pane has no calculation pending and shows a result."""
    qtbot.waitUntil(lambda: not pane.is_busy() and pane.result is not None, timeout=timeout)


def select_form_option(pane: Any) -> None:
    """Select the table's row of the form's own option (its GPU, count and pricing): the details, the PDF
    and Launch then describe it instead of the recommended one."""
    plan = pane.result.plan
    assert pane.select_option(plan.gpu.name, plan.setup.gpus, plan.request.pricing_mode)
