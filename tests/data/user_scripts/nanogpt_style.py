"""A user's own script (tests): nanoGPT's loop shape, a tiny model trained on CPU with telemetry every
``log_interval`` iterations. The script writes what it really processed to ``truth.json`` so a test can
hold the history to it."""

import argparse
import json
import os
import time

import gpuplanner_telemetry as gt
import torch

p = argparse.ArgumentParser()
p.add_argument("--max-iters", type=int, default=40)
p.add_argument("--log-interval", type=int, default=5)
p.add_argument("--batch-size", type=int, default=12)
p.add_argument("--block-size", type=int, default=64)
args = p.parse_args()

torch.manual_seed(0)
vocab = 97
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 32), torch.nn.Linear(32, vocab))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens_per_iter = args.batch_size * args.block_size
truth = {"tokens": 0, "intervals": []}
tokens_since_log = 0
t0 = time.time()
for iter_num in range(1, args.max_iters + 1):
    x = torch.randint(0, vocab, (args.batch_size, args.block_size))
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab), x.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.01)  # a step that takes a little time, as a real one does
    tokens_since_log += tokens_per_iter
    truth["tokens"] += tokens_per_iter
    if iter_num % args.log_interval == 0:
        t1 = time.time()
        truth["intervals"].append({"iter": iter_num, "tokens": tokens_since_log, "dt": t1 - t0})
        gt.log_step(iter_num, tokens=tokens_since_log, loss=loss.item())  # all tokens since the last call
        tokens_since_log, t0 = 0, t1

with open(os.path.join(os.environ.get("GPUPLANNER_RUN_DIR", "."), "truth.json"), "w") as fh:
    json.dump(truth, fh)
