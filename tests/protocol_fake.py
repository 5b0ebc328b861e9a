"""A protocol fake: a standard-library stand-in for a user's training command (and for a sweep trial) that
speaks what GPU Planner's monitor reads, with barriers, so a test waits for a state instead of a clock.

Run under the monitor (``python -m trainer exec ... -- python tests/protocol_fake.py FLAGS``) it writes
step and eval records through ``gpuplanner_telemetry`` (the module the monitor puts on ``PYTHONPATH``;
docs/your-own-script.md), keeps a checkpoint (``$GPUPLANNER_CHECKPOINT_DIR/state.json``: the last step
and the loss) and follows the protocol of a preemptible job: SIGTERM (SIGINT, SIGUSR1) writes the
checkpoint and exits 75; a start that finds a checkpoint resumes after its step; the end exits
``--exit-code`` (0). No torch, no sleeps: a step takes microseconds, so a test that must catch the
command mid-run holds it at a barrier.

Barriers (``--barrier-dir DIR``, default ``$GPUPLANNER_RUN_DIR``): at a hold point named NAME the fake
writes ``DIR/NAME.reached`` (its pid; the SIGTERM handler is installed before) and waits until the
test creates ``DIR/NAME.release`` (a file, or a FIFO the test opens for writing). Hold points:

- ``--hold-before-start``: NAME ``start``, before the first step (after reading the checkpoint);
- ``--hold-at-step N``: NAME ``step-N``, after step N's record was written (repeatable);
- ``--hold-at-checkpoint``: NAME ``checkpoint-S``, while the checkpoint of step S is half written (the
  temporary file exists, the rename has not happened): a stop there must not lose the previous one.

A stop that arrives while the fake holds is handled at once (the handler writes the checkpoint of the
last finished step and exits 75). ``--ignore-term`` notes each stop signal in ``RUN_DIR/got_term`` and
trains on (for SIGKILL tests). Trial flags the sweep runner passes (``--max-steps``,
``--eval-every-steps``, ``--checkpoint-every-steps``, hyperparameters such as ``--lr``) are understood:
the loss is a deterministic function of the step and of ``--lr`` (lowest at ``--best-lr``), so a search
over it has something to find. Flags it does not know are ignored, as a trial's trainer flags may be;
``$PROTOCOL_FAKE_ARGS`` adds flags (a search gives every trial the same environment).

The test side: :class:`Barriers` (``wait``, ``release``) and :func:`command` (the argv to launch).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import stat
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
EXIT_RESUME = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
ARGS_ENV = "PROTOCOL_FAKE_ARGS"  # further flags, shell-quoted (read after the command line's)


def command(*flags: str) -> list[str]:
    """The argv that runs this fake with ``flags``."""
    return [sys.executable, str(HERE), *flags]


class Barriers:
    """The test's side of the fake's barriers in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def reached(self, name: str) -> bool:
        return (self.folder / f"{name}.reached").exists()

    def wait(self, name: str, timeout_s: float = 120.0) -> int:
        """Wait until the fake holds at ``name``; its pid. The timeout only ends a test whose fake died."""
        path = self.folder / f"{name}.reached"
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            assert time.monotonic() < deadline, f"the fake never reached its barrier {name!r} in {self.folder}"
            time.sleep(0.01)
        return int(path.read_text() or 0)

    def release(self, name: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.release").write_text("go")


# -- the fake command ---------------------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="protocol_fake")
    p.add_argument("--steps", "--max-steps", type=int, default=20, dest="steps")
    p.add_argument("--eval-every", "--eval-every-steps", type=int, default=0, dest="eval_every")
    p.add_argument("--checkpoint-every", "--checkpoint-every-steps", type=int, default=0, dest="checkpoint_every")
    p.add_argument("--hold-before-start", action="store_true")
    p.add_argument("--hold-at-step", type=int, action="append", default=[])
    p.add_argument("--hold-at-checkpoint", action="store_true")
    p.add_argument("--barrier-dir")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--best-lr", type=float, default=3e-3)
    p.add_argument("--tokens", type=int, default=512, help="tokens of a step")
    p.add_argument("--samples", type=int, default=16, help="samples of a step")
    # more flags from the environment: a search passes the same environment to every trial (--env)
    extra = shlex.split(os.environ.get(ARGS_ENV, ""))
    args, _unknown = p.parse_known_args([*argv, *extra])
    return args


class Fake:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run_dir = Path(os.environ.get("GPUPLANNER_RUN_DIR") or ".")
        self.barriers = Path(args.barrier_dir) if args.barrier_dir else self.run_dir
        self.ckpt = Path(os.environ.get("GPUPLANNER_CHECKPOINT_DIR") or self.run_dir / "checkpoints") / "state.json"
        self.step = 0  # the last finished step
        self.loss = None
        try:
            import gpuplanner_telemetry as gt  # on PYTHONPATH under the monitor

            self.gt = gt
        except ImportError:  # run by hand: records go nowhere
            self.gt = None

    def loss_at(self, step: int) -> float:
        distance = abs(math.log10(max(self.args.lr, 1e-12)) - math.log10(self.args.best_lr))
        return round(1.0 + distance + 2.0 / (1 + step), 6)

    def save(self, hold: bool = False) -> None:
        self.ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": self.step, "loss": self.loss}))
        if hold:
            self.hold(f"checkpoint-{self.step}")
        os.replace(tmp, self.ckpt)

    def on_stop(self, signum: int, frame: object) -> None:
        if self.args.ignore_term:
            with open(self.run_dir / "got_term", "a") as fh:
                fh.write(f"{signal.Signals(signum).name}\n")
            return
        # the last finished step is saved (a checkpoint held half written is replaced by a whole one)
        signal.signal(signum, signal.SIG_IGN)
        self.save()
        print(f"checkpointed at step {self.step} on {signal.Signals(signum).name}", flush=True)
        os._exit(EXIT_RESUME)  # from a handler that may interrupt a barrier's wait: no cleanup to race

    def hold(self, name: str) -> None:
        self.barriers.mkdir(parents=True, exist_ok=True)
        reached = self.barriers / f"{name}.reached"
        tmp = reached.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, reached)
        release = self.barriers / f"{name}.release"
        while True:
            try:
                mode = release.stat().st_mode
            except FileNotFoundError:
                time.sleep(0.005)  # polls a state the test sets; a stop signal interrupts it at once
                continue
            if stat.S_ISFIFO(mode):
                with open(release, "rb") as fh:  # blocks until the test opens the FIFO for writing
                    fh.read()
            return

    def run(self) -> int:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.on_stop)
        if self.ckpt.exists():
            state = json.loads(self.ckpt.read_text())
            self.step, self.loss = int(state["step"]), state.get("loss")
            print(f"resumed from step {self.step}", flush=True)
        a = self.args
        if a.hold_before_start:
            self.hold("start")
        while self.step < a.steps:
            step = self.step + 1
            loss = self.loss_at(step)
            # a stop waits until the step's record and the state that the checkpoint saves agree
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            if self.gt is not None:
                self.gt.log_step(step, tokens_total=step * a.tokens, samples_total=step * a.samples, loss=loss, lr=a.lr)
                if a.eval_every and step % a.eval_every == 0:
                    self.gt.log_eval(step, eval_loss=loss)
            self.step, self.loss = step, loss
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            if a.checkpoint_every and step % a.checkpoint_every == 0:
                self.save(hold=a.hold_at_checkpoint)
            if step in a.hold_at_step:
                self.hold(f"step-{step}")
        if self.gt is not None:
            self.gt.close()
        (self.run_dir / "final.json").write_text(json.dumps({"step": self.step, "loss": self.loss}))
        return int(a.exit_code)


if __name__ == "__main__":
    sys.exit(Fake(parse(sys.argv[1:])).run())
