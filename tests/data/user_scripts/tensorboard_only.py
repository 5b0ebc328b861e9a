"""A user's own script (tests) that reports only to TensorBoard: PyTorch's ``SummaryWriter`` under
``runs/`` of its working directory, a loss and a learning rate per step (no GPU Planner import)."""

import argparse

from torch.utils.tensorboard import SummaryWriter

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()

writer = SummaryWriter("runs/tiny")
for step in range(1, args.steps + 1):
    writer.add_scalar("train/loss", 3.0 / step, step)
    writer.add_scalar("train/learning_rate", 1e-3 * (1 - step / (args.steps + 1)), step)
    writer.flush()
writer.close()
