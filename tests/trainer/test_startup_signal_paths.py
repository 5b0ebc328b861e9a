"""Both ways a stop signal during start-up ends the trainer: before anything heavy is loaded (the
command line leaves at once) and while torch, data or model load (the loop stops before a step)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import base_args, cli_args, make_config, read_events, trainer_env


def test_signal_before_loading_leaves_without_importing_torch(tmp_path: Path, model_config: Path) -> None:
    run_dir = tmp_path / "run"
    code = (
        "import os, signal, sys\n"
        "from trainer import early_signals\n"
        "early_signals.install()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "from trainer.cli import main\n"
        f"status = main(['train', *{cli_args(base_args(run_dir, model_config, max_steps=3))!r}])\n"
        "print('torch' in sys.modules)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=trainer_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 75, done.stderr[-2000:]
    assert done.stdout.strip() == "False"  # stopped before torch was imported (seconds saved)
    assert "SIGTERM during start-up" in done.stderr
    records = read_events(run_dir)
    assert [r["kind"] for r in records] == ["preempted", "run_end"]
    assert records[-1]["status"] == "preempted" and records[-1]["exit_code"] == 75
    assert "nothing to save" in records[-1]["reason"]
    assert not (run_dir / "checkpoints").exists()


def test_signal_while_loading_stops_before_the_first_step(tmp_path: Path, model_config: Path) -> None:
    from trainer import early_signals
    from trainer.loop import EXIT_OK, EXIT_RESUME, train

    run_dir = tmp_path / "run"
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    early_signals.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, as while torch or the model are being loaded
        assert early_signals.pending() == signal.SIGTERM
        assert train(make_config(run_dir, model_config, max_steps=3)) == EXIT_RESUME
    finally:
        early_signals._received.clear()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    records = read_events(run_dir)
    assert not [r for r in records if r["kind"] == "step"]
    assert records[-1]["status"] == "preempted" and "start-up" in records[-1]["reason"]
    assert train(make_config(run_dir, model_config, max_steps=3)) == EXIT_OK  # nothing to resume: starts again
    assert [r["step"] for r in read_events(run_dir) if r["kind"] == "step"] == [1, 2, 3]
    seqs = [r["seq"] for r in read_events(run_dir)]
    assert seqs == list(range(len(seqs)))
    assert json.loads((run_dir / "final" / "config.json").read_text())["n_embd"] == 32
