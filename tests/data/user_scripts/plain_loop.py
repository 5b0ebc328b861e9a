"""A user's own training script (tests): a tiny torch model on CPU, step telemetry through the plain
``gpuplanner_telemetry`` API, a checkpoint on SIGTERM and exit 75 (resume me), resumed from it."""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import gpuplanner_telemetry as gt

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--step-sleep", type=float, default=0.02)
p.add_argument("--ignore-term", action="store_true", help="note SIGTERM in a file and train on")
args = p.parse_args()

stop = []
marker = Path(os.environ.get("GPUPLANNER_RUN_DIR", ".")) / "got_term"


def on_term(signum, frame):
    if args.ignore_term:
        with open(marker, "a") as fh:
            fh.write(f"{signal.Signals(signum).name}\n")
    else:
        stop.append(signum)


signal.signal(signal.SIGTERM, on_term)  # before the slow import of torch: no stop is missed
import torch  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(1)
ckpt = Path(gt.checkpoint_dir() or ".") / "state.pt"
start = 0
if ckpt.exists():
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    gen.set_state(state["gen"])
    start = state["step"]
    print(f"resumed from step {start} (GPUPLANNER_RESUMED={os.environ.get('GPUPLANNER_RESUMED')})", flush=True)

for step in range(start + 1, args.steps + 1):
    x = torch.randn(16, 8, generator=gen)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    gt.log_step(step, tokens=16 * 32, samples=16, loss=loss.item(), lr=0.05)
    if step % 10 == 0:
        gt.log_eval(step, eval_loss=loss.item())
    time.sleep(args.step_sleep)
    if stop:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step}, ckpt)
        print(f"checkpointed at step {step}", flush=True)
        sys.exit(gt.EXIT_RESUME)
torch.save(model.state_dict(), Path(os.environ.get("GPUPLANNER_RUN_DIR", ".")) / "final.pt")
print("done", flush=True)
