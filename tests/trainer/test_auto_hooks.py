"""The monitor's start-up hook (``trainer/user_path/startup/sitecustomize.py``) in a real Python process:
a Lightning ``Trainer`` gets GPU Planner's callback without an edit (Lightning is not installed here, so
a minimal stand-in ``lightning.pytorch`` package with a ``Trainer`` and its ``callbacks`` list is put on
the path), the opt-out, a sitecustomize it shadows still runs, and the telemetry module on its own
does nothing outside GPU Planner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.command_monitor import STARTUP_PATH, USER_PATH

FAKE_LIGHTNING = """
class Callback:  # Lightning's hooks do nothing unless overridden
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pass


class Trainer:
    def __init__(self, *, max_steps=1, callbacks=None):
        self.callbacks = list(callbacks or [])
        self.global_step = 0
        self.callback_metrics = {}
        self.sanity_checking = False

    def fit(self, batches):
        for i, batch in enumerate(batches):
            self.global_step = i + 1
            for cb in self.callbacks:
                cb.on_train_batch_end(self, None, {"loss": 1.0 / self.global_step}, batch, i)
"""

SCRIPT = """
import json, sys
from lightning.pytorch import Callback, Trainer


class Mine(Callback):
    pass


class Batch:  # a tensor's shape is all the callback reads
    def __init__(self, *shape):
        self.shape = shape


trainer = Trainer(max_steps=3, callbacks=[Mine()])
trainer.fit([{"input_ids": Batch(2, 8)} for _ in range(3)])
print(json.dumps([type(cb).__name__ for cb in trainer.callbacks]))
"""


def run_python(tmp_path: Path, env: dict[str, str], code: str = SCRIPT) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "site"
    (fake / "lightning" / "pytorch").mkdir(parents=True, exist_ok=True)
    (fake / "lightning" / "__init__.py").write_text("")
    (fake / "lightning" / "pytorch" / "__init__.py").write_text(FAKE_LIGHTNING)
    path = os.pathsep.join([str(STARTUP_PATH), str(USER_PATH), str(fake)])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANNER_") and k != "RANK"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "PYTHONPATH": path, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_lightning_trainer_gets_the_callback_without_an_edit(tmp_path: Path) -> None:
    file = tmp_path / "user.jsonl"
    done = run_python(tmp_path, {"GPUPLANNER_TELEMETRY_FILE": str(file)})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout) == ["Mine", "LightningCallback"]  # the user's callbacks kept, ours added
    recs = records(file)
    assert [(r["step"], r["tokens_total"], r["samples_total"]) for r in recs] == [(1, 16, 2), (2, 32, 4), (3, 48, 6)]
    assert [r["loss"] for r in recs] == pytest.approx([1.0, 0.5, 1 / 3])


def test_the_hook_can_be_turned_off_and_does_nothing_outside_gpu_planner(tmp_path: Path) -> None:
    file = tmp_path / "user.jsonl"
    off = run_python(tmp_path, {"GPUPLANNER_TELEMETRY_FILE": str(file), "GPUPLANNER_AUTO_HOOKS": "0"})
    assert off.returncode == 0 and json.loads(off.stdout) == ["Mine"] and not file.exists()
    outside = run_python(tmp_path, {})  # no telemetry target: the Trainer is left as it is
    assert outside.returncode == 0 and json.loads(outside.stdout) == ["Mine"] and outside.stderr == ""
    # an edited script that imports the module runs where only the module is (no monitor, no hook)
    edited = "import gpuplanner_telemetry as gt; print(gt.log_step(1, tokens=5), gt.log_eval(1, eval_loss=1.0))"
    alone = subprocess.run(
        [sys.executable, "-c", edited],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(USER_PATH)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (alone.returncode, alone.stdout.strip(), alone.stderr) == (0, "None None", "")


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import builtins\nbuiltins.SITE_RAN = 'yes'\n")
    done = run_python(tmp_path, {}, "import builtins; print(builtins.SITE_RAN)")
    assert (done.returncode, done.stdout.strip()) == (0, "yes"), done.stderr


def test_no_auto_hooks_is_for_a_command_of_ones_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplanner.cli import main

    args = ["run", "--db", str(tmp_path / "h.sqlite"), "--host", "local", "--no-auto-hooks", "--", "--max-steps", "3"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "--no-auto-hooks: only for a command of your own (the bundled trainer has no hook)"
    )
