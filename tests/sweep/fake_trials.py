"""Searches whose trials run the protocol fake (``tests/protocol_fake.py``) instead of the bundled trainer.

The sweep runner launches each trial as the bundled trainer with its flags; :class:`FakeTrialManager`, a
real :class:`RunManager`, launches the same flags as the fake's command line under the real monitor
(``python -m trainer exec``), which enforces the trial's dollar allowance; the trial's ``--max-gpu-hours``
share goes to the monitor too. Everything else (the study, the pruner, the history, the caps, the launcher,
the streaming) is the product's. The fake reads ``--max-steps``, ``--eval-every-steps``,
``--checkpoint-every-steps`` and ``--lr`` and ignores the trainer's other flags, so a trial takes the time
of its start-up. ``patch(monkeypatch)`` puts it under ``gpuplanner sweep run`` and the Sweep pane;
``python -m tests.sweep.fake_trials ARGS`` is ``gpuplanner ARGS`` with it (for a search in a subprocess).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from gpuplanner.launch.manager import RunManager
from tests import protocol_fake as fake


class FakeTrialManager(RunManager):
    def launch(self, host_name: str, trainer_args: Sequence[str], **kwargs: Any) -> int:
        if kwargs.get("command") is None and trainer_args:
            args = list(trainer_args)
            if "--max-gpu-hours" in args:
                at = args.index("--max-gpu-hours")
                kwargs["max_gpu_hours"] = float(args[at + 1])
                del args[at : at + 2]
            kwargs["command"] = fake.command(*args)
            trainer_args = []
        return super().launch(host_name, trainer_args, **kwargs)


def patch(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplanner.commands.sweep as sweep_command
    import gpuplanner.ui.sweep.sweep_pane as sweep_pane

    monkeypatch.setattr(sweep_command, "RunManager", FakeTrialManager)
    monkeypatch.setattr(sweep_pane, "RunManager", FakeTrialManager)


if __name__ == "__main__":
    import gpuplanner.commands.sweep as sweep_command
    from gpuplanner.cli import main

    sweep_command.RunManager = FakeTrialManager  # type: ignore[misc]
    sys.exit(main(sys.argv[1:]))
